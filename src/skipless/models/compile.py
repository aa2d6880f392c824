"""``train.compile`` and the evaluators' ``compile``: modules compiled in place by ``torch.compile``.

Training compiles each backbone whole (``compile_in_place``): one graph per input shape, forward and
backward. Evaluators call the blocks one by one (``extract_features``), so they compile each block
(``compile_blocks``): the blocks of a frozen ViT share their code and shapes, and dynamo reuses one
block graph for all of them. A trained student is not compiled that way because its blocks differ
by their drop-path rates, which dynamo specialises on: measured on ViT-S, 12 block graphs in 84 s
against one whole graph in 69 s.

``nn.Module.compile`` compiles in place, so parameter names, checkpoints and the exported backbone
stay those of the eager module. ``dynamic=False``: every input shape gets its own specialised graph.
DINO calls a backbone at two fixed shapes (the global and the local crops) and evaluators at one
batch shape plus a last, smaller batch, so a few specialised graphs beat one graph with symbolic
sizes; dynamo's limit on graphs per code object is raised to ``MAX_GRAPHS`` so that the student,
the teacher and the k-NN monitor all stay compiled.

A model or a machine that inductor cannot compile (no C++ compiler, an unsupported operator) must not
stop a run: dynamo's ``suppress_errors`` runs the failing frames eagerly instead, and the first such
fallback is logged by torch. Compilation changes the order of floating-point operations, not the
computation: losses and features agree with eager ones to float tolerance
(tests/test_training_compile.py). Its speed is in docs/results.md: none gained on the 2-core CPU.
"""
from __future__ import annotations

from typing import Iterable

from torch import nn

MAX_GRAPHS = 64


def _allow_compilation() -> None:
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), MAX_GRAPHS))


def compile_in_place(modules: Iterable[nn.Module], enabled: bool) -> None:
    """Compile each module whole, in place, when ``enabled``; eager on compilation failure."""
    if not enabled:
        return
    _allow_compilation()
    for module in modules:
        module.compile(dynamic=False)


def compile_blocks(model: nn.Module, enabled: bool) -> None:
    """Compile each of ``model.blocks`` in place when ``enabled`` (the evaluators' feature extraction); a model
    without them (a timm ResNet, read whole for its pooled feature) is compiled whole."""
    if not enabled:
        return
    _allow_compilation()
    for block in getattr(model, "blocks", None) or [model]:
        block.compile(dynamic=False)
