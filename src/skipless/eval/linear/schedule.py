"""The learning rate of a linear probe over training: linear warm-up, then a cosine to 0.

One formula serves the three presets (``configs/linear-preset/``). At time ``t`` in epochs
(fractional when the lr moves every step):

- ``t < warmup``: ``lr = base * t / warmup`` (MAE's ``util/lr_sched.adjust_learning_rate``, He et al.
  2022, with ``min_lr = 0`` as its linear probe sets it);
- else: ``lr = base * 0.5 * (1 + cos(pi * (t - warmup) / (epochs - warmup)))``.

With no warm-up and ``t`` the whole epoch this is PyTorch's ``CosineAnnealingLR(T_max=epochs,
eta_min=0)`` stepped once per epoch, DINO's ``eval_linear.py`` schedule (Caron et al. 2021). MAE calls
its function every iteration with ``t = epoch + step / steps_per_epoch`` (``per_step``).
"""
from __future__ import annotations

import math


def lr_at(base: float, t: float, epochs: int, warmup_epochs: float = 0.0) -> float:
    """The lr at time ``t`` (epochs since the start, 0-based) of a run of ``epochs`` (module docstring)."""
    if t < warmup_epochs:
        return base * t / warmup_epochs
    return base * 0.5 * (1.0 + math.cos(math.pi * (t - warmup_epochs) / (epochs - warmup_epochs)))


def step_time(epoch: int, step: int, steps_per_epoch: int, per_step: bool) -> float:
    """``t`` of ``step`` (0-based) of ``epoch``: ``epoch + step / steps_per_epoch`` when the lr moves every
    step, else ``epoch`` (the lr held for the whole epoch)."""
    return epoch + step / steps_per_epoch if per_step else float(epoch)
