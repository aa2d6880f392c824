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


def layer_decay_groups(backbone: nn.Module, head: nn.Module, layer_decay: float) -> list[dict]:
    """Layer-wise lr decay (BEiT; MAE's fine-tuning, He et al. 2022 App. A.2) for a timm ViT ``backbone`` and its
    classifier ``head``: timm's ``param_groups_layer_decay``, with the head set in timm's own classifier slot
    (``backbone.head``) while it groups, so it is the top layer as in a timm classifier. Layer 0 is the patch
    embedding, class token and position table, block ``i`` is layer ``i + 1``, the head (and ``fc_norm``)
    the top ``L + 1``; a group's lr is scaled by ``layer_decay ** (L + 1 - layer)``. Weight decay as MAE's
    ``param_groups_lrd``: none on 1-D parameters and on the class token and position table
    (``no_weight_decay``). One difference from MAE's ``get_layer_id_for_vit``: timm's ``group_matcher`` puts
    the final ``norm`` (token pooling) with the last block, scale ``layer_decay``, where MAE gives it 1; with
    average pooling, MAE's fine-tuning default, ``norm`` is unused and the groups are MAE's
    (tests/test_finetune.py). Each group is named ``decay`` or ``no_decay`` for ``set_step_values`` and
    carries its ``lr_scale``."""
    from timm.optim import param_groups_layer_decay

    slot = backbone.head
    backbone.head = head
    try:
        timm_groups = param_groups_layer_decay(backbone, weight_decay=1.0, layer_decay=float(layer_decay),
                                               no_weight_decay_list=tuple(backbone.no_weight_decay()))
    finally:
        backbone.head = slot
    groups = []
    for group in timm_groups:
        decayed = group["weight_decay"] > 0
        groups.append({"params": group["params"], "name": "decay" if decayed else "no_decay",
                       "lr_scale": float(group["lr_scale"]), **({} if decayed else {"weight_decay": 0.0})})
    return groups


def set_step_values(optimizer, lr: float, weight_decay: float) -> None:
    """This step's values from the schedules: ``lr`` on every group (times its ``lr_scale`` under layer-wise
    decay, ``layer_decay_groups``), ``weight_decay`` on the ``decay`` groups only (``param_groups``: biases
    and 1-D parameters stay at 0). ``training/module_contract.py`` calls it at the start of every training
    module's step."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)
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
