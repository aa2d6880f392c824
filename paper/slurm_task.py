"""What a SLURM job of ``make paper`` runs: ``runner.run_job``, inside a callable that submitit can checkpoint,
so that a training stopped at its time limit or pre-empted is requeued and continues (as the official DINO's
``run_with_submitit.py`` does with its Trainer).

submitit runs the pickled ``SlurmTask(folder, job)`` in every task of the job. SLURM sends submitit's signal
(``SIGUSR2``, ``slurm.signal_delay_s`` before the time limit) to the job; in the task of global rank 0 submitit's
handler then calls ``checkpoint()``, dumps what it returns as the job's new pickle, requeues the job
(``scontrol requeue``: the same job id, pending again) and exits. Without a ``checkpoint`` method it would not
requeue ("timed-out and not checkpointable") and the training, a child process that gets no say, would leave
its marker ``running`` and its evaluations (``afterok``) pending for ever.

The training is a child process (``python -m skipless.pretrain ...``), which must have written its
checkpoint before the requeue kills the job. So ``checkpoint()`` forwards the signal to it (it may have had it
from SLURM already: a second one is harmless, its handler only sets a flag), waits for it to exit (at most
``slurm.signal_delay_s`` - 10 s, the rest being the requeue's), writes the marker ``preempted`` with the
checkpoint it stopped at, and returns the same call for the requeued job, whose training continues from that
checkpoint (``run.resume=auto``). An evaluation is not requeued (it would start again from its beginning into
the same limit): its marker says it reached its time limit, and the next ``make paper`` submits it again.

In the tasks of the other ranks submitit's handler does nothing; ``forwarding`` passes the signal (and SIGTERM,
which submitit's handler only logs) to their training too, which also stops through the ranks' joint decision
(``skipless/training/preemption.py``). A job ends FAILED in SLURM's eyes when it did not finish (a raised
``JobNotDone``), so that evaluations waiting on it with ``afterok`` do not start on a training that is not
there (they are cancelled: ``--kill-on-invalid-dep=yes``, ``slurm.py``), except in the tasks of ranks other
than 0 after a signal, whose early non-zero exit could end rank 0 before its checkpoint (``KillOnBadExit``).
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from skipless.errors import EXIT_BUSY, EXIT_PREEMPTED

from .jobs import Job, is_done, read_marker, write_marker
from .runner import is_first_task, is_training, run_job, stopped_at

RESERVE_S = 10  # of slurm.signal_delay_s, left to submitit's requeue and exit after the training stopped


class JobNotDone(RuntimeError):
    """The job ended without finishing: SLURM marks it FAILED, its ``afterok`` dependents never start."""


def submitit_signal() -> signal.Signals:
    """The signal submitit sends before a time limit and handles (``SUBMITIT_PREEMPT_SIGNAL``, default USR2)."""
    from submitit.core.job_environment import JobEnvironment

    return signal.Signals[f"SIG{JobEnvironment.USR_SIG}"]


def exit_status(child: subprocess.Popen) -> int | None:
    """The child's exit status once it exited, without reaping it (``WNOWAIT``): ``checkpoint()`` runs inside a
    signal handler that interrupted ``run_job``'s own ``wait``, which holds the ``Popen``'s lock and reaps it."""
    if child.returncode is not None:
        return child.returncode
    try:
        info = os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped by run_job's wait meanwhile: its returncode follows
        return child.returncode
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def stop(child: subprocess.Popen, sig: int, wait_s: float) -> int | None:
    """Send ``sig`` to the child if it still runs and wait for it to exit, at most ``wait_s``; its exit status,
    or None if it still runs."""
    if exit_status(child) is None:
        try:
            os.kill(child.pid, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    while (code := exit_status(child)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return code


class SlurmTask:
    """``run_job(folder, job)`` as a submitit-checkpointable callable (module docstring).

    Args:
        signal_delay_s: ``slurm.signal_delay_s``, how long before the time limit the signal comes; the
            training gets all of it but ``RESERVE_S`` to stop.
    """

    def __init__(self, signal_delay_s: float = 90) -> None:
        self.wait_s = max(float(signal_delay_s) - RESERVE_S, 1.0)
        self.child: subprocess.Popen | None = None  # the running command, in this process only

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "child": None}  # a process is not pickled with the requeued call

    def _started(self, child: subprocess.Popen) -> None:
        self.child = child

    def __call__(self, folder: str | Path, job: Job) -> int:
        folder = Path(folder)
        if is_done(folder, job):  # a job requeued after it finished (the signal came at its very end)
            return 0
        with forwarding(self):
            code = run_job(folder, job, started=self._started)
        self.child = None
        first = is_first_task()
        if code == EXIT_PREEMPTED and is_training(job) and not first:
            return code  # rank 0 requeues the job or ends it; an early failure here could kill it first
        if code == 0 and (not first or is_done(folder, job)):
            return code
        if code == EXIT_BUSY:
            raise JobNotDone(f"{job.name}: another run holds its folder; this job left the training to it")
        marker = read_marker(folder, job) or {}
        raise JobNotDone(f"{job.name}: {marker.get('status', 'failed')} (exit status {code}): "
                         f"{marker.get('error', 'see ' + job.log)}")

    def checkpoint(self, folder: str | Path, job: Job) -> Any:
        """Called by submitit in rank 0's task on its signal (module docstring): the same call to requeue
        (a ``DelayedSubmission``), or None for an evaluation, which is not requeued."""
        from submitit.helpers import DelayedSubmission

        folder = Path(folder)
        code = stop(self.child, submitit_signal(), self.wait_s) if self.child is not None else None
        if is_done(folder, job):
            return DelayedSubmission(self, folder, job)  # the requeued call returns at once
        me = os.environ.get("SLURM_JOB_ID")
        where = {"log": job.log, **({"slurm_job": me} if me else {})}
        name = submitit_signal().name
        if not is_training(job):
            write_marker(folder, job, "failed", exit_code=code, **where,
                         error=f"stopped by {name} at its time limit (slurm.eval_minutes) or a pre-emption; not "
                               "requeued (it would start from its beginning): the next make paper submits it again, "
                               "give it more time with ARGS=\"slurm.eval_minutes=...\"")
            return None
        if code is None and self.child is not None:
            said = (f"it had not stopped {self.wait_s:.0f} s after {name}; it continues from its newest checkpoint "
                    "when the job runs again")
        else:
            said = f"stopped after a checkpoint ({stopped_at(folder / job.log) or 'see its log'}); requeued"
        write_marker(folder, job, "preempted", exit_code=code, **where, error=said)
        return DelayedSubmission(self, folder, job)


@contextmanager
def forwarding(task: SlurmTask) -> Iterator[None]:
    """While the body runs under submitit's SLURM executor, pass submitit's signal and SIGTERM on to the task's
    running child before submitit's own handler (which checkpoints on rank 0, logs elsewhere)."""
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm" or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in {submitit_signal(), signal.SIGTERM}}

    def forward(signum: int, frame: Any) -> None:
        child = task.child
        if child is not None and exit_status(child) is None:
            try:
                os.kill(child.pid, signum)
            except ProcessLookupError:
                pass
        then = previous[signum]
        if callable(then):
            then(signum, frame)

    for sig in previous:
        signal.signal(sig, forward)
    try:
        yield
    finally:
        for sig, then in previous.items():
            signal.signal(sig, then if then is not None else signal.SIG_DFL)
