"""Which parameters are decayed, each step's lr and weight decay on them, and DINO's gradient clipping:
shared by DINO, MAE and supervised training."""
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


def set_step_values(optimizer, lr: float, weight_decay: float) -> None:
    """This step's values from the schedules: ``lr`` on every group, ``weight_decay`` on the ``decay`` group
    only (``param_groups``: biases and 1-D parameters stay at 0). ``training/module_contract.py`` calls it at
    the start of every training module's step."""
    for group in optimizer.param_groups:
        group["lr"] = lr
        if group["name"] == "decay":
            group["weight_decay"] = weight_decay


@torch.no_grad()
def clip_gradients_per_parameter(params, max_norm: float) -> None:
    """DINO's clipping: each parameter's gradient is scaled to norm at most ``max_norm`` on its own,
    by ``min(1, max_norm / (norm + 1e-6))`` (DINO's ``utils.clip_gradients``).

    As foreach operations per (device, dtype): two kernels for all the norms and all the scalings
    instead of two per parameter, and no host-device sync (the factors stay tensors)."""
    grads: dict[tuple, list[torch.Tensor]] = {}
    for p in params:
        if p.grad is not None:
            grads.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
    for group in grads.values():
        norms = torch._foreach_norm(group, 2)
        torch._foreach_add_(norms, 1e-6)
        factors = torch._foreach_reciprocal(norms)
        torch._foreach_mul_(factors, max_norm)
        torch._foreach_clamp_max_(factors, 1.0)
        torch._foreach_mul_(group, factors)
