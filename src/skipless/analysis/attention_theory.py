"""Seeds 003 and 004's claims on the conditioning of attention outputs, as computations on random matrices and
on the suite's own attention modules.

- Seed 003, Prop. 4.1 (Eq. 5): for linear attention without the skip, ``kappa(X W_Q W_K^T X^T X W_V) <=
  C kappa(X)^3`` with ``C = kappa(W_Q) kappa(W_K) kappa(W_V)`` "statistically close to unity".
  ``prop41_terms`` returns both sides and ``C``; the proof's step ``kappa(AB) <= kappa(A) kappa(B)`` holds for
  square factors, so with as many tokens as channels (n >= d) the bound holds on every draw, while ``C``,
  a product of three Gaussian condition numbers, grows with d rather than staying near 1.
- Seed 003, Prop. 4.2 (Eq. 7): ``kappa(X M + X) << kappa(X M)``, ``M = W_Q W_K^T X^T X W_V`` (the proof
  assumes M positive semi-definite and sigma_min(X) < 1 < sigma_max(X)). ``prop42_terms`` returns both sides
  for a given weight scale: at the scale of an initialised ViT (weights of std 0.02, unit tokens) ``X M`` is
  small beside ``X`` and the skip leaves about ``kappa(X)``; with unit weights ``X M`` dominates and the skip
  changes little, so the claim holds at initialisation, not for any scale.
- Seed 004, Thm 2.2 (Eq. 8): a skipless OSA-only stack (one head, ``W_V W_O`` orthogonal) keeps the spectrum
  of the token kernel ``Sigma_l = X_l X_l^T`` (``Sigma_l = A Sigma_0 A^T``, A orthogonal), where softmax
  attention loses rank. ``attention_stack_spectra`` runs the suite's attention modules (``models/osa.py``,
  ``models/attention.py``) as such a stack and returns the eigenvalues of every ``Sigma_l``.
"""
from __future__ import annotations

import torch
from torch import nn


def kappa(m: torch.Tensor) -> float:
    """sigma_max / sigma_min of ``m`` (its nonzero-rank singular values: min(rows, columns) of them)."""
    s = torch.linalg.svdvals(m.double())
    return float(s[0] / s[-1])


def prop41_terms(n: int, d: int, generator: torch.Generator) -> dict[str, float]:
    """One draw of seed 003's Prop. 4.1 with X (n x d) and W_Q, W_K, W_V (d x d) i.i.d. N(0, 1): the left side,
    ``kappa(X)^3``, ``C`` and the right side ``C kappa(X)^3``."""
    return prop41_on(torch.randn(n, d, generator=generator, dtype=torch.float64), generator)


def prop41_on(x: torch.Tensor, generator: torch.Generator) -> dict[str, float]:
    """``prop41_terms`` on given tokens ``x`` (n x d), the weights drawn i.i.d. N(0, 1) from ``generator``."""
    x = x.double()
    d = x.shape[1]
    wq, wk, wv = (torch.randn(d, d, generator=generator, dtype=torch.float64) for _ in range(3))
    left = kappa(x @ wq @ wk.T @ x.T @ x @ wv)
    c = kappa(wq) * kappa(wk) * kappa(wv)
    return {"left": left, "kappa_x_cubed": kappa(x) ** 3, "C": c, "right": c * kappa(x) ** 3}


def prop42_terms(n: int, d: int, weight_std: float, generator: torch.Generator) -> dict[str, float]:
    """One draw of seed 003's Prop. 4.2: tokens ``X`` (n x d) i.i.d. N(0, 1) (the proposition's assumption; the
    scale a LayerNorm leaves), weights i.i.d. N(0, weight_std^2); ``kappa(X M + X)``, ``kappa(X M)``, ``kappa(X)``."""
    x = torch.randn(n, d, generator=generator, dtype=torch.float64)
    wq, wk, wv = (torch.randn(d, d, generator=generator, dtype=torch.float64) * weight_std for _ in range(3))
    m = wq @ wk.T @ x.T @ x @ wv
    return {"with_skip": kappa(x @ m + x), "without_skip": kappa(x @ m), "kappa_x": kappa(x)}


def orthogonal_value_output(attn: nn.Module, generator: torch.Generator) -> None:
    """Set a one-head attention module's ``W_V`` and ``W_O`` (timm's fused ``qkv`` and ``proj``) to random
    orthogonal matrices and their biases to 0, so ``W_V W_O`` is orthogonal (Thm 2.2's initialisation)."""
    dim = attn.proj.weight.shape[0]
    with torch.no_grad():
        for target in (attn.qkv.weight[2 * dim:], attn.proj.weight):
            q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=generator, dtype=torch.float64))
            target.copy_(q.to(target.dtype))
        for bias in (attn.qkv.bias, attn.proj.bias):
            if bias is not None:
                bias.zero_()


@torch.no_grad()
def attention_stack_spectra(attentions: list[nn.Module], x: torch.Tensor) -> list[torch.Tensor]:
    """The eigenvalues (descending) of ``Sigma_l = X_l X_l^T`` for ``l = 0 .. L``, where ``X_l`` is ``x`` (N x d)
    passed through the first ``l`` attention modules, without skips, norms or MLPs."""
    spectra = []
    for attn in [None, *attentions]:
        if attn is not None:
            x = attn(x.unsqueeze(0)).squeeze(0)
        kernel = (x.double() @ x.double().T)
        spectra.append(torch.linalg.eigvalsh(kernel).flip(0))
    return spectra
