"""Where an evaluation writes its TensorBoard events: the backbone's ``<out_dir>/tb/``.

Every evaluator writes beside its JSON, into the backbone's output folder (``<run>/eval/tb``), so
``make tensorboard`` (``--logdir runs``) shows a run's training and each of its evaluations side
by side, and the same tags of several backbones on one card. An evaluation that draws curves over
epochs or over a sweep gets its own sub-folder, emptied first, so that running it again replaces
its curves instead of drawing a second set over the first.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any


def event_writer(out_dir: Path, name: str | None = None) -> Any:
    """A ``SummaryWriter`` on ``<out_dir>/tb``, or on a fresh ``<out_dir>/tb/<name>`` (module docstring)."""
    from torch.utils.tensorboard import SummaryWriter

    folder = Path(out_dir) / "tb"
    if name is not None:
        folder = folder / name
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    return SummaryWriter(str(folder))
