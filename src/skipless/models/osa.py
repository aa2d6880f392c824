"""Orthogonal self-attention (OSA, seeds/004 Section 2): an orthogonal attention matrix ``A = exp(S)``.

Per head, with ``Q = X W^Q``, ``K = X W^K``, ``V = X W^V`` (N x d_v) and a learnable scalar alpha,

    S = alpha / sqrt(d_v) (Q K^T - K Q^T)        skew-symmetric, so A = exp(S) is in SO(N)     (Eq. 5)
    M-OSA(X) = sum_h A_h X W^V_h W^O_h = proj(concat_h A_h V_h)                              (Eq. 4)

``S`` has rank r <= 2 d_v and lives on the span of ``M = [Q, K]`` (N x 2 d_v). With ``B`` an
orthonormal basis of that span (Theorem 2.1, Eqs. 6-7),

    A X = X + B (exp(B^T S B) - I_r) B^T X,      B^T S B = alpha / sqrt(d_v) (B^T Q (B^T K)^T - B^T K (B^T Q)^T)

so the N x N matrices ``S`` and ``A`` are never formed: the cost is O(N d_v^2 + d_v^3) per head and
the memory O(N d_v) (Appendix B). ``basis`` chooses ``B``:

* ``qr``: the reduced QR of ``M`` (r = min(N, 2 d_v) columns). Exact, whatever ``M``'s conditioning
  (a rank-deficient ``M`` only adds orthonormal columns outside its span, which ``S`` ignores); but
  its gradient explodes when ``M`` nears rank deficiency (Section 2.3): 40 tokens of which 5 distinct
  gave an input gradient of about 2e7 against about 1 with Newton-Schulz (tests). A ViT-S head needs
  2 d_v = 128 independent tokens, which an image with large uniform regions may not have.
* ``newton-schulz``: ``ns_steps`` iterations ``M_{k+1} = M_k (3 I - M_k^T M_k) / 2`` from
  ``M_0 = M / (||M||_F + eps)`` (Eq. 9 writes ``M_0 = M``; the text after it normalises), converging to
  the polar factor of ``M``. Each singular value of ``M_0`` follows ``s -> (3 s - s^3) / 2``, which grows a small ``s`` by only 1.5x per step, and the
  Frobenius normalisation puts even a perfectly conditioned ``M`` at ``s = 1 / sqrt(2 d_v)``: the
  paper's K = 6 nearly converges for its d_v = 16 (s6 = 0.9876, ``A`` about 5% from ``exp(S)``) and
  far from it for ViT-S's d_v = 64 (s6 = 0.79, so ``B^T S B`` is scaled by about 0.6);
  ``tests/test_models_osa.py`` and ``make bench`` (section ``osa``) measure the error against QR as a
  function of K. Unconverged, ``A`` is not exactly
  orthogonal (Theorem A.1 bounds the error).

The two paths of ``SoftmaxAttention`` keep their meaning. The default (``fused``) applies the
low-rank form above. The explicit path (``explicit``, ``use_explicit_attention``; also every capture
of ``"attn"``) forms ``A = I + B (exp(B^T S B) - I) B^T`` as an N x N matrix from the *same* ``B``
and the same r x r exponential, then ``A V``: the attention map, equal to the low-rank path to
rounding. It is deliberately not the dense ``expm(S)`` of N x N: with Newton-Schulz that is another
function than the one the model computes, and the diagnostics must measure the model's. Both paths
are forward-mode differentiable (``torch.func.jvp`` goes through ``torch.linalg.qr`` and
``torch.linalg.matrix_exp``, checked in the tests), so the Jacobian diagnostics, which run under
``use_explicit_attention``, work on OSA as they do on softmax.

Precision: the basis and the exponential run in float32 at least, outside autocast (LAPACK's QR and
``matrix_exp`` have no bfloat16 kernels, and an orthonormal basis in bfloat16 is orthonormal to
about 1e-2 only); the result returns in the input's dtype.

Parameter names stay timm's (``qkv``, ``proj``), so the feature API, TokenCut's key capture and
backbone files work unchanged; ``alpha`` is one more parameter per layer (``blocks.i.attn.alpha``).
"""
from __future__ import annotations

import math

import torch

from ..errors import ModelArgumentError
from .attention import SoftmaxAttention

BASES = ("qr", "newton-schulz")
# Eq. 9's epsilon in M_0 = M / (||M||_F + eps): keeps an all-zero M (e.g. zero tokens) finite.
NS_EPS = 1e-7


def newton_schulz_basis(m: torch.Tensor, steps: int, eps: float = NS_EPS) -> torch.Tensor:
    """Eq. 9: ``steps`` Newton-Schulz iterations on ``M / (||M||_F + eps)``, per matrix of ``m`` (..., N, r)."""
    x = m / (torch.linalg.matrix_norm(m, keepdim=True) + eps)
    for _ in range(steps):
        x = 1.5 * x - 0.5 * x @ (x.transpose(-2, -1) @ x)
    return x


def orthonormal_basis(m: torch.Tensor, basis: str = "qr", ns_steps: int = 6) -> torch.Tensor:
    """An orthonormal basis ``B`` (..., N, r) of the column span of ``m`` (..., N, 2 d_v): the reduced
    QR's ``Q`` (r = min(N, 2 d_v)) or the Newton-Schulz iterate (r = 2 d_v, orthonormal once converged)."""
    if basis == "qr":
        return torch.linalg.qr(m, mode="reduced").Q
    if basis == "newton-schulz":
        return newton_schulz_basis(m, ns_steps)
    raise ModelArgumentError(f"unknown osa basis {basis!r}; expected one of: {', '.join(BASES)}")


def low_rank_factors(q: torch.Tensor, k: torch.Tensor, scale: torch.Tensor | float, basis: str = "qr",
                     ns_steps: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, exp(B^T S B) - I)`` for ``S = scale (Q K^T - K Q^T)``, batched over the leading dimensions.

    Args:
        q, k: (..., N, d_v) queries and keys.
        scale: ``alpha / sqrt(d_v)`` (a tensor when alpha is learned).

    Returns:
        ``B`` (..., N, r) and ``D = exp(B^T S B) - I_r`` (..., r, r), so that ``exp(S) = I + B D B^T``.
    """
    b = orthonormal_basis(torch.cat([q, k], dim=-1), basis, ns_steps)
    bt = b.transpose(-2, -1)
    bq, bk = bt @ q, bt @ k  # (..., r, d_v)
    g = bq @ bk.transpose(-2, -1)  # B^T Q K^T B
    s = scale * (g - g.transpose(-2, -1))  # B^T S B, skew-symmetric r x r
    eye = torch.eye(s.shape[-1], dtype=s.dtype, device=s.device)
    return b, torch.linalg.matrix_exp(s) - eye


def _working(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """The tensors in float32 at least (half precisions promoted)."""
    return [t.float() if t.dtype in (torch.float16, torch.bfloat16) else t for t in tensors]


class OrthogonalAttention(SoftmaxAttention):
    """Multi-head orthogonal self-attention (seeds/004), a ``SoftmaxAttention`` with another ``matrix``/``fused``.

    Built without biases whatever timm passes (seeds/004, Appendix E: "we do not use bias terms for
    any of the weights in the OSA layers"). ``alpha`` is one learnable scalar per layer, a 1-element
    parameter so that the optimizers treat it like the other gains (no weight decay in
    ``optim.param_groups``, plain Adam in SOAP).

    Attributes:
        basis: ``qr`` | ``newton-schulz`` (see the module docstring).
        ns_steps: K, the Newton-Schulz iterations (unused with ``qr``).
        alpha: the learnable scalar of ``S``, shape (1,).
    """

    DEFAULTS: dict[str, object] = {"basis": "qr", "ns_steps": 6, "alpha": 0.1}  # seeds/004, Appendix E

    def __init__(self, *args, **kwargs) -> None:
        kwargs["qkv_bias"] = False
        kwargs["proj_bias"] = False
        super().__init__(*args, **kwargs)

    def configure(self, basis: str = "qr", ns_steps: int = 6, alpha: float = 0.1) -> None:
        """Set the basis, K and alpha's value (the parameter is created once and refilled after)."""
        if basis not in BASES:
            raise ModelArgumentError(f"unknown osa basis {basis!r}; expected one of: {', '.join(BASES)}")
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 1:
            raise ModelArgumentError(f"osa ns_steps must be a positive integer (the paper uses 6), got {ns_steps!r}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
            raise ModelArgumentError(f"osa alpha must be a finite number (the paper starts at 0.1), got {alpha!r}")
        self.basis, self.ns_steps = basis, ns_steps
        if isinstance(getattr(self, "alpha", None), torch.nn.Parameter):
            with torch.no_grad():
                self.alpha.fill_(float(alpha))
        else:
            w = self.qkv.weight
            self.alpha = torch.nn.Parameter(torch.full((1,), float(alpha), dtype=w.dtype, device=w.device))

    def factors(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each head's ``(B, exp(B^T S B) - I)`` (``low_rank_factors``) in float32 at least, outside autocast."""
        with torch.autocast(q.device.type, enabled=False):
            q, k, alpha = _working(q, k, self.alpha)
            return low_rank_factors(q, k, alpha.to(q.dtype) * self.scale, self.basis, self.ns_steps)

    def matrix(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Each head's orthogonal ``A = I + B (exp(B^T S B) - I) B^T`` (B, heads, N, N), in ``q``'s dtype."""
        b, d = self.factors(q, k)
        eye = torch.eye(b.shape[-2], dtype=b.dtype, device=b.device)
        return (eye + b @ d @ b.transpose(-2, -1)).to(q.dtype)

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Each head's ``A V = V + B (D (B^T V))``: O(N d_v^2), no N x N matrix."""
        if self.training and self.attn_drop.p > 0:  # dropout acts on A: form it
            return self.attn_drop(self.matrix(q, k)) @ v
        b, d = self.factors(q, k)
        with torch.autocast(v.device.type, enabled=False):
            (w,) = _working(v)
            out = w + b @ (d @ (b.transpose(-2, -1) @ w))
        return out.to(v.dtype)


__all__ = ["BASES", "NS_EPS", "OrthogonalAttention", "low_rank_factors", "newton_schulz_basis", "orthonormal_basis"]
