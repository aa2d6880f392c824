"""Per-step schedules of every method, written as DINO's (Caron et al., "Emerging Properties in
Self-Supervised Vision Transformers", ICCV 2021): learning rate, weight decay (and DINO's teacher
momentum) follow ``cosine_schedule``; DINO's teacher temperature follows ``linear_then_constant``. MAE's
learning rate (He et al. 2022, ``util/lr_sched.py``) is ``cosine_schedule`` with
``warmup_reaches_base=False``: the two differ only in the warm-up's last step.

``step_schedule`` is the ResNet recipes' learning rate (He et al. 2016, Sec. 3.4: "divided by 10"; the
PyTorch ImageNet example's ``adjust_learning_rate``, x 0.1 every 30 of 90 epochs).

All return one value per optimisation step (``epochs * steps_per_epoch`` values), precomputed as in
DINO's ``utils.cosine_scheduler`` so that a resumed run indexes the same array at its global step.
"""
from __future__ import annotations

import math

import numpy as np


def _check_lengths(epochs: int, steps_per_epoch: int, warmup_epochs: int) -> None:
    for name, value in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
        if int(value) != value or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if int(warmup_epochs) != warmup_epochs or warmup_epochs < 0:
        raise ValueError(f"warmup_epochs must be a non-negative integer, got {warmup_epochs}")
    if warmup_epochs > epochs:
        raise ValueError(f"the warm-up ({warmup_epochs} epochs) is longer than the training ({epochs} epochs)")


def cosine_schedule(
    base_value: float,
    final_value: float,
    epochs: int,
    steps_per_epoch: int,
    warmup_epochs: int = 0,
    start_warmup_value: float = 0.0,
    warmup_reaches_base: bool = True,
) -> np.ndarray:
    """Linear warm-up then cosine decay, one value per step (DINO's ``cosine_scheduler``, or MAE's).

    The warm-up goes linearly from ``start_warmup_value`` to ``base_value`` over
    ``W = warmup_epochs * steps_per_epoch`` steps. DINO includes both ends (``np.linspace``): step ``s``
    gets ``start + (base - start) s / (W - 1)``, its last warm-up step is already ``base``. MAE
    (``warmup_reaches_base=False``; ``lr_sched.adjust_learning_rate``: ``lr * epoch / warmup_epochs`` at the
    fractional epoch ``s / steps_per_epoch``) gets ``start + (base - start) s / W``, reaching ``base`` only at
    the first cosine step. The remaining ``n`` steps follow ``final + 0.5 * (base - final) * (1 + cos(pi * i
    / n))`` for ``i = 0 .. n-1`` in both, so the last value is just above ``final_value``.

    Args:
        base_value: value at the end of the warm-up and start of the cosine (peak lr, initial wd ...).
        final_value: value the cosine approaches at the end of training.
        epochs: training epochs.
        steps_per_epoch: optimisation steps per epoch.
        warmup_epochs: epochs of linear warm-up (0: none).
        start_warmup_value: value at the first warm-up step.
        warmup_reaches_base: DINO's warm-up, whose last step is ``base_value`` (True), or MAE's (False).

    Returns:
        float64 array of length ``epochs * steps_per_epoch``.

    Raises:
        ValueError: on non-positive lengths or a warm-up longer than the training.
    """
    _check_lengths(epochs, steps_per_epoch, warmup_epochs)
    total, warmup = int(epochs) * int(steps_per_epoch), int(warmup_epochs) * int(steps_per_epoch)
    warm = np.linspace(start_warmup_value, base_value, warmup, endpoint=warmup_reaches_base)
    i = np.arange(total - warmup)
    cosine = final_value + 0.5 * (base_value - final_value) * (1.0 + np.cos(math.pi * i / max(len(i), 1)))
    return np.concatenate((warm, cosine)).astype(np.float64)


def linear_then_constant(
    start: float, end: float, warmup_epochs: int, epochs: int, steps_per_epoch: int
) -> np.ndarray:
    """Linear warm-up from ``start`` to ``end`` over ``warmup_epochs`` epochs, then ``end``; one value per step.

    DINO's teacher temperature (``warmup_teacher_temp`` -> ``teacher_temp``): like DINO the value changes
    per epoch, ``np.linspace(start, end, warmup_epochs)`` (so the last warm-up epoch already uses
    ``end``), and is repeated over the steps of each epoch so that callers index it by global step like
    the other schedules.

    Args:
        start: value in the first epoch (DINO: 0.04).
        end: value from the last warm-up epoch on (DINO: 0.04 by default, 0.07 in its README's 300-epoch ViT-S run).
        warmup_epochs: epochs of warm-up (DINO: 30; 0: constant ``end``).
        epochs: training epochs.
        steps_per_epoch: optimisation steps per epoch.

    Returns:
        float64 array of length ``epochs * steps_per_epoch``.

    Raises:
        ValueError: on non-positive lengths or a warm-up longer than the training.
    """
    _check_lengths(epochs, steps_per_epoch, warmup_epochs)
    per_epoch = np.concatenate((np.linspace(start, end, int(warmup_epochs)),
                                np.full(int(epochs) - int(warmup_epochs), float(end))))
    return np.repeat(per_epoch, int(steps_per_epoch)).astype(np.float64)


LR_DROP_FACTOR = 0.1  # He et al. 2016 (Sec. 3.4) and PyTorch's ImageNet example: the lr "divided by 10"


def step_schedule(base_value: float, epochs: int, steps_per_epoch: int, drops: list[int],
                  warmup_epochs: int = 0, start_warmup_value: float = 0.0) -> np.ndarray:
    """``base_value`` times ``LR_DROP_FACTOR`` once per epoch of ``drops`` reached, one value per step.

    Epochs count from 0: ``drops=[30, 60]`` of 90 epochs gives epochs 0-29 ``base``, 30-59 ``base / 10`` and
    60-89 ``base / 100``, the PyTorch ImageNet example's ``lr * 0.1 ** (epoch // 30)``. A warm-up, if any, is
    ``cosine_schedule``'s (DINO's linear ramp whose last step is ``base_value``) over the first epochs.

    Raises:
        ValueError: on non-positive lengths, a warm-up longer than the training, or drops that are not
            increasing epochs within ``1 .. epochs - 1``.
    """
    _check_lengths(epochs, steps_per_epoch, warmup_epochs)
    drops = [int(d) for d in drops]
    if any(not 1 <= d < epochs for d in drops) or drops != sorted(set(drops)):
        raise ValueError(f"drops must be increasing epochs within 1..{int(epochs) - 1}, got {drops}")
    per_epoch = base_value * LR_DROP_FACTOR ** np.searchsorted(drops, np.arange(int(epochs)), side="right")
    values = np.repeat(per_epoch, int(steps_per_epoch)).astype(np.float64)
    warmup = int(warmup_epochs) * int(steps_per_epoch)
    values[:warmup] = np.linspace(start_warmup_value, base_value, warmup)
    return values
