"""Run a diagnostic on a model that may be training, and give the model back as it was.

The diagnostics (embedding condition numbers, effective rank, the per-block signals) are called
from inside a pretraining run, on a model in train mode: dropout and drop-path would make their
numbers random, so they measure in eval mode, without gradients, and put the mode back afterwards
so that the run they observe is not changed by being observed.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn


@contextmanager
def measuring(model: nn.Module) -> Iterator[nn.Module]:
    """``with measuring(model):`` eval mode and no grad inside; every submodule's mode restored after."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        for m, training in modes:
            m.training = training
