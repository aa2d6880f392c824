"""Position-embedding interpolation for crops of another size: DINO's rule or timm's.

A ViT learns one position embedding per patch of its native grid (14 x 14 for 224 px, patch 16);
a crop of another size gets a bicubic resample of that grid. DINO and timm resample differently:

- ``dino`` (Caron et al.'s ``interpolate_pos_encoding``): ``F.interpolate(..., scale_factor=
  (rows + 0.1) / gh, mode="bicubic")`` without antialiasing. The scale *factor*, not the size, drives
  the sampling grid, so the +0.1 (added in DINO to dodge a float rounding of the output size) also
  shifts where every new position samples the old grid, and a crop whose grid is native along one
  side (160 x 224 px) is still resampled along that side by 14.1/14.
- ``timm`` (``resample_abs_pos_embed``): resample to the exact size, with antialiasing, which on
  downsampling (the 96-px local crops of DINO) low-pass filters the grid first.

Both return the embedding unchanged on the native grid, so a plain timm or DINO state dict gives
the same outputs either way at 224 px. Elsewhere they differ. Measured with ``tests/pos_embed_measure.py``
(float32, CPU). No released weights are reachable from the test machine, so the 14 x 14 table is one
of two stand-ins: a smooth one (2-D sin-cos) and DINO's i.i.d. initialisation (the roughest a table
can be; learned tables lie between). Relative L2 difference per token, ``|timm - dino| / |dino|``,
max / mean over the patch tokens:

    pos-embed             96 px          160 px         480 px
    smooth (2-D sin-cos)  0.06 / 0.05    0.03 / 0.02    0.02 / 0.01
    i.i.d. (DINO's init)  0.89 / 0.81    0.60 / 0.42    0.23 / 0.10

and of the CLS output of a ViT-S (timm's random init, the table scaled to the norm of a patch
embedding, 8 random images), max / mean over the images:

    smooth (2-D sin-cos)  0.019 / 0.018  0.009 / 0.009  0.004 / 0.004
    i.i.d. (DINO's init)  0.48 / 0.43    0.10 / 0.09    0.018 / 0.017

so DINO-trained weights must use ``dino`` to reproduce DINO's features at local-crop sizes, and a
backbone trained with one rule should be evaluated with the same rule. New models use ``dino``
(``create_vit(pos_embed_interp=...)``); backbone files written before the choice existed were
trained with timm's rule and load as ``timm``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import resample_abs_pos_embed

POS_EMBED_INTERPS = ("dino", "timm")
DINO_OFFSET = 0.1  # DINO adds 0.1 to the new grid size before dividing (facebookresearch/dino issue 8)


def dino_resample(patch_pos: torch.Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int]) -> torch.Tensor:
    """DINO's bicubic resample of patch position embeddings (no prefix tokens).

    Args:
        patch_pos: (1, gh * gw, C), row-major over the old grid.
        new_grid: (rows, cols) of the crop's patch grid.
        old_grid: (gh, gw), the native grid.

    Returns:
        (1, rows * cols, C). DINO returns the table untouched when the patch count is native and the
        image square; here "the grid is native" decides (the two differ only for an image that is not
        a multiple of the patch, which the evaluators pad).
    """
    if tuple(new_grid) == tuple(old_grid):
        return patch_pos
    (rows, cols), (gh, gw) = new_grid, old_grid
    dim = patch_pos.shape[-1]
    grid = patch_pos.reshape(1, gh, gw, dim).permute(0, 3, 1, 2)
    out = F.interpolate(grid.float(), scale_factor=((rows + DINO_OFFSET) / gh, (cols + DINO_OFFSET) / gw),
                        mode="bicubic", align_corners=False)
    if out.shape[-2:] != (rows, cols):  # the +0.1 exists to make the floor land here
        raise RuntimeError(f"DINO position-embedding resample gave a {tuple(out.shape[-2:])} grid, not {(rows, cols)}")
    return out.to(patch_pos.dtype).permute(0, 2, 3, 1).reshape(1, rows * cols, dim)


def resample_pos_embed(pos_embed: torch.Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int],
                       num_prefix_tokens: int, mode: str) -> torch.Tensor:
    """The position embedding (prefix tokens first, unchanged) for a crop with ``new_grid`` patches."""
    if mode == "timm":
        return resample_abs_pos_embed(pos_embed, new_size=list(new_grid), old_size=list(old_grid),
                                      num_prefix_tokens=num_prefix_tokens)
    if mode != "dino":
        raise ValueError(f"unknown pos_embed_interp {mode!r}; expected one of: {', '.join(POS_EMBED_INTERPS)}")
    prefix, patches = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    return torch.cat([prefix, dino_resample(patches, new_grid, old_grid)], dim=1)
