"""The start of every training run (pretraining, supervised): the resume and folder rules, checked
before any data or model is built, and the config written once the trainer exists.

``run.resume`` says whether the run continues from its checkpoint (``resume_mode``):

- ``true`` (``RESUME=1``): it must; a folder without a checkpoint is refused;
- ``false``: a new run, in a free folder (``run_folder.check_new_run``);
- ``auto`` (``RESUME=auto``): continue when the folder holds a checkpoint, else start. One command for the
  first start and every restart, which is what a cluster needs: a requeued SLURM job and a torchrun
  restart run the very command they ran before;
- null (the default): ``auto`` under SLURM or torchrun (``scheduler.scheduler_name``), else ``false``.

The checkpoint a resume starts from is the newest intact one (``resume_point``): ``last.ckpt`` (written at
every epoch end and every ``train.checkpoint_every_minutes``), else the newest ``epoch<N>.ckpt`` kept by
``train.keep_checkpoints``. Each rank decides alike: nothing writes a checkpoint before every rank has read
the folder.

An entry point holds the folder (``run_lock.hold_run_folder``) around both, so the checks read a
folder no other run writes into."""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import DictConfig

from ..config import save_config
from .preflight import check_resume_world, read_resume_checkpoint
from .run_folder import (NothingToResumeError, RunFolderTakenError, check_new_run, free_name, is_first_process, record_resume,
                         resume_changes, set_aside_attempt)
from .scheduler import scheduler_name
from .stale_files import remove_stale_files


class RunStart(NamedTuple):
    ckpt_path: str | None  # the checkpoint a resume starts from
    changes: dict[str, tuple[Any, Any]]  # the resumable keys that changed
    attempt: str | None = None  # how the attempt in the folder ended, when a new run sets its files aside
    said: str | None = None  # what run.resume auto (or a fallback checkpoint) decided, for the run's log


def resume_mode(value: Any) -> tuple[str, str]:
    """(``true`` | ``false`` | ``auto``, why) of a ``run.resume`` value (module docstring)."""
    if value is None:
        where = scheduler_name()
        return ("auto", f"run.resume auto under {where}") if where else ("false", "")
    if value == "auto":
        return "auto", "RESUME=auto"
    return ("true", "RESUME=1") if value is True else ("false", "")


def intact(path: Path) -> bool:
    """A checkpoint file whose zip directory reads (``torch.save``'s format; a truncated file has none). Its
    tensors are not read: this costs a few kilobytes of a file of gigabytes."""
    try:
        with zipfile.ZipFile(path) as archive:
            return bool(archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def resume_point(run_dir: Path) -> tuple[Path | None, str | None]:
    """(the checkpoint a resume of ``run_dir`` starts from, a line when it is not ``last.ckpt``). The newest
    intact one: ``last.ckpt``, then the kept ``epoch<N>.ckpt`` from the newest; when none is intact, the
    first of them (reading it gives the sentence that says why), and None when there is none."""
    folder = run_dir / "checkpoints"
    found = [p for p in (folder / "last.ckpt", *sorted(folder.glob("epoch*.ckpt"), reverse=True)) if p.is_file()]
    for path in found:
        if intact(path):
            said = (None if path == found[0] else
                    f"{found[0]} cannot be read (truncated or not a checkpoint); the run continues from {path}, the "
                    "newest intact checkpoint")
            return path, said
    return (found[0] if found else None), None


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
            f"same command without RESUME=1 (or with RESUME=auto), which starts the run afresh{kept}")


def checkpoint_position(ckpt: dict) -> str:
    """``epoch 3, step 1200, mid-epoch: 120 of 625 batches done`` of a checkpoint read by ``read_resume_checkpoint``."""
    position = (ckpt.get("callbacks") or {}).get("LoaderPosition") or {}
    done, total = position.get("batches_done"), position.get("batches_total")
    epoch = int(ckpt.get("epoch", 0))
    if done and total and done < total:
        return f"epoch {epoch + 1}, step {ckpt.get('global_step')}, mid-epoch: {done} of {total} batches done"
    return f"the end of epoch {epoch + 1}, step {ckpt.get('global_step')}"


def prepare_run(cfg: DictConfig, run_dir: Path) -> RunStart:
    """The checkpoint to resume from, the resumable keys that changed, an attempt to set aside, and what
    ``run.resume`` decided.

    A resume needs a readable checkpoint, the world size that wrote it and a config that trains the
    same thing; a new run needs a free folder, or one holding an attempt without a checkpoint. The folder
    rules are checked once, by rank 0 (``run_folder.py``)."""
    mode, why = resume_mode(cfg.run.resume)
    point, fallback = resume_point(run_dir)
    if mode == "true" and point is None:
        raise NothingToResumeError(nothing_to_resume(run_dir))
    resume = mode == "true" or (mode == "auto" and point is not None)
    said = fallback
    if resume:
        ckpt = read_resume_checkpoint(point)
        check_resume_world(ckpt, cfg, point)
        said = "; ".join(filter(None, [fallback, f"{why}: continues {run_dir} from {point.name} of "
                                                   f"{checkpoint_position(ckpt)}" if why else None]))
    elif mode == "auto":
        said = f"{why}: {run_dir} holds no checkpoint, so the run starts"
    if not is_first_process():
        return RunStart(str(point) if resume else None, {}, said=said)
    if resume:
        return RunStart(str(point), resume_changes(cfg, run_dir), said=said or None)
    return RunStart(None, {}, check_new_run(run_dir), said=said)


def record_start(cfg: DictConfig, run_dir: Path, start: RunStart) -> None:
    """Say what ``run.resume`` decided, remove what killed writes left (``stale_files.py``: the folder is held),
    set an earlier attempt's files aside, then write the resolved ``config.yaml`` (and a line of
    ``resumes.jsonl`` on a resume); rank 0 only, right before the fit, so a run refused on its data has moved
    nothing."""
    if start.said:
        print(f"  resume   {start.said}", flush=True)
    removed = remove_stale_files(run_dir)
    if removed:
        print(removed, flush=True)
    if start.attempt:
        set_aside_attempt(run_dir, start.attempt)
    save_config(cfg, run_dir)
    if start.ckpt_path is not None:
        record_resume(run_dir, start.changes, start.said)
