"""Running one job of an experiment (``jobs.py``), here or inside a SLURM job: its command, its log, and the
marker it ends with, including the two endings of a training that is not its own failure:

- **preempted** (exit status 75, ``skipless.errors.EXIT_PREEMPTED``): a signal stopped the training after a
  checkpoint (``skipless/training/preemption.py``); the next start of the same command continues it, since every
  training runs with ``run.resume=auto`` (``TRAINING_OVERRIDES``);
- **busy** (exit status 73, ``EXIT_BUSY``): another run still going holds the training's folder
  (``skipless/training/run_lock.py``), typically the SLURM job that a second ``make paper`` would have duplicated.
  That run owns the marker: this job must not mark it failed (which strands its evaluations) nor running under
  its own name. It is found before the command starts (``holder``: the lock's fields, the same ``gone`` test as
  the lock's), or from the command's exit status when two jobs start at once.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from skipless.errors import EXIT_BUSY, EXIT_PREEMPTED
from skipless.training.run_folder import LOCK
from skipless.training.run_lock import gone
from skipless.training.scheduler import job_identity

from .experiment import FINETUNE
from .jobs import REPO, Job, outputs_exist, error_line, marker_path, put_marker, read_marker, write_marker


# What every training job adds to its command: continue from the run's checkpoint when its folder has one, else
# start (an attempt without a checkpoint is set aside: skipless/training/run_start.py), and never requeue its
# SLURM job itself: submitit does (slurm_task.py). Place keys (PLACE_KEYS): a job's identity does not change.
TRAINING_OVERRIDES = ("run.resume=auto", "run.requeue=false")


def is_training(job: Job) -> bool:
    """A training run, or a fine-tuning evaluation (a training from a backbone, in its own run folder)."""
    return job.kind == "run" or job.entry == FINETUNE


def training_dir(folder: Path, job: Job) -> Path | None:
    """The run folder a training job writes (``run.root``/``run.name``); None for any other job."""
    if not is_training(job):
        return None
    if job.run_dir:
        return folder / job.run_dir
    where = dict(o.split("=", 1) for o in job.overrides if o.startswith(("run.root=", "run.name=")))
    return Path(where["run.root"]) / where["run.name"]


def prepared_command(job: Job) -> list[str]:
    """The command to run: the same in every task of a multi-process job and at every start of it (a
    requeued SLURM job runs it again, and the training decides itself whether it continues)."""
    command = job.command()
    return [*command, *TRAINING_OVERRIDES] if is_training(job) else command


def is_first_task() -> bool:
    """Rank 0 of a SLURM job's tasks (or the only process): the one that writes markers."""
    return os.environ.get("SLURM_PROCID", "0") == "0"


def holder(folder: Path, job: Job) -> dict[str, Any] | None:
    """Who holds a training's folder, when that is another run still going: the fields of its ``run.lock``
    (host, pid, SLURM job) that ``run_lock.gone`` cannot tell over; else None. A lock of this very SLURM job
    (another task's child) is not another run's. A lock still being written, or unreadable, is left to the
    training itself, which says in its log why it cannot start."""
    run_dir = training_dir(folder, job)
    if run_dir is None:
        return None
    try:
        owner = json.loads((run_dir / LOCK).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(owner, dict) or not owner:
        return None
    me = job_identity()
    if me.slurm_job and owner.get("slurm_job") == me.slurm_job and owner.get("slurm_restart", 0) == me.slurm_restart:
        return None
    return None if gone(owner) else owner


def _owner_text(owner: dict[str, Any]) -> str:
    job = f"SLURM job {owner['slurm_job']}, " if owner.get("slurm_job") else ""
    return f"another run ({job}pid {owner.get('pid')} on {owner.get('host')})" if owner else "another run"


def _leave_to_owner(folder: Path, job: Job, log: Path, owner: dict[str, Any], before: dict[str, Any] | None,
                    wrote: bool) -> None:
    """A training whose folder another live run holds ends here: that run owns the marker. It is left as it
    was, except that a marker naming this very SLURM job (which ``make paper`` submitted as a duplicate:
    FORCE=1, or a queue that forgot the running job) is made to name the run that holds the folder, so the
    next ``make paper`` waits for that one instead of submitting another duplicate."""
    with log.open("a") as out:
        out.write(f"busy: {_owner_text(owner)} holds {training_dir(folder, job) / LOCK}; this job leaves the "
                  "training and its marker to it\n")
    if not is_first_task():
        return
    me = job_identity().slurm_job
    if me and (before or {}).get("slurm_job") == me and owner:
        held = {"slurm_job": str(owner["slurm_job"])} if owner.get("slurm_job") else {}
        write_marker(folder, job, "running", host=owner.get("host"), pid=owner.get("pid"), **held,
                     log=str(log.relative_to(folder)), note=f"SLURM job {me} found this run going and left it to it")
        return
    current = read_marker(folder, job) or {}
    if wrote and current.get("pid") == os.getpid() and current.get("host") == socket.gethostname():
        if before is None:  # no marker before this job wrote its own
            marker_path(folder, job).unlink(missing_ok=True)
        else:
            put_marker(marker_path(folder, job), before)


def stopped_at(log: Path) -> str | None:
    """What a training stopped by a signal said last (``preempted: SIGUSR2 received: stopped after the
    checkpoint ... of step 1200, in epoch 3``, ``preemption.after_preemption``), without its prefix."""
    try:
        lines = [l.strip() for l in log.read_text(errors="replace").splitlines()]
    except OSError:
        return None
    said = [l[len("preempted:"):].strip() for l in lines if l.startswith("preempted:")]
    return said[-1] if said else None


def run_job(folder: str | Path, job: Job, env: dict[str, str] | None = None,
            started: Callable[[subprocess.Popen], None] | None = None) -> int:
    """Run one job to its end, log its output to ``logs/<job>.log`` and write its marker; returns the
    command's exit status. The same function runs locally and inside a SLURM job (``slurm_task.py``).

    The marker ends ``done`` or ``failed`` (with the error the job printed); a training stopped by a signal
    after its checkpoint (exit status 75) ends ``preempted``, to be continued by the next start; a training
    whose folder another live run holds (found here, before the command starts, or said by the command's
    exit status 73) ends without touching that run's marker (``_leave_to_owner``). Under SLURM the marker
    names the job (``slurm_job``), which ``make paper`` asks squeue about (``slurm.py``). ``env``: variables
    to set for the command (a local slot's ``CUDA_VISIBLE_DEVICES``); ``started``: called with the command's
    process once it runs (to forward a signal to it)."""
    folder = Path(folder)
    log = folder / job.log
    log.parent.mkdir(parents=True, exist_ok=True)
    first = is_first_task()
    me = job_identity().slurm_job
    where = {"log": str(log.relative_to(folder)), **({"slurm_job": me} if me else {})}
    before = read_marker(folder, job) if first else None
    owner = holder(folder, job)
    if owner is not None:
        _leave_to_owner(folder, job, log, owner, before, wrote=False)
        return EXIT_BUSY
    command = prepared_command(job)
    start = time.time()
    if first:
        write_marker(folder, job, "running", host=socket.gethostname(), pid=os.getpid(), **where)
    env = {**os.environ, **(env or {})}  # the jobs are python -m of the installed package: no path to add
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(command)}\n")
        out.flush()
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        if started is not None:
            started(child)
        code = child.wait()
    if not first:
        return code
    seconds = round(time.time() - start, 1)
    if code == EXIT_BUSY and is_training(job):
        _leave_to_owner(folder, job, log, holder(folder, job) or {}, before, wrote=True)
    elif code == EXIT_PREEMPTED and is_training(job):
        said = stopped_at(log) or "see its log"
        write_marker(folder, job, "preempted", seconds=seconds, exit_code=code, **where,
                     error=f"stopped after a checkpoint ({said}); its next start continues it")
    else:
        done = code == 0 and outputs_exist(folder, job)
        write_marker(folder, job, "done" if done else "failed", seconds=seconds, exit_code=code, **where,
                     **({} if done else {"error": error_line(log)}))
    return code
