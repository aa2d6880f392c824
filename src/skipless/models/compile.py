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


# ``train.compile``'s values besides false: true is torch.compile's default mode; ``reduce-overhead`` adds CUDA
# graphs (one replayed graph per input shape: DINO's two crop sizes and the teacher's, all fixed), which on a
# launch-bound small-batch step removes the kernels' launch cost; the ``max-autotune`` modes search GEMM
# kernels (minutes of compilation). On a CPU the CUDA-graph part does nothing.
COMPILE_MODES = ("reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_GRAPH_MODES = ("reduce-overhead", "max-autotune")  # the modes that replay CUDA graphs
_graphs = {"on": False}  # whether this process compiled a module into CUDA graphs (``new_graph_step``)


def compile_mode(setting: bool | str) -> str | None:
    """``train.compile`` -> torch.compile's mode: None for false, ``"default"`` for true, else the mode named."""
    if setting is False or setting is None:
        return None
    if setting is True:
        return "default"
    if setting not in COMPILE_MODES:
        raise ValueError(f"unknown compile mode {setting!r}; expected true, false or one of {', '.join(COMPILE_MODES)}")
    return str(setting)


def compile_in_place(modules: Iterable[nn.Module], enabled: bool | str) -> None:
    """Compile each module whole, in place, when ``enabled`` (``train.compile``: true, or a mode of
    ``COMPILE_MODES``); eager on compilation failure."""
    mode = compile_mode(enabled)
    if mode is None:
        return
    _allow_compilation()
    _graphs["on"] = _graphs["on"] or mode in _GRAPH_MODES
    for module in modules:
        module.compile(dynamic=False, **({} if mode == "default" else {"mode": mode}))


def new_graph_step() -> None:
    """Tell CUDA-graph trees that a new training (micro-)step begins, so that replaying a graph may overwrite
    the previous step's outputs (torch.compiler.cudagraph_mark_step_begin); nothing unless a module of this
    process was compiled with CUDA graphs. ``training/micro_batches.micro_steps`` calls it per micro-batch."""
    if _graphs["on"]:
        import torch.compiler

        torch.compiler.cudagraph_mark_step_begin()


def compile_blocks(model: nn.Module, enabled: bool) -> None:
    """Compile each of ``model.blocks`` in place when ``enabled`` (the evaluators' feature extraction); a model
    without them (a timm ResNet, read whole for its pooled feature) is compiled whole."""
    if not enabled:
        return
    _allow_compilation()
    for block in getattr(model, "blocks", None) or [model]:
        block.compile(dynamic=False)
