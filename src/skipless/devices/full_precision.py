"""``full_precision()``: run a piece of code outside any autocast region, in the tensors' own dtypes.

Mixed precision is meant for the forward passes and the loss. Lightning opens its autocast around
the whole ``training_step``, so in a module with manual optimisation everything after the backward
pass (gradient clipping, the optimizer step, DINO's center and EMA teacher) would run under autocast
too, and matrix products there are rounded to bf16/fp16: SOAP's Kronecker factors ``G G^T`` came out
in bf16 and its in-place update of the fp32 factor failed ("expected dtype float for `end` but got
dtype c10::BFloat16"). The official DINO opens autocast only around the forward passes and the loss
(``main_dino.py``: ``with torch.cuda.amp.autocast(...)`` around the teacher, the student and
``dino_loss``); this context manager gives the same scope inside a Lightning step.

Autocast keeps one switch per device type, so every device type on which it is on is switched off.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Iterator

import torch

DEVICE_TYPES = ("cpu", "cuda", "mps")


def autocast_device_types() -> list[str]:
    """The device types on which autocast is on at this point."""
    found = []
    for device_type in DEVICE_TYPES:
        try:
            if torch.is_autocast_enabled(device_type):
                found.append(device_type)
        except (RuntimeError, ValueError):  # a device type this build of torch does not know
            continue
    return found


@contextmanager
def full_precision() -> Iterator[None]:
    """Autocast off, on every device type where it is on, for the body (also usable as a decorator)."""
    with ExitStack() as stack:
        for device_type in autocast_device_types():
            stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


def at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 when it is in a 16-bit float dtype, else as it is: the losses' and the DINO head's
    upcast, which must leave the float64 of ``train.precision=64-true`` alone (``t.float()`` would round
    every float64 activation to float32 there, and a float32 input to float64 weights fails)."""
    return t.float() if t.is_floating_point() and t.element_size() < 4 else t
