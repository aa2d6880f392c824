"""``train.compile``: the backbones' forward (and its backward) compiled by ``torch.compile``.

``nn.Module.compile`` compiles in place, so parameter names, checkpoints and the exported backbone
stay those of the eager module. A model or a machine that inductor cannot compile (no C++ compiler, an
unsupported operator) must not stop a run: dynamo's ``suppress_errors`` runs the failing frames
eagerly instead, and the first such fallback is logged by torch. Compilation changes the order of
floating-point operations, not the computation: losses agree with eager ones to float tolerance
(tests/test_training_compile.py).
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn


def compile_in_place(modules: Iterable[nn.Module], enabled: bool) -> None:
    """Compile each module in place when ``enabled``, with eager fallback on compilation failure."""
    if not enabled:
        return
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    for module in modules:
        module.compile()
