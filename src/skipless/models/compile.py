"""``train.compile`` and the evaluators' ``compile``: a ViT's blocks compiled in place by ``torch.compile``.

Regional compilation: each transformer block is compiled, not the whole network. The blocks of a ViT
share their code and their shapes, so dynamo compiles one block graph per input shape and reuses it
for every block (``inline_inbuilt_nn_modules``: the parameters are graph inputs, not constants), and
the compilation costs about one block instead of ``depth`` of them, while the blocks are nearly all
of the step's time (``make bench --only profile``). The patch embedding, the heads and the loss run
eagerly. A module without ``blocks`` is compiled whole.

``nn.Module.compile`` compiles in place, so parameter names, checkpoints and the exported backbone
stay those of the eager module. ``dynamic=False``: every input shape gets its own specialised graph.
DINO calls the blocks at two fixed shapes (the global and the local crops) and evaluators at one
batch shape plus a last, smaller batch, so a few specialised graphs beat one graph with symbolic
sizes; dynamo's limit on graphs per code object is raised to ``MAX_GRAPHS`` so that the student,
the teacher and the k-NN monitor all stay compiled.

A model or a machine that inductor cannot compile (no C++ compiler, an unsupported operator) must not
stop a run: dynamo's ``suppress_errors`` runs the failing frames eagerly instead, and the first such
fallback is logged by torch. Compilation changes the order of floating-point operations, not the
computation: losses and features agree with eager ones to float tolerance
(tests/test_training_compile.py).
"""
from __future__ import annotations

from typing import Iterable

from torch import nn

MAX_GRAPHS = 64


def compile_in_place(modules: Iterable[nn.Module], enabled: bool) -> None:
    """Compile each module's blocks (or the module) in place when ``enabled``, eager on failure."""
    if not enabled:
        return
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    limit = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"
    setattr(torch._dynamo.config, limit, max(getattr(torch._dynamo.config, limit), MAX_GRAPHS))
    for module in modules:
        blocks = getattr(module, "blocks", None)
        for part in (blocks if isinstance(blocks, (nn.ModuleList, nn.Sequential)) else (module,)):
            part.compile(dynamic=False)
