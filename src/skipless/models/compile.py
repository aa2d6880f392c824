"""``train.compile`` and the evaluators' ``compile``: modules compiled in place by ``torch.compile``.

``nn.Module.compile`` compiles in place, so parameter names, checkpoints and the exported backbone
stay those of the eager module. ``dynamic=False``: every input shape gets its own specialised graph.
DINO calls one backbone at two fixed shapes (the global and the local crops) and evaluators at one
batch shape plus a last, smaller batch, so a few specialised graphs (dynamo recompiles up to 8 per
module) beat one graph with symbolic sizes, which inductor cannot tile as well.

A model or a machine that inductor cannot compile (no C++ compiler, an unsupported operator) must not
stop a run: dynamo's ``suppress_errors`` runs the failing frames eagerly instead, and the first such
fallback is logged by torch. Compilation changes the order of floating-point operations, not the
computation: losses and features agree with eager ones to float tolerance
(tests/test_training_compile.py, tests/test_models_compile.py).
"""
from __future__ import annotations

from typing import Iterable

from torch import nn


def compile_in_place(modules: Iterable[nn.Module], enabled: bool) -> None:
    """Compile each module in place when ``enabled``, with eager fallback on compilation failure."""
    if not enabled:
        return
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    for module in modules:
        module.compile(dynamic=False)
