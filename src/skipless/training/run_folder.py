"""One run, one folder: a new run never lands in another's folder, and a resume continues the same run.

A researcher's runs are days of GPU time, so two rules are checked before anything is written:

- **A new run needs a free folder.** Starting a run whose folder already holds files (forgetting
  ``RESUME=1`` is the easy mistake) would replace its ``backbone.pt``, ``last.ckpt`` and ``config.yaml``,
  add a second TensorBoard event file to its ``tb/`` and leave its ``eval/`` results beside a backbone
  they were not computed from. It is refused, with the two ways on: resume it, or name a new run.
- **A resume continues the run it names.** The requested config is compared with the run's saved
  ``config.yaml``. Keys that only say how or how long to run (``RESUMABLE``: more epochs, other
  devices for the same number of processes (``preflight.check_resume_world``), workers, logging, diagnostics,
  smoke-test limits, where the same data lives) may change; the changes are
  recorded in ``resumes.jsonl`` and ``config.yaml`` then holds the config the run continues with.
  Anything else (the model, the data, the recipe, the optimizer, the seed) is refused with the list of
  differing keys.

Under DDP only the first process checks (``is_first_process``): the others start once it has written
``config.yaml`` and would otherwise find the folder taken by their own run.
"""
from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ..atomic import atomic_write
from ..config import leaf_values, load_saved_config
from ..errors import SkiplessError

# Keys a resume may change: how and how long the same run goes on, never what it trains.
RESUMABLE = (
    "run.resume", "run.name", "run.root",  # the same folder either way: the saved config is read from it
    "data.root",
    "train.epochs", "train.devices", "train.num_nodes", "train.accelerator", "train.strategy", "train.num_workers",
    "train.log_every_n_steps", "train.knn_every_n_epochs", "train.knn_k", "train.keep_checkpoints",
    "train.export_epochs", "train.max_steps", "train.limit_train_batches",
    "train.val_every_n_epochs", "train.limit_val_batches",  # supervised runs: how often and how much to validate
    "train.compile", "optim.implementation",  # how the same computation runs (to float tolerance)
    # what the diagnostics callbacks measure and how often: they observe the run and never change it
    "diagnostics.every_n_epochs", "diagnostics.signals_every_n_steps", "diagnostics.layers", "diagnostics.images",
    "diagnostics.jacobian_images", "diagnostics.tol", "diagnostics.max_iter", "diagnostics.dtype",
    "diagnostics.budget_s",
)
RESUME_LOG = "resumes.jsonl"


class RunFolderTakenError(SkiplessError, FileExistsError):
    """A new run was asked for in a folder that already holds a run."""


class ResumeMismatchError(SkiplessError, ValueError):
    """RESUME=1 with a config that would train something else than the run being resumed."""


def is_first_process() -> bool:
    """True in the process of global rank 0, or when no launcher set a rank (read from the
    environment, before Lightning exists: ``RANK`` / ``SLURM_PROCID`` / ``NODE_RANK`` + ``LOCAL_RANK``)."""
    for var in ("RANK", "SLURM_PROCID", "NODE_RANK", "GROUP_RANK", "LOCAL_RANK"):
        if int(os.environ.get(var, "0") or 0) != 0:
            return False
    return True


def free_name(folder: Path) -> str:
    """The next free ``<name>-<k>`` beside ``folder`` (``x`` -> ``x-2``, ``x-2`` -> ``x-3``)."""
    match = re.fullmatch(r"(.+)-(\d+)", folder.name)
    base, k = (match.group(1), int(match.group(2)) + 1) if match else (folder.name, 2)
    while (folder.parent / f"{base}-{k}").exists():
        k += 1
    return f"{base}-{k}"


def check_new_run(run_dir: Path) -> None:
    """Refuse a new run in a folder that already holds files (see the module docstring)."""
    if not run_dir.is_dir() or not any(run_dir.iterdir()):
        return
    held = sorted(p.name + ("/" if p.is_dir() else "") for p in run_dir.iterdir())
    shown = ", ".join(held[:5]) + (" ..." if len(held) > 5 else "")
    raise RunFolderTakenError(
        f"{run_dir} already holds a run ({shown}); continue it with RESUME=1 (run.resume=true), or start a new "
        f"run under another name with run.name={free_name(run_dir)} (nothing was written)")


def resume_changes(cfg: DictConfig, run_dir: Path) -> dict[str, tuple[Any, Any]]:
    """The keys that differ between the run's saved config and ``cfg``, as ``{key: (saved, now)}``;
    raises ``ResumeMismatchError`` when any of them may not change on a resume."""
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        raise ResumeMismatchError(f"RESUME=1 needs the run's config to check what it resumes, and {saved_path} is "
                                  "missing; restore it, or start a new run under another run.name")
    saved, now = leaf_values(load_saved_config(saved_path)), leaf_values(cfg)
    changed = {k: (saved.get(k), now.get(k)) for k in sorted(set(saved) | set(now)) if saved.get(k) != now.get(k)}
    refused = {k: v for k, v in changed.items() if k not in RESUMABLE}
    if refused:
        listed = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in list(refused.items())[:6])
        more = f" and {len(refused) - 6} more" if len(refused) > 6 else ""
        raise ResumeMismatchError(
            f"RESUME=1 would continue {run_dir} with another model, data or recipe ({listed}{more}); resume with "
            f"the run's own settings (saved in {saved_path}), or start a new run under another run.name")
    return {k: v for k, v in changed.items() if k != "run.resume"}


def record_resume(run_dir: Path, changes: dict[str, tuple[Any, Any]]) -> Path:
    """Append one line to ``resumes.jsonl``: when the run was resumed and which allowed keys changed."""
    path = run_dir / RESUME_LOG
    entry = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "changed": {k: list(v) for k, v in changes.items()}}
    before = path.read_text() if path.is_file() else ""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(before + json.dumps(entry) + "\n"))
