"""Condition numbers of the sub-blocks' input and output embeddings (Ji et al., "Always Skip Attention",
Fig. 1b and Table 3).

Seed 003 (``/work/shared/seeds/003_*.txt``) measures, per layer of a ViT, the 2-norm condition
number (its Eq. 4, ``kappa(A) = s_max(A) / s_min(A)`` of the n x d token matrix of one image) of
four output embeddings, numbered as in its Figure 1a, and of the tokens entering the block:

    in                   X_in, the block's input (Table 3's kappa_in, "before each SAB")
    attn        (1)      the self-attention output without the skip, SA(X_in)
    attn+skip   (1)+(2)  with the identity skip, X_in + SA(X_in)  (its Eq. 1; Table 3's kappa_out)
    mlp         (3)      the MLP output without the skip
    mlp+skip    (3)+(4)  with the identity skip, X_mid + MLP(X_mid)           (its Eq. 3)

Its Section 1 reads the figure as "the SAB output embedding becomes highly ill-conditioned in the
absence of skip connections, with a condition number approaching e^6 ... the other three ...
around e^3". We read a block through ``sub_blocks.trace_block``: ``attn`` and ``mlp`` are the
branch outputs (layer scale included), ``x`` the block input and ``mid`` the state between the
sub-blocks (the MLP sub-block's input stream).

Choices, so that one Figure 1b compares models with any residual wiring:

- The skip is the paper's identity, ``x + attn`` and ``mid + mlp``, for every model. For a skip
  model these are the block's own ``mid`` and ``out``; for a skipless model they are what a skip
  *would* give on the same tokens (its ``mid`` is ``attn`` itself); for the decayed mode they differ
  from the block's ``g x + branch`` by the gain.
- The aggregate over images is the mean of ln(kappa): the paper plots and tabulates condition
  numbers "in log scale" (Table 3: "the average token condition numbers in log scale"; Fig. 1b's
  e^3 against e^6), so ln kappa is the comparable number and a geometric mean is what averaging on
  that axis means. A rank-deficient embedding gives ``inf``, and so does an all-zero one (the
  decayed mode zero-initialises the branches' output projections: at init its ``attn`` and ``mlp``
  are ``inf``). Rank-deficient means numerically: ``s_min <= s_max * max(n, d) * eps(float64)``
  (numpy's ``matrix_rank`` tolerance, ``condition_number.svd_condition``), so the verdict does not
  depend on whether the SVD kernel returns an exact zero as 0 or as 1e-78; the largest finite
  ln kappa is therefore about ln(1 / (max(n, d) eps)), 30.1 for ViT-S (197 tokens x 384).
- All n tokens (CLS included) form the matrix: the paper's X is "an input sequence of n tokens"
  and says nothing of dropping the class token.
- The images go through the blocks ``CHUNK`` at a time (seed 003's "10% validation sets" are 5 000
  ImageNet images; all at once, one ViT-B block's attention maps alone would be ~9 GB); the mean is over
  every image, whatever the chunks.
- The skip sums and the singular values in float64 (ln kappa of a skipless model reaches ~15, where
  float32 rounding of ``x + attn`` already moves the smallest singular value), min(n, d) of them (ViT-Tiny has d = 192 < n = 197).
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from ..models.features import resolve_layers
from .condition_number import svd_condition
from .eval_mode import measuring
from .sub_blocks import embed_tokens, traced_blocks

__all__ = ["EMBEDDINGS", "log_condition_numbers", "embedding_conditions"]

EMBEDDINGS = ("in", "attn", "attn+skip", "mlp", "mlp+skip")
CHUNK = 64  # images per forward (ours: memory only, the result does not depend on it)


def log_condition_numbers(tokens: torch.Tensor) -> torch.Tensor:
    """ln(s_max / s_min) of each (n, d) matrix of a (B, n, d) batch, float64 SVD; ``inf`` where
    ``s_min`` is numerically zero (``condition_number.numerically_zero``; an all-zero matrix included)."""
    n, d = tokens.shape[-2:]
    return torch.log(svd_condition(torch.linalg.svdvals(tokens.double()), n, d))


def embedding_conditions(model: nn.Module, images: torch.Tensor,
                         blocks: Iterable[int] | int | str = "all") -> dict[int, dict[str, float]]:
    """Mean over images of ln kappa of each sub-block output embedding (see the module docstring).

    Args:
        model: a ``SkiplessViT``; it is measured in eval mode without gradients and its mode restored.
        images: (B, 3, H, W).
        blocks: ``"all"``, a block index or a list of them (``features.resolve_layers``).

    Returns:
        ``{block: {"in", "attn", "attn+skip", "mlp", "mlp+skip": mean ln kappa}}``.
    """
    wanted = resolve_layers(blocks, len(model.blocks))
    logs: dict[int, dict[str, list[torch.Tensor]]] = {}
    with measuring(model):
        for chunk in images.split(CHUNK):
            x = embed_tokens(model, chunk)
            for i, _, t in traced_blocks(model, x, wanted):
                x64, attn, mid, mlp = (v.double() for v in (t.x, t.attn, t.mid, t.mlp))  # sums in float64 too
                embeddings = {"in": x64, "attn": attn, "attn+skip": x64 + attn, "mlp": mlp, "mlp+skip": mid + mlp}
                for name, e in embeddings.items():
                    logs.setdefault(i, {}).setdefault(name, []).append(log_condition_numbers(e))
    return {i: {name: float(torch.cat(parts).mean()) for name, parts in row.items()} for i, row in logs.items()}

