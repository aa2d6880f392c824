"""Cheap per-block signals to watch while a skipless run trains, for the pretraining callback.

When a ViT without skip connections goes wrong it does so in recognisable ways: the attention of a
block turns uniform (every token averages every other: row entropy near its maximum ln n, diagonal
weight near 1/n) and the tokens collapse onto one direction, the rank collapse of Dong et al. that
seed 003 (Section 4.2) recalls ("output embeddings of the SAB quickly converge to rank 1"), seen
as a mean pairwise cosine similarity between tokens near 1; or a block stops learning or blows up,
seen in its gradient norm and in the size of its updates relative to its weights. All of these
are per block and cost at most one forward pass, so a callback can log them often:

- ``attention_signals``: from one no-grad forward on the explicit attention path
  (``features.extract_features`` with kinds ``out`` and ``attn``);
- ``gradient_norms``: after ``backward``, before the optimiser zeroes the gradients;
- ``parameter_snapshot`` before an optimiser step and ``update_ratios`` after it.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..models.features import extract_features
from .condition_number import zero_threshold
from .eval_mode import measuring

__all__ = ["attention_signals", "gradient_norms", "mean_pairwise_cosine", "parameter_snapshot", "update_ratios"]


def attention_signals(model: nn.Module, images: torch.Tensor) -> dict[int, dict[str, float]]:
    """Per block, from one no-grad forward in eval mode (the model's mode is restored):

    - ``attention_entropy``: mean over images, heads and query tokens of the entropy (nats) of
      the attention row; ln n for uniform attention over n tokens, 0 for one-hot rows; only where
      the rows are distributions, no entry below 0 and every row summing to 1 within 1e-4 (an
      absolute tolerance, far above float32 rounding of a softmax row): linear attention's and OSA's
      rows have negative entries, and the entry is left out;
    - ``attention_diagonal``: mean weight a token puts on itself; 1/n for uniform attention;
    - ``token_cosine``: mean cosine similarity between distinct patch tokens of the block output
      (prefix tokens dropped), averaged over images; 1 when the tokens have collapsed onto one
      direction. A token whose norm is numerically zero, ``<= d * eps(float64)`` times the largest
      token norm of its image (``condition_number.zero_threshold``), has no direction: its cosine
      with every token is 0 (it still counts in the mean over pairs).
    - ``token_norm``: mean L2 norm of the block output's patch tokens (prefix tokens dropped), over images:
      the feature-norm growth that seed 002 (Sec. 3.2) sees early in training without its zero-init.
    Also ``tokens``: n, so that the uniform values can be read off.
    """
    prefix = int(getattr(model, "num_prefix_tokens", 1))
    with measuring(model):
        feats = extract_features(model, images, "all", ("out", "attn"))
    result = {}
    for i in range(len(model.blocks)):
        a = feats[("attn", i)].double()
        n = a.shape[-1]
        diagonal = torch.diagonal(a, dim1=-2, dim2=-1).mean()
        patches = feats[("out", i)][:, prefix:].double()
        result[i] = {"attention_diagonal": float(diagonal), "token_cosine": mean_pairwise_cosine(patches),
                     "token_norm": float(torch.linalg.vector_norm(patches, dim=-1).mean()), "tokens": n}
        if bool((a >= 0).all()) and torch.allclose(a.sum(-1), torch.ones((), dtype=a.dtype), atol=1e-4):
            result[i]["attention_entropy"] = float(-torch.special.xlogy(a, a).sum(-1).mean())
    return result


def mean_pairwise_cosine(tokens: torch.Tensor) -> float:
    """Mean cosine over pairs i != j of the (B, m, C) tokens, averaged over the batch; numerically zero
    tokens (see ``attention_signals``) are zero vectors here."""
    norms = torch.linalg.vector_norm(tokens, dim=-1, keepdim=True)
    zero = norms <= norms.amax(dim=1, keepdim=True) * zero_threshold(tokens.shape[-1], tokens.dtype)
    u = torch.where(zero, 0.0, tokens / torch.where(zero, 1.0, norms))
    m = u.shape[1]
    total = u.sum(dim=1).square().sum(-1)          # sum over all (i, j) pairs, diagonal included
    diag = u.square().sum((-2, -1))                # m, or fewer for zero tokens
    return float(((total - diag) / (m * (m - 1))).mean())


def _block_parameters(model: nn.Module) -> list[list[torch.nn.Parameter]]:
    return [list(block.parameters()) for block in model.blocks]


def _norm(tensors) -> torch.Tensor:
    """The L2 norm of several tensors taken as one vector, float64, one device sync when read."""
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(t.double()) for t in tensors]))


def gradient_norms(model: nn.Module) -> dict[int, float]:
    """L2 norm of the gradients of each block's parameters together; blocks with no gradient are left out."""
    result = {}
    for i, params in enumerate(_block_parameters(model)):
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            result[i] = float(_norm(g.detach() for g in grads))
    return result


def parameter_snapshot(model: nn.Module) -> dict[int, list[torch.Tensor]]:
    """Detached copies of each block's parameters, for ``update_ratios`` after the optimiser step."""
    return {i: [p.detach().clone() for p in params] for i, params in enumerate(_block_parameters(model))}


def update_ratios(model: nn.Module, snapshot: dict[int, list[torch.Tensor]]) -> dict[int, float]:
    """||theta_now - theta_snapshot|| / ||theta_snapshot|| per block (L2 over all its parameters).

    A block whose snapshot norm is exactly zero gives ``inf`` if it moved at all and 0 if not. Exact
    comparisons, and no tolerance, on purpose: these float64 norms are sums of squares, which cannot
    cancel, so they are 0 only when every entry is 0 whatever kernel summed them (and the squares of
    float32 or bf16 entries cannot underflow in float64).
    """
    result = {}
    for i, params in enumerate(_block_parameters(model)):
        if i not in snapshot:
            continue
        before = snapshot[i]
        change = float(_norm(p.detach().double() - b.double() for p, b in zip(params, before)))
        size = float(_norm(before))
        result[i] = change / size if size > 0 else (math.inf if change > 0 else 0.0)
    return result
