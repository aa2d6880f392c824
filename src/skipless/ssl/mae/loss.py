"""MAE's reconstruction loss and the reference a trained MAE must beat (He et al. 2022, Section 3).

The loss is the mean squared error between predicted and target pixels of each patch, averaged over
the masked patches only ("we compute the loss only on masked patches, similar to BERT"). It is
computed in float32 outside autocast: the mask sum of a large batch (1024 x 147 masked patches) is
not an exact bfloat16 number, and the per-patch statistics of the target want full precision.
"""
from __future__ import annotations

import torch

from ...full_precision import full_precision
from .patches import normalized_target, patchify


def masked_mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``sum_n mask_n * mean_pixels (pred_n - target_n)^2 / sum_n mask_n`` over all samples' patches.

    Args:
        pred, target: (B, N, D) patch vectors.
        mask: (B, N), 1 on masked patches (the ones that count), 0 on visible ones.
    """
    with full_precision():
        per_patch = (pred.float() - target.float()).pow(2).mean(dim=-1)
        mask = mask.float()
        return (per_patch * mask).sum() / mask.sum()


def reconstruction_target(images: torch.Tensor, p: int, norm_pix: bool) -> torch.Tensor:
    """The patch vectors a prediction is scored against: normalised per patch with ``norm_pix``
    (MAE's ``norm_pix_loss``, the seed's setting for its probes), else the plain pixels."""
    with full_precision():
        target = patchify(images.float(), p)
        return normalized_target(target)[0] if norm_pix else target


def mean_patch_baseline(images: torch.Tensor, p: int, mask: torch.Tensor, norm_pix: bool) -> torch.Tensor:
    """The loss of predicting every masked patch as its own mean colour, flat over the patch.

    It knows each patch's true mean, which no model is told, and nothing of its structure: a loss at
    or above it means the decoder learnt no more than a patch's average. With the normalised target
    the prediction is 0 and the loss is ``(D - 1) / D * var / (var + eps)`` averaged over masked
    patches (``D = p * p * 3``; the ``(D - 1) / D`` from the unbiased variance), just under 1 by
    construction; with plain pixels it is each patch's (biased) variance, averaged.
    """
    target = reconstruction_target(images, p, norm_pix)
    pred = torch.zeros_like(target) if norm_pix else target.mean(dim=-1, keepdim=True).expand_as(target)
    return masked_mse(pred, target, mask)
