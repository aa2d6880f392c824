"""The reconstruction panel of the seed's Figure 2 (Zhang et al., seed 002, Sec. 4 "Reconstruction").

One row per image: the original, the masked input (masked patches grey), the reconstruction, and the
reconstruction with the visible patches pasted back (MAE's Figures 2-4 show the last one).

A prediction in normalised-target space (``norm_pix_loss``) is turned back into pixels with each
target patch's own mean and std, as MAE's visualisation does. For a masked patch those come from the
original image, which the model never saw: the panel then shows the structure the model predicted
inside the patch's true brightness and contrast, and flatters it. The seed's Figure 2 avoids this:
its models for the figure were trained with a plain pixel loss (App. 8.1: "For visualization
purposes, as shown in Figure 2, we used L2 pixel-wise loss"), i.e. ``norm_pix_loss=False``.

Images arrive normalised with the ImageNet statistics (the suite's loaders); the panel undoes that
and clamps to [0, 1] for display.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torchvision.utils import make_grid

from ...data.conventions import IMAGENET_MEAN, IMAGENET_STD
from .patches import normalized_target, patchify, unpatchify

GREY = 0.5  # a masked patch in the display image


def _display(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Undo the per-channel normalisation and clamp to [0, 1]."""
    mean_t = torch.tensor(mean, dtype=images.dtype, device=images.device).view(1, -1, 1, 1)
    std_t = torch.tensor(std, dtype=images.dtype, device=images.device).view(1, -1, 1, 1)
    return (images * std_t + mean_t).clamp(0.0, 1.0)


def reconstruction_rows(images: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor, patch_size: int,
                        norm_pix: bool, mean: Sequence[float] = IMAGENET_MEAN,
                        std: Sequence[float] = IMAGENET_STD) -> torch.Tensor:
    """(B, 4, C, H, W) in [0, 1]: original, masked, reconstruction, visible patches pasted back.

    Args:
        images: (B, C, H, W) normalised with ``mean`` / ``std``.
        pred, mask: an MAE's output for these images ((B, N, p * p * C) and (B, N), 1 = masked).
        norm_pix: ``pred`` is in per-patch normalised space (de-normalised with each patch's statistics).
    """
    p = patch_size
    images = images.detach().float()
    grid = (images.shape[2] // p, images.shape[3] // p)
    pixels = pred.detach().float()
    if norm_pix:
        _, patch_mean, patch_std = normalized_target(patchify(images, p))
        pixels = pixels * patch_std + patch_mean
    recon = unpatchify(pixels, p, grid)
    masked_px = unpatchify(mask.detach().float()[..., None].expand(-1, -1, pixels.shape[-1]), p, grid)
    pasted = images * (1 - masked_px) + recon * masked_px
    original = _display(images, mean, std)
    masked = original * (1 - masked_px) + GREY * masked_px
    return torch.stack([original, masked, _display(recon, mean, std), _display(pasted, mean, std)], dim=1)


@torch.no_grad()
def reconstruction_panel(mae: torch.nn.Module, images: torch.Tensor, mask_ratio: float | None = None,
                         generator: torch.Generator | None = None, padding: int = 2) -> torch.Tensor:
    """(3, H', W') float grid, one row of four per image (see ``reconstruction_rows``), for ``mae``
    (a ``MaskedAutoencoder``) run in eval mode on ``images``; the module's mode is restored after."""
    was_training = mae.training
    mae.eval()
    try:
        _, pred, mask = mae(images, mask_ratio, generator)
    finally:
        mae.train(was_training)
    rows = reconstruction_rows(images, pred, mask, mae.patch_size, mae.norm_pix_loss)
    return make_grid(rows.flatten(0, 1), nrow=4, padding=padding, pad_value=1.0)
