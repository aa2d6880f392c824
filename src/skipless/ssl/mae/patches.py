"""Images to patch vectors and back, and MAE's per-patch normalised pixel target (He et al. 2022).

``patchify`` follows MAE's layout (``models_mae.py``): patches row-major over the grid, and within a
patch the pixels row-major with the channels innermost, i.e. the vector of a patch is indexed
``(py, px, channel)``. The decoder's linear head predicts in this layout, so a decoder trained here
reads the same as MAE's.

``normalized_target`` is MAE's ``norm_pix_loss`` (Section 4, "Reconstruction target"): each patch
is standardised by its own mean and variance. MAE computes ``x.var(dim=-1)``, the unbiased estimate,
and divides by ``(var + 1e-6) ** .5``; both are kept here (SPEC 3b).
"""
from __future__ import annotations

import torch

from ...errors import ModelArgumentError


def patchify(images: torch.Tensor, p: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/p) * (W/p), p * p * C), in MAE's (py, px, channel) order per patch.

    H and W must be multiples of ``p`` (they need not be equal).
    """
    B, C, H, W = images.shape
    if H % p or W % p:
        raise ModelArgumentError(f"image size {H}x{W} is not a multiple of the patch size {p}")
    rows, cols = H // p, W // p
    x = images.reshape(B, C, rows, p, cols, p)
    x = x.permute(0, 2, 4, 3, 5, 1)  # (B, rows, cols, py, px, C)
    return x.reshape(B, rows * cols, p * p * C)


def unpatchify(patches: torch.Tensor, p: int, grid: tuple[int, int] | None = None) -> torch.Tensor:
    """The inverse of ``patchify``: (B, N, p * p * C) -> (B, C, rows * p, cols * p).

    ``grid`` is (rows, cols); None means a square grid (N must then be a square number).
    """
    B, N, D = patches.shape
    if D % (p * p):
        raise ModelArgumentError(f"a patch vector of {D} values is not p * p * channels for patch size {p}")
    C = D // (p * p)
    if grid is None:
        side = round(N ** 0.5)
        grid = (side, side)
    rows, cols = grid
    if rows * cols != N:
        raise ModelArgumentError(f"{N} patches do not fill a {rows}x{cols} grid; pass the grid (rows, cols)")
    x = patches.reshape(B, rows, cols, p, p, C).permute(0, 5, 1, 3, 2, 4)  # (B, C, rows, py, cols, px)
    return x.reshape(B, C, rows * p, cols * p)


def normalized_target(patches: torch.Tensor, eps: float = 1e-6
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MAE's normalised pixel target: ``(t - mean) / (var + eps) ** .5`` per patch.

    Returns ``(target, mean, std)``, ``mean`` and ``std`` of shape (B, N, 1) with
    ``std = (var + eps) ** .5`` (unbiased ``var``), so ``target * std + mean`` gives back the pixels:
    a prediction in target space de-normalises the same way (the reconstruction panel does so).
    """
    mean = patches.mean(dim=-1, keepdim=True)
    var = patches.var(dim=-1, keepdim=True, unbiased=True)
    std = (var + eps) ** 0.5
    return (patches - mean) / std, mean, std
