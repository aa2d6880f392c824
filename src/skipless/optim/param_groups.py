"""Which parameters are decayed, and DINO's gradient clipping: shared by DINO and supervised training."""
from __future__ import annotations

import torch
from torch import nn


def param_groups(module: nn.Module) -> list[dict]:
    """DINO's groups: weights decayed; biases and 1-D parameters (norms, gains) not. Frozen
    parameters (the fixed ``weight_g``) are left out."""
    decay, no_decay = [], []
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if name.endswith(".bias") or p.ndim == 1 else decay).append(p)
    return [{"params": decay, "name": "decay"}, {"params": no_decay, "name": "no_decay", "weight_decay": 0.0}]


@torch.no_grad()
def clip_gradients_per_parameter(params, max_norm: float) -> None:
    """DINO's clipping: each parameter's gradient is scaled to norm at most ``max_norm`` on its own."""
    for p in params:
        if p.grad is not None:
            norm = p.grad.norm(2)
            p.grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
