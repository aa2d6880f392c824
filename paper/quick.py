"""``SCALE=quick``: an experiment's demo matrix shrunk to minutes per job on a CPU.

What it is for: running any table end to end (every training, export, evaluation and the report)
before a cluster run, so that a wrong key, a missing file or a broken report shows in minutes, not after
days of GPU time. Its numbers mean nothing: a few steps of training, evaluated on a few hundred images.

What it runs: the demo's cells (``experiment.py``: a file that does not name ``quick`` inherits the
demo's overrides, cells and epochs) with, after each cell's own overrides so that they win, the
overrides of its entry point listed in ``configs/paper.yaml`` under ``quick`` (``quick.pretrain``,
``quick.linear`` ...): one place for every table, DINO's, MAE's and the supervised ones. The checkpoints
evaluated are the demo's at the same fraction of the now shorter run (``quick_epochs``).
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from omegaconf import DictConfig, OmegaConf

from skipless.config import load_config

from .experiment import EVAL_ENTRIES, RUN_ENTRIES, ExperimentError

QUICK = "quick"


def quick_overrides(settings: Mapping[str, Any] | DictConfig | None = None) -> dict[str, list[str]]:
    """``{entry: overrides}`` appended to every job of that entry at the quick scale: ``settings`` (the
    ``quick`` section of a loaded ``paper`` config), or ``configs/paper.yaml``'s when None. An entry it
    does not list runs as the demo does; an unknown entry or an override that is not ``key=value`` is one
    sentence."""
    if settings is None:
        settings = load_config("paper").quick
    if isinstance(settings, DictConfig):
        settings = OmegaConf.to_container(settings, resolve=True)
    entries = {*RUN_ENTRIES, *EVAL_ENTRIES}
    out = {}
    for entry, overrides in (settings or {}).items():
        if entry not in entries:
            raise ExperimentError(f"paper quick.{entry}: unknown entry; expected some of {', '.join(sorted(entries))}")
        if not isinstance(overrides, list) or not all(isinstance(o, str) and "=" in o for o in overrides):
            raise ExperimentError(f"paper quick.{entry}: expected a list of key=value overrides, got {overrides!r}")
        out[str(entry)] = list(overrides)
    return out


def quick_epochs(epochs: Iterable[int], demo_length: int, length: int) -> list[int]:
    """The demo's checkpoint ``epochs`` of a ``demo_length``-epoch run at the same fraction of a
    ``length``-epoch one, rounded up (so never epoch 0, and the demo's last is the quick run's last):
    Tables 5-6's 1, 2, 3, 4 of 4 epochs are 1, 2 of 2."""
    return sorted({min(length, max(1, math.ceil(e * length / demo_length))) for e in epochs})
