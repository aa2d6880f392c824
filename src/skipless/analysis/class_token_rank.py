"""The seed's Figure 5 quantity during training: the effective rank of the last layer's class tokens.

Zhang et al. (seeds/002, Section 5, Eq. 6, Fig. 5) plot ``rho = -sum s_i log s_i`` of the normalised
singular values of the N x N covariance of the encoder's last-layer class tokens, over training,
beside the probe accuracy. ``class_token_rank`` measures it on N fixed images (``effective_rank.py``
pins the variant: numpy's ``cov`` of the samples, explicit zero rule) and adds Roy & Vetterli's
``exp(rho)``, which reads as a number of dimensions. "Last-layer features" is read two ways, both
reported: the last block's output (before the final norm) and the feature the evaluators take (after
it). N bounds the rank (``exp(rho) <= N``): 16 images cap it at 16, so the suite's default is 256
(``diagnostics.rank_images``).
"""
from __future__ import annotations

import torch
from torch import nn

from ..models.features import extract_features, final_layer_norm
from .effective_rank import rho_and_erank
from .eval_mode import measuring


def class_token_rank(model: nn.Module, images: torch.Tensor, batch_size: int = 64) -> dict[str, float]:
    """``{"rho_pre_norm", "erank_pre_norm", "rho", "erank", "images"}`` of ``model``'s last-block class
    tokens over ``images`` (N, 3, H, W), before and after the final norm (``model.norm``, or ``fc_norm``
    for an average-pooled model, as ``features.extract_features``); eval mode, no gradients."""
    pre, post = [], []
    last = len(model.blocks) - 1
    device = next(model.parameters()).device
    norm = final_layer_norm(model)
    with measuring(model):
        for start in range(0, images.shape[0], batch_size):
            x = images[start:start + batch_size].to(device)
            tokens = extract_features(model, x, [last], ("out",))[("out", last)]
            pre.append(tokens[:, 0].float().cpu())
            post.append(norm(tokens)[:, 0].float().cpu())  # one pass: the final norm is per token
    before, after = rho_and_erank(torch.cat(pre)), rho_and_erank(torch.cat(post))
    return {"rho_pre_norm": before["rho"], "erank_pre_norm": before["erank"], "rho": after["rho"],
            "erank": after["erank"], "images": int(images.shape[0])}
