"""The optimizer a recipe names (``optimizer.name``), over one parameter group per head.

- ``sgd``: ``torch.optim.SGD`` with momentum and weight decay, DINO's ``eval_linear.py`` (0.9, 0);
- ``adamw``: ``torch.optim.AdamW`` (Loshchilov and Hutter 2019) with ``betas`` and decoupled weight decay,
  the optimizer of seed 002's ImageNet-1k probe (App. 8.1), which ``zhang`` reads for its ImageNet-100 one;
- ``lars``: MAE's LARS (``eval/linear/lars.py``; He et al. 2022, App. A.2).

Each group carries its head's own lr (``ClassifierHeads.param_groups``), which the schedule rewrites.
"""
from __future__ import annotations

import torch

from .lars import LARS
from .recipe import Recipe


def build_optimizer(recipe: Recipe, groups: list[dict]) -> torch.optim.Optimizer:
    """The optimizer of ``recipe`` over ``groups`` (each with its ``lr``)."""
    if recipe.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=groups[0]["lr"], momentum=recipe.momentum, weight_decay=recipe.weight_decay)
    if recipe.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=groups[0]["lr"], betas=recipe.betas, weight_decay=recipe.weight_decay)
    if recipe.optimizer == "lars":
        return LARS(groups, lr=groups[0]["lr"], weight_decay=recipe.weight_decay, momentum=recipe.momentum,
                    trust_coefficient=recipe.trust_coefficient)
    raise ValueError(f"unknown optimizer {recipe.optimizer!r}; expected one of: sgd, adamw, lars")
