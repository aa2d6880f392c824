"""LARS, the optimizer of MAE's linear probing (``linear-preset=mae``).

Layer-wise Adaptive Rate Scaling (You et al. 2017, "Large Batch Training of Convolutional Networks",
Algorithm 1) in the form of MAE's ``util/lars.py`` (He et al. 2022, App. A.2; facebookresearch/mae),
which the MAE probe trains its head with at batch 16384. Per step and per parameter ``p`` with
gradient ``g``:

- a parameter with ``p.ndim > 1`` (a weight matrix):
  ``u = g + weight_decay * p``;
  ``q = trust_coefficient * ||p|| / ||u||`` when ``||p|| > 0`` and ``||u|| > 0``, else ``q = 1``;
  ``u = q * u``;
- a 1-D parameter (a bias, a norm's gain) is left out of both weight decay and adaptation: ``u = g``;
- then heavy-ball momentum on the scaled update, ``mu = momentum * mu + u`` (``mu`` starts at 0),
  and ``p = p - lr * mu``.

Norms are Frobenius norms over the whole tensor. MAE's class lives in its training utilities;
evaluators never import training code (``skipless.optim``), so the probe keeps its own copy here.
"""
from __future__ import annotations

from typing import Iterable

import torch


class LARS(torch.optim.Optimizer):
    """MAE's LARS (module docstring); each parameter group may set its own ``lr`` (the lr sweep)."""

    def __init__(self, params: Iterable, lr: float, weight_decay: float, momentum: float,
                 trust_coefficient: float) -> None:
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, trust_coefficient=trust_coefficient)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch.optim.Optimizer.step
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                update = p.grad
                if p.ndim > 1:
                    update = update.add(p, alpha=group["weight_decay"])
                    param_norm, update_norm = torch.linalg.vector_norm(p), torch.linalg.vector_norm(update)
                    one = torch.ones_like(param_norm)
                    trust = torch.where((param_norm > 0) & (update_norm > 0),
                                        group["trust_coefficient"] * param_norm / update_norm, one)
                    update = update.mul(trust)
                state = self.state[p]
                if "mu" not in state:
                    state["mu"] = torch.zeros_like(p)
                mu = state["mu"]
                mu.mul_(group["momentum"]).add_(update)
                p.add_(mu, alpha=-group["lr"])
        return loss
