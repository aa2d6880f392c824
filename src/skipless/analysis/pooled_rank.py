"""Effective rank of a CNN's pooled features, at its last layer and after every block (seeds/002, Sec. 5.1, Fig. 4).

Zhang et al. measure the effective rank (their Eq. 6; ``effective_rank.py`` pins the variant: the N x N
covariance of the samples' features, numpy's ``cov``, explicit zero rule) of a supervised ResNet-18 with decayed
shortcuts "on the bottleneck features": a CNN has no class token, so the feature of an image is its pooled
feature, timm's global average of the last stage (``model(x)`` with ``num_classes=0``), the input of the
classifier. Fig. 4a reads it at convergence per depth and alpha_min, Fig. 4b over training.

``pooled_feature_rank`` also gives the rank after each block (``timm_family.feature_blocks``: a ResNet's residual
blocks, a ConvMixer's mixer layers), each block's output averaged over its positions the way the last one is:
where along the network the rank is lost. The keys ``rho`` and ``erank`` mean what they mean for a ViT's class
tokens (``class_token_rank``), so the rank monitor and the reports read either.
"""
from __future__ import annotations

import torch
from torch import nn

from ..models.timm_family import feature_blocks
from .effective_rank import rho_and_erank
from .eval_mode import measuring


def spatial_mean(output: torch.Tensor) -> torch.Tensor:
    """A block's output averaged over its positions: (B, C, H, W) -> (B, C); tokens (B, N, C) -> (B, C)."""
    if output.ndim == 4:
        return output.mean(dim=(2, 3))
    if output.ndim == 3:
        return output.mean(dim=1)
    raise ValueError(f"a block output of shape {tuple(output.shape)} is neither a feature map nor tokens")


def pooled_features(model: nn.Module, images: torch.Tensor,
                    batch_size: int = 64) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``(pooled (N, C), [each block's spatial mean (N, C_l)])`` of ``images`` from one pass per batch, float32 on
    the CPU; eval mode, no gradients, the model's mode restored."""
    blocks = feature_blocks(model)
    captured: list[torch.Tensor] = []
    handles = [b.register_forward_hook(lambda module, args, out: captured.append(spatial_mean(out).float().cpu()))
               for b in blocks]
    pooled, per_block = [], [[] for _ in blocks]
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    try:
        with measuring(model):
            for start in range(0, images.shape[0], batch_size):
                captured.clear()
                pooled.append(model(images[start:start + batch_size].to(device, dtype)).float().cpu())
                for i, t in enumerate(captured):
                    per_block[i].append(t)
    finally:
        for h in handles:
            h.remove()
    return torch.cat(pooled), [torch.cat(t) for t in per_block]


def pooled_feature_rank(model: nn.Module, images: torch.Tensor, batch_size: int = 64) -> dict:
    """``{"rho", "erank", "images", "blocks": {"<i>": {"rho", "erank"}}}``: the effective rank of ``model``'s
    pooled features over ``images`` (N, 3, H, W), and of each block's averaged output (module docstring)."""
    pooled, per_block = pooled_features(model, images, batch_size)
    return {**rho_and_erank(pooled), "images": int(images.shape[0]),
            "blocks": {str(i): rho_and_erank(f) for i, f in enumerate(per_block)}}
