"""One run, one folder: a new run never lands in another's folder, and a resume continues the same run.

A researcher's runs are days of GPU time, so two rules are checked before anything is written:

- **A new run needs a free folder.** Starting a run whose folder already holds files (forgetting
  ``RESUME=1`` is the easy mistake) would replace its ``backbone.pt``, ``last.ckpt`` and ``config.yaml``,
  add a second TensorBoard event file to its ``tb/`` and leave its ``eval/`` results beside a backbone
  they were not computed from. It is refused, with the two ways on: resume it, or name a new run.
- **An attempt without a checkpoint is started afresh.** A folder without ``checkpoints/last.ckpt``
  whose ``summary.json`` says ``interrupted`` or ``failed``, or that has no summary at all but the
  ``config.yaml`` every run writes first, holds an attempt that stopped before its first epoch end: there is nothing to resume, so refusing a new run
  there would leave the name blocked. The new run moves the attempt's files (config, logs, events,
  summary) into ``attempts/<n>/`` inside the folder, says so in one line, and starts afresh
  (``set_aside_attempt``); RESUME=1 on such a folder says to run without it. A run without a
  checkpoint whose summary says ``finished`` (its checkpoints deleted to save space) is kept and refused.
- **A resume continues the run it names.** The requested config is compared with the run's saved
  ``config.yaml``. Keys that only say how or how long to run (``RESUMABLE``: more epochs, other
  devices for the same number of processes (``preflight.check_resume_world``), workers, logging, diagnostics,
  smoke-test limits, where the same data lives) may change; the changes are
  recorded in ``resumes.jsonl`` and ``config.yaml`` then holds the config the run continues with.
  Anything else (the model, the data, the recipe, the optimizer, the seed) is refused with the list of
  differing keys.

Under DDP only the first process checks (``is_first_process``): the others start once it has written
``config.yaml`` and would otherwise find the folder taken by their own run. ``run.lock`` (``run_lock.py``)
and ``attempts/`` belong to the folder, not to a run: the checks look past them.
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
    "run.requeue", "train.checkpoint_every_minutes",  # how a run stops and saves, never what it trains
    "data.root",
    # how files are screened (data/reads.py): only broken or pathological images change; a run saved before
    # the keys existed has none of them, and must still resume
    "data.max_image_pixels", "data.min_image_side",
    # where the same colour augmentation runs (DINO's; its auto follows the machine, so a resume on another
    # kind of machine moves it anyway): the same distributions, other random draws from there on
    "data.augment_on",
    "train.epochs", "train.devices", "train.num_nodes", "train.accelerator", "train.strategy", "train.num_workers",
    "train.collective_timeout_minutes",
    "train.cpu_threads",  # the same computation on more or fewer threads
    "train.log_every_n_steps", "train.knn_every_n_epochs", "train.knn_k", "train.keep_checkpoints",
    "train.export_epochs", "train.max_steps", "train.limit_train_batches",
    "train.val_every_n_epochs", "train.limit_val_batches",  # supervised runs: how often and how much to validate
    "train.val_every_n_steps", "data.cache",  # the language model: how often to validate, where its built data lie
    "train.compile", "optim.implementation", "model.grad_checkpointing",  # how the same computation runs
    # what the diagnostics callbacks measure and how often: they observe the run and never change it
    "diagnostics.every_n_epochs", "diagnostics.signals_every_n_steps", "diagnostics.layers", "diagnostics.images",
    "diagnostics.jacobian_images", "diagnostics.tol", "diagnostics.max_iter", "diagnostics.dtype",
    "diagnostics.budget_s", "diagnostics.rank_images",
)
RESUME_LOG = "resumes.jsonl"
LOCK = "run.lock"  # run_lock.py
ATTEMPTS = "attempts"
AFRESH = ("interrupted", "failed")  # summary.json statuses of an attempt a new run may set aside


class RunFolderTakenError(SkiplessError, FileExistsError):
    """A new run was asked for in a folder that already holds a run."""


class NothingToResumeError(SkiplessError, FileNotFoundError):
    """RESUME=1 was asked for a run that has no checkpoint to continue from (any training method)."""


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


def held_files(run_dir: Path) -> list[Path]:
    """The files and folders of the run in ``run_dir`` (not its lock nor its earlier attempts), sorted."""
    if not run_dir.is_dir():
        return []
    return sorted(p for p in run_dir.iterdir() if p.name not in (LOCK, ATTEMPTS))


def attempt_status(run_dir: Path) -> str | None:
    """How the run in ``run_dir`` ended when it is an attempt a new run may set aside (no ``last.ckpt``;
    ``summary.json`` says interrupted or failed, or is missing beside a ``config.yaml``), else None."""
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        return None
    summary = run_dir / "summary.json"
    if not summary.is_file():  # a run writes config.yaml first: without it these are someone else's files
        return "stopped before it wrote a summary" if (run_dir / "config.yaml").is_file() else None
    try:
        status = json.loads(summary.read_text()).get("status")
    except (ValueError, AttributeError):
        return None  # a summary that cannot be read: kept, as a finished run is
    return status if status in AFRESH else None


def check_new_run(run_dir: Path) -> str | None:
    """Refuse a new run in a folder that holds a run (see the module docstring); returns how the attempt
    there ended when its files are to be set aside (``set_aside_attempt``), None for a free folder."""
    held = [p.name + ("/" if p.is_dir() else "") for p in held_files(run_dir)]
    if not held:
        return None
    status = attempt_status(run_dir)
    if status:
        return status
    shown = ", ".join(held[:5]) + (" ..." if len(held) > 5 else "")
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        raise RunFolderTakenError(
            f"{run_dir} already holds a run ({shown}); continue it with RESUME=1 (run.resume=true), or start a "
            f"new run under another name with run.name={free_name(run_dir)} (nothing was written)")
    what = ("a run with no checkpoint to resume whose summary.json does not say interrupted or failed"
            if (run_dir / "summary.json").is_file() else "files of no run (no config.yaml, checkpoint or summary)")
    raise RunFolderTakenError(
        f"{run_dir} holds {what} ({shown}), so they are kept; start a new run under another name with "
        f"run.name={free_name(run_dir)}, or move them away (nothing was written)")


def set_aside_attempt(run_dir: Path, status: str) -> Path:
    """Move the files of the attempt in ``run_dir`` into ``attempts/<n>/`` (the next free n) and say so."""
    files = held_files(run_dir)
    done = [int(p.name) for p in (run_dir / ATTEMPTS).glob("*") if p.name.isdigit()]
    dest = run_dir / ATTEMPTS / str(max(done, default=0) + 1)
    dest.mkdir(parents=True)
    for p in files:
        os.rename(p, dest / p.name)
    names = ", ".join(p.name + ("/" if (dest / p.name).is_dir() else "") for p in files)
    print(f"{run_dir} held an attempt with no checkpoint ({status}): its files ({names}) are now in {dest}, and "
          "the run starts afresh", flush=True)
    return dest


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


def record_resume(run_dir: Path, changes: dict[str, tuple[Any, Any]], said: str | None = None) -> Path:
    """Append one line to ``resumes.jsonl``: when the run was resumed, which allowed keys changed, and what the
    run's log said of it (``said``: who resumed it from which checkpoint, ``run_start.py``)."""
    path = run_dir / RESUME_LOG
    entry = {"time": time.strftime("%Y-%m-%d %H:%M:%S"), "changed": {k: list(v) for k, v in changes.items()},
             **({"said": said} if said else {})}
    before = path.read_text() if path.is_file() else ""
    return atomic_write(path, lambda tmp: Path(tmp).write_text(before + json.dumps(entry) + "\n"))
