"""MAE's per-sample random masking (He et al. 2022, Section 3, "Masking"; seed 002 follows MAE).

Each image gets its own uniformly random subset of patches to keep: one ``U(0, 1)`` noise value per
patch, an argsort, and the ``int(N * (1 - mask_ratio))`` patches with the lowest noise stay visible.
The count is MAE's formula, truncated, in floating point: ViT-B/16 at 224 px keeps 49 of 196
patches at ``mask_ratio = 0.75``. Truncation in floating point can leave one patch fewer than the
exact product suggests (``N = 10, mask_ratio = 0.9`` gives ``int(0.999...) = 0``), so a ratio that
leaves no visible patch, or no masked one, is refused rather than silently run.

Masking happens on the patch tokens after their position embedding is added (MAE's
``random_masking`` runs after ``x + pos_embed[:, 1:]``), so a visible token keeps its position.
"""
from __future__ import annotations

import numbers

import torch

from ...errors import ModelArgumentError


def visible_count(num_patches: int, mask_ratio: float) -> int:
    """How many of ``num_patches`` stay visible at ``mask_ratio``: MAE's ``int(N * (1 - r))``.

    Raises ``ModelArgumentError`` when ``mask_ratio`` is not strictly between 0 and 1 or leaves no
    visible or no masked patch (the loss averages over masked patches, so it needs at least one).
    """
    if isinstance(mask_ratio, bool) or not isinstance(mask_ratio, numbers.Real) or not 0.0 < mask_ratio < 1.0:
        raise ModelArgumentError(f"mask_ratio must be a number strictly between 0 and 1, got {mask_ratio!r}")
    keep = int(num_patches * (1 - mask_ratio))
    if not 0 < keep < num_patches:
        raise ModelArgumentError(
            f"mask_ratio {mask_ratio} keeps int({num_patches} * (1 - {mask_ratio})) = {keep} of {num_patches} "
            f"patches; it must leave at least one visible and one masked patch")
    return keep


def random_masking(x: torch.Tensor, mask_ratio: float, generator: torch.Generator | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keep a random ``int(N * (1 - mask_ratio))`` of each sample's ``N`` patch tokens.

    Args:
        x: (B, N, C) patch tokens (no CLS).
        mask_ratio: fraction of patches to mask, strictly between 0 and 1.
        generator: the random source of the noise (on ``x``'s device); None uses torch's global one.

    Returns:
        visible: (B, K, C) the kept tokens, in the order of increasing noise (a random order).
        mask: (B, N) float32, 1 where a patch is masked, 0 where it is visible, in the original
            patch order (row-major over the grid).
        ids_restore: (B, N) long; ``ids_restore[b, n]`` is where patch ``n`` sits in the shuffled
            order, so ``cat([visible, fill], 1).gather(1, ids_restore)`` puts tokens back in place.
    """
    B, N, C = x.shape
    keep = visible_count(N, mask_ratio)
    noise = torch.rand(B, N, device=x.device, generator=generator)
    ids_shuffle = noise.argsort(dim=1)
    ids_restore = ids_shuffle.argsort(dim=1)
    visible = x.gather(1, ids_shuffle[:, :keep, None].expand(-1, -1, C))
    # Rank < keep means visible; ranks are ids_restore, so the mask needs no second gather.
    mask = (ids_restore >= keep).to(torch.float32)
    return visible, mask, ids_restore
