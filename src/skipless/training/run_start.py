"""The start of every training run (pretraining, supervised): the resume and folder rules, checked
before any data or model is built, and the config written once the trainer exists."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from ..config import save_config
from ..ssl.errors import NothingToResumeError
from .preflight import check_resume_world, read_resume_checkpoint
from .run_folder import check_new_run, is_first_process, record_resume, resume_changes


def prepare_run(cfg: DictConfig, run_dir: Path) -> tuple[str | None, dict[str, tuple[Any, Any]]]:
    """(the checkpoint to resume from or None, the resumable keys that changed).

    A resume needs a readable ``last.ckpt``, the world size that wrote it and a config that trains the
    same thing; a new run needs a free folder. The folder rules are checked once, by rank 0 (``run_folder.py``)."""
    last = run_dir / "checkpoints" / "last.ckpt"
    if cfg.run.resume and not last.is_file():
        raise NothingToResumeError(f"RESUME=1 but there is no checkpoint to resume at {last}; "
                                   "start the run without RESUME or name the run with run.name=")
    if cfg.run.resume:
        check_resume_world(read_resume_checkpoint(last), cfg, last)
    first = is_first_process()
    changes = resume_changes(cfg, run_dir) if first and cfg.run.resume else {}
    if first and not cfg.run.resume:
        check_new_run(run_dir)
    return (str(last) if cfg.run.resume else None), changes


def record_start(cfg: DictConfig, run_dir: Path, changes: dict[str, tuple[Any, Any]]) -> None:
    """Write the resolved ``config.yaml`` (and a line of ``resumes.jsonl`` on a resume); rank 0 only."""
    save_config(cfg, run_dir)
    if cfg.run.resume:
        record_resume(run_dir, changes)
