"""The start of every training run (pretraining, supervised): the resume and folder rules, checked
before any data or model is built, and the config written once the trainer exists.

An entry point holds the folder (``run_lock.hold_run_folder``) around both, so the checks read a
folder no other run writes into."""
from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import DictConfig

from ..config import save_config
from .preflight import check_resume_world, read_resume_checkpoint
from .run_folder import (NothingToResumeError, RunFolderTakenError, check_new_run, free_name, is_first_process, record_resume,
                         resume_changes, set_aside_attempt)


class RunStart(NamedTuple):
    ckpt_path: str | None  # the checkpoint a resume starts from
    changes: dict[str, tuple[Any, Any]]  # the resumable keys that changed
    attempt: str | None = None  # how the attempt in the folder ended, when a new run sets its files aside


def nothing_to_resume(run_dir: Path) -> str:
    """RESUME=1 on a folder without ``last.ckpt``: the way on that the folder rule (``run_folder.py``) allows."""
    last = run_dir / "checkpoints" / "last.ckpt"
    try:
        afresh = check_new_run(run_dir) is not None
    except RunFolderTakenError:
        return (f"RESUME=1 but there is no checkpoint to resume at {last}, and {run_dir} holds a run that is kept; "
                f"start a new run under another name with run.name={free_name(run_dir)} (nothing was written)")
    kept = f" (its files are kept in {run_dir}/attempts/<n>/)" if afresh else ""
    return (f"RESUME=1 but there is no checkpoint to resume at {last} (one is written at each epoch end); run the "
            f"same command without RESUME=1, which starts the run afresh{kept}")


def prepare_run(cfg: DictConfig, run_dir: Path) -> RunStart:
    """The checkpoint to resume from, the resumable keys that changed, and an attempt to set aside.

    A resume needs a readable ``last.ckpt``, the world size that wrote it and a config that trains the
    same thing; a new run needs a free folder, or one holding an attempt without a checkpoint. The folder
    rules are checked once, by rank 0 (``run_folder.py``)."""
    last = run_dir / "checkpoints" / "last.ckpt"
    if cfg.run.resume and not last.is_file():
        raise NothingToResumeError(nothing_to_resume(run_dir))
    if cfg.run.resume:
        check_resume_world(read_resume_checkpoint(last), cfg, last)
    first = is_first_process()
    if not first:
        return RunStart(str(last) if cfg.run.resume else None, {})
    if cfg.run.resume:
        return RunStart(str(last), resume_changes(cfg, run_dir))
    return RunStart(None, {}, check_new_run(run_dir))


def record_start(cfg: DictConfig, run_dir: Path, start: RunStart) -> None:
    """Set an earlier attempt's files aside, then write the resolved ``config.yaml`` (and a line of
    ``resumes.jsonl`` on a resume); rank 0 only, right before the fit, so a run refused on its data has
    moved nothing."""
    if start.attempt:
        set_aside_attempt(run_dir, start.attempt)
    save_config(cfg, run_dir)
    if cfg.run.resume:
        record_resume(run_dir, start.changes)
