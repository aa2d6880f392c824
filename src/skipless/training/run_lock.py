"""A run holds its folder: ``<run>/run.lock``, from before its first file until it ends.

Two runs under one name at once (a resubmitted cluster job, two ``make paper`` calls) would both pass
the folder checks of ``run_folder.py`` and both write into one folder: two interleaved TensorBoard
event files and a ``backbone.pt`` either could have written. So the first thing a run does is create
``run.lock`` with ``O_CREAT | O_EXCL`` (atomic: of two runs, exactly one creates it), writing its host
and pid into it; the folder checks come after, on a folder no other run writes into. The second run
is refused in one sentence, having written nothing. The lock goes when the run ends, also on an
error or a Ctrl-C (``hold_run_folder`` is a context manager).

A run killed outright (SIGKILL, out of memory, a node that died) leaves its lock behind. The lock records
the host, the pid and the job the scheduler runs it as (``scheduler.job_identity``: SLURM's job id and
requeue count, torchrun's run id and restart count), and ``gone`` says when its run is over and the lock
may be taken over, said in one line:

- its pid no longer runs on this host;
- it is this very job, requeued by SLURM (the same job id, another requeue count) or restarted by
  torchrun (the same run id, a lower restart count): the scheduler ends every process of a job before it
  starts it again, on this node or another;
- its SLURM job has left the queue or ended, as squeue says (a job resubmitted by ``make paper`` meets the
  lock of the one that timed out).

Anything else is a run that may still be going (a live pid here, a SLURM job squeue lists as queued or
running, a lock from another host with no job, or a scheduler that cannot be asked): the refusal names
it and says which file to delete once that run is known to be gone.

Under DDP only the first process (``run_folder.is_first_process``) holds it: the others are the same run.
"""
from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import EXIT_BUSY, SkiplessError
from .run_folder import LOCK, free_name, is_first_process
from .scheduler import is_alive, job_identity, squeue_states


class RunFolderBusyError(SkiplessError, FileExistsError):
    """Another run, still going, holds the run folder."""

    exit_status = EXIT_BUSY  # make paper's job runner leaves the marker of the run that holds it alone


def _owner() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            **job_identity().fields()}


def _read(path: Path) -> tuple[str, dict]:
    """The lock's text and its fields ({} while its creator is still writing it, or if it is not ours)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return "", {}
    try:
        fields = json.loads(text)
    except ValueError:
        fields = {}
    return text, fields if isinstance(fields, dict) else {}


def _pid_gone(owner: dict) -> bool:
    """The lock's process ran on this host and its pid runs no process now."""
    if owner.get("host") != socket.gethostname() or not isinstance(owner.get("pid"), int):
        return False
    try:
        os.kill(owner["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # a process of another user: alive
        return False
    return False


def gone(owner: dict) -> str | None:
    """Why the run that wrote the lock ``owner`` is known to be over (module docstring), or None."""
    if _pid_gone(owner):
        return f"pid {owner['pid']} no longer runs on this host"
    me = job_identity()
    job = owner.get("slurm_job")
    if job:
        if job == me.slurm_job:
            if owner.get("slurm_restart", 0) != me.slurm_restart:
                return f"it is this SLURM job {job}, requeued (restart {me.slurm_restart})"
            return None  # the same incarnation of this job: a process of it may still hold the folder
        states = squeue_states([job])
        if states is not None and not is_alive(states.get(job)):
            return f"its SLURM job {job} has " + (f"ended ({states[job]})" if job in states else "left the queue")
        return None
    run = owner.get("torchrun_run")
    if run and run == me.torchrun_run and owner.get("torchrun_restart", 0) < me.torchrun_restart:
        return f"torchrun restarted this job (run id {run}, restart {me.torchrun_restart})"
    return None


def _create(path: Path) -> bool:
    """Create the lock with this process as its owner; False when it exists."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(_owner()) + "\n")
    return True


def _take_over(path: Path, stale: str) -> None:
    """Move the stale lock aside; if another run replaced it meanwhile, put that one back."""
    aside = path.with_name(f".{LOCK}.{os.getpid()}.stale")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # another run took it over first: the next _create decides
    if aside.read_text() == stale:
        aside.unlink()
        return
    try:  # a live lock created since the stale one was read
        os.link(aside, path)
    except FileExistsError:
        pass
    aside.unlink()


def _refusal(run_dir: Path, path: Path, owner: dict) -> str:
    job = f", SLURM job {owner['slurm_job']}" if owner.get("slurm_job") else ""
    who = (f"pid {owner.get('pid')} on host {owner.get('host')}{job}, started {owner.get('started')}" if owner
           else "a run still writing its lock")
    return (f"{run_dir} is held by another run that is still going ({who}: {path}); wait for it to end, or start "
            f"this one under another name with run.name={free_name(run_dir)} (if that run is gone, delete {path}; "
            "nothing was written)")


def acquire(run_dir: Path) -> Path:
    """Create ``run_dir/run.lock`` for this process, taking over a stale one (said in one line); raises
    ``RunFolderBusyError`` when a live run holds the folder."""
    path = run_dir / LOCK
    for _ in range(3):
        if _create(path):
            return path
        text, owner = _read(path)
        why = gone(owner) if owner else None
        if why is None:
            raise RunFolderBusyError(_refusal(run_dir, path, owner))
        print(f"{path} was left by a run that is over ({why}; it started {owner.get('started')}); this run "
              "takes the folder over", flush=True)
        _take_over(path, text)
    _, owner = _read(path)
    raise RunFolderBusyError(_refusal(run_dir, path, owner))


def release(path: Path) -> None:
    """Remove the lock if it is still this process's."""
    owner = _read(path)[1]
    if owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname():
        path.unlink()


@contextmanager
def hold_run_folder(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir`` for the body (first process only). Folders created for the lock alone are removed
    again when the body wrote nothing else into them, so a run refused later leaves nothing behind."""
    if not is_first_process():
        yield
        return
    run_dir = Path(run_dir)
    created = [p for p in (run_dir, *run_dir.parents) if not p.exists()]
    run_dir.mkdir(parents=True, exist_ok=True)
    path = acquire(run_dir)
    try:
        yield
    finally:
        release(path)
        for folder in created:  # deepest first; stops at the first that holds files
            try:
                folder.rmdir()
            except OSError:
                break
