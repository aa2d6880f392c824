"""The job scheduler a run lives under (SLURM, torchrun), as far as a run needs to know it.

A cluster run is one command that the scheduler starts, stops and starts again: SLURM requeues a job
that reached its time limit or was pre-empted (the same job id, ``SLURM_RESTART_COUNT`` one higher, maybe
on another node), torchrun restarts its workers after a failure (the same ``TORCHELASTIC_RUN_ID``,
``TORCHELASTIC_RESTART_COUNT`` one higher). So:

- ``job_identity``: this process's job as the environment names it; ``run.lock`` records it
  (``run_lock.py``), so that the same job, requeued or restarted, takes its own lock back;
- ``scheduler_name``: the scheduler this process runs under, if any: where ``run.resume`` left null means
  ``auto`` (continue from the run's checkpoint when it has one, else start), the one command that works
  for the first start and for every restart (``run_start.py``);
- ``squeue_states``: the state squeue gives each of some jobs, which tells a lock left by a job that has
  ended from one held by a job still queued or running, and ``make paper`` a job already submitted from one
  to submit again (``paper/slurm.py``);
- ``requeue``: ``scontrol requeue``, which a run calls on itself after a time-limit signal
  (``preemption.py``).

Every command has a timeout and its failure is a value, never an exception: a scheduler that cannot be
asked leaves the decision to the caller's safe side (a lock is kept, a job is not submitted twice).
"""
from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from typing import NamedTuple

# squeue's long state names (%T) of a job that holds or will hold its resources: it is not over.
ALIVE = frozenset({"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_FED",
                   "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
                   "SPECIAL_EXIT"})
TIMEOUT_S = 30  # a scheduler command that takes longer is taken as unanswered


class JobIdentity(NamedTuple):
    """This process's job: SLURM's job id and requeue count, torchrun's run id and restart count (None or 0
    where the process does not run under that scheduler)."""

    slurm_job: str | None
    slurm_restart: int
    torchrun_run: str | None
    torchrun_restart: int

    def fields(self) -> dict[str, str | int]:
        """The fields ``run.lock`` records (only those that are set)."""
        found: dict[str, str | int] = {}
        if self.slurm_job:
            found.update(slurm_job=self.slurm_job, slurm_restart=self.slurm_restart)
        if self.torchrun_run:
            found.update(torchrun_run=self.torchrun_run, torchrun_restart=self.torchrun_restart)
        return found


def _count(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env.get(name, "0") or 0)
    except ValueError:
        return 0


def job_identity(env: Mapping[str, str] | None = None) -> JobIdentity:
    """The job ``env`` (default: this process's environment) describes. torchrun's run id is its
    ``--rdzv-id`` (``none`` when not given); a run id ``none`` still tells a restart by its count."""
    env = os.environ if env is None else env
    return JobIdentity(slurm_job=env.get("SLURM_JOB_ID") or None, slurm_restart=_count(env, "SLURM_RESTART_COUNT"),
                       torchrun_run=env.get("TORCHELASTIC_RUN_ID") or None,
                       torchrun_restart=_count(env, "TORCHELASTIC_RESTART_COUNT"))


def scheduler_name(env: Mapping[str, str] | None = None) -> str | None:
    """``SLURM job 1234`` (``, restart 2`` after a requeue), ``torchrun`` (``restart 1``), or None outside both."""
    job = job_identity(env)
    if job.slurm_job:
        return f"SLURM job {job.slurm_job}" + (f", restart {job.slurm_restart}" if job.slurm_restart else "")
    if job.torchrun_run:
        return "torchrun" + (f", restart {job.torchrun_restart}" if job.torchrun_restart else "")
    return None


def squeue_states(job_ids: Iterable[str]) -> dict[str, str] | None:
    """``{job id: state}`` for the jobs squeue lists (pending, running, or ended within the last minutes);
    a job it does not list has left the queue, so it is over. None when squeue cannot be asked (not
    installed, no answer, an error other than an unknown job id)."""
    ids = sorted({str(j) for j in job_ids})
    if not ids:
        return {}
    if shutil.which("squeue") is None:
        return None
    try:
        done = subprocess.run(["squeue", "--noheader", "--format=%i %T", f"--jobs={','.join(ids)}"],
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        # squeue refuses a list of job ids it has all forgotten ("Invalid job id specified"): every one ended
        return {} if "invalid job id" in done.stderr.lower() else None
    states: dict[str, str] = {}
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            states[parts[0]] = parts[1].upper()
    return states


def is_alive(state: str | None) -> bool:
    """A job in ``state`` (squeue's, None: not listed) still holds or will hold its resources."""
    return state is not None and state.upper().split("+")[0] in ALIVE


def requeue(job_id: str) -> str | None:
    """``scontrol requeue <job_id>``; None when it was accepted, else why not (one line)."""
    if shutil.which("scontrol") is None:
        return "scontrol is not on the PATH"
    try:
        done = subprocess.run(["scontrol", "requeue", str(job_id)], capture_output=True, text=True,
                              timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"scontrol requeue {job_id} did not answer ({type(err).__name__})"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        return f"scontrol requeue {job_id} failed ({said[-1] if said else f'exit status {done.returncode}'})"
    return None
