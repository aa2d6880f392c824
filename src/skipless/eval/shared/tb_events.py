"""Where an evaluation writes its TensorBoard events: the backbone's ``<out_dir>/tb/``.

Every evaluator writes beside its JSON, into the backbone's output folder (``<run>/eval/tb``), so
``make tensorboard`` (``--logdir runs``) shows a run's training and each of its evaluations side
by side, and the same tags of several backbones on one card. An evaluation that draws curves over
epochs or over a sweep gets its own sub-folder, emptied first, so that running it again replaces
its curves instead of drawing a second set over the first.

A sweep (the probe's and ``make linear``'s learning rates) is one chart per quantity, not one per lr:
TensorBoard draws the same tag of several runs on one chart, so ``SweepWriter`` writes a tag ending in
``/lr=<lr>`` under the tag alone into a sub-run ``lr=<lr>`` of the evaluation's folder, and every other
tag into the folder itself (the best lr's value, beside the sweep on the same chart).
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

SWEEP_TAG = re.compile(r"^(?P<tag>.+)/lr=(?P<lr>[^/]+)$")


def event_writer(out_dir: Path, name: str | None = None) -> Any:
    """A ``SummaryWriter`` on ``<out_dir>/tb``, or on a fresh ``<out_dir>/tb/<name>`` (module docstring)."""
    from torch.utils.tensorboard import SummaryWriter

    folder = Path(out_dir) / "tb"
    if name is not None:
        folder = folder / name
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    return SummaryWriter(str(folder))


class SweepWriter:
    """``event_writer(out_dir, name)`` that sends ``<tag>/lr=<lr>`` to the sub-run ``lr=<lr>`` as ``<tag>``
    (module docstring); images, figures and other tags go to the evaluation's own folder."""

    def __init__(self, out_dir: Path, name: str) -> None:
        self.main = event_writer(out_dir, name)
        self.folder = Path(out_dir) / "tb" / name
        self.sweep: dict[str, Any] = {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        match = SWEEP_TAG.match(tag)
        if match is None:
            self.main.add_scalar(tag, value, step)
            return
        lr = match["lr"]
        if lr not in self.sweep:
            from torch.utils.tensorboard import SummaryWriter

            self.sweep[lr] = SummaryWriter(str(self.folder / f"lr={lr}"))
        self.sweep[lr].add_scalar(match["tag"], value, step)

    def __getattr__(self, name: str) -> Any:  # add_image, add_figure, add_text, flush ... of the main writer
        return getattr(self.main, name)

    def close(self) -> None:
        for writer in (self.main, *self.sweep.values()):
            writer.close()

    def __enter__(self) -> "SweepWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
