"""A run that a scheduler stops keeps its work: a signal ends it with a checkpoint, and a cluster continues it.

A scheduler warns a job before it ends it. SLURM sends the job's ``--signal`` before the time limit
(``SIGUSR2`` 90 s before for ``make paper``'s submitit jobs, ``SIGUSR1`` in Lightning's SLURM recipes) and
``SIGTERM`` when it pre-empts or cancels a job; torchrun sends ``SIGTERM`` to its workers when it stops them.
``StopOnSignal`` takes all three, in every process of the run:

1. the step in progress finishes;
2. ``last.ckpt`` is written atomically with everything a resume needs, also in the middle of an epoch, once
   the divergence guard has read every rank's losses and parameters (nothing non-finite is ever saved)
   (weights, optimizer, schedules by step, EMA teacher, DINO's center, every rank's random state and the
   loader's position: ``loader_state.py``); at an epoch's last step the epoch's own checkpoint and exports
   are written instead (as always at an epoch's end), then the run stops;
3. the run ends with ``RunPreempted``: ``summary.json`` says ``preempted``, ``run.lock`` is released, the exit
   status is 75 (``errors.EXIT_PREEMPTED``; ``make paper`` marks the job ``preempted``, not ``failed``);
4. after a time-limit signal (``SIGUSR1``, ``SIGUSR2``) under SLURM, rank 0 requeues its own job
   (``scontrol requeue``, as Lightning's SLURM plugin does), unless ``run.requeue`` is false: ``make paper``'s
   jobs are requeued by submitit, as the official DINO's ``run_with_submitit.py`` is. ``SIGTERM`` is not
   requeued here: SLURM requeues a pre-empted job itself where its partition says so, and ``scancel`` sends
   ``SIGTERM`` too. The requeued job runs the same command; ``run.resume`` (auto under a scheduler,
   ``run_start.py``) continues it from ``last.ckpt``, and ``run.lock`` knows its own job (``run_lock.py``).

``train.checkpoint_every_minutes`` also writes ``last.ckpt`` in the middle of an epoch, every so many minutes
(30 at paper scale: an ImageNet epoch of DINO on 8 GPUs is 20-40 minutes, and a kill without warning, a
node that dies, loses at most that much). Lightning's own SLURM handling (an ``hpc_ckpt_<n>.ckpt`` on
``SIGUSR1`` that no resume reads) is kept out: these handlers are installed first.

**When the ranks decide.** A signal may reach one rank before another, and each rank's clock is its own, so
under DDP the ranks decide together, all-reducing one flag, every ``train.log_every_n_steps`` steps (the steps
at which the loss is read back anyway: ``divergence.py``), and at every epoch end; a single process decides
after every step. A run therefore trains at most ``log_every_n_steps - 1`` steps after the signal (seconds).
"""
from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from ..errors import EXIT_PREEMPTED, SkiplessError
from .callbacks import EpochCheckpoint, raise_if_diverged
from .scheduler import job_identity, requeue

SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM)
TIME_LIMIT = (signal.SIGUSR1, signal.SIGUSR2)  # the signals schedulers send before a time limit


class RunPreempted(SkiplessError):
    """A signal stopped the run after its checkpoint; the same command continues it. ``requeue``: the run
    should requeue its SLURM job (rank 0, time-limit signals, ``run.requeue``)."""

    exit_status = EXIT_PREEMPTED
    summary_status = "preempted"  # summary.json's status (RunSummary)

    def __init__(self, message: str, checkpoint: Path, signal_name: str, requeue: bool) -> None:
        super().__init__(message)
        self.checkpoint, self.signal_name, self.requeue = checkpoint, signal_name, requeue


class StopOnSignal(pl.Callback):
    """The signals and the timed checkpoints of the module docstring.

    Args:
        every_minutes: ``train.checkpoint_every_minutes`` (0 or None: at epoch ends only).
        requeue: ``run.requeue`` (``auto``: requeue after a time-limit signal under SLURM; false: never).
    """

    def __init__(self, every_minutes: float | None = None, requeue: str | bool = "auto") -> None:
        self.every_s = float(every_minutes or 0) * 60
        self.requeue = requeue
        self.received: int | None = None  # the first signal this process received
        self._previous: dict[int, Any] = {}
        self._last_save = time.monotonic()
        self._stopping: RunPreempted | None = None

    # ---- the handlers -------------------------------------------------------------------------------------
    def _handler(self, signum: int, frame: Any) -> None:
        if self.received is None:
            self.received = signum

    def _install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            if signal.getsignal(sig) != self._handler:
                self._previous.setdefault(sig, signal.getsignal(sig))
                signal.signal(sig, self._handler)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._install()  # before Lightning's: it adds no SIGUSR1 handler where one is set

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if getattr(trainer, "received_sigterm", False) and self.received is None:
            self.received = signal.SIGTERM  # caught by Lightning's handler in between
        self._install()  # again: Lightning wraps SIGTERM in its own when the fit starts
        self._last_save = time.monotonic()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.restore()

    def restore(self) -> None:
        """Put back the handlers found before the fit. Also called after the fit ends on an exception
        (``interrupt.fit``): Lightning then skips ``teardown`` and sets back the handlers it found, these."""
        if threading.current_thread() is threading.main_thread():
            for sig, previous in self._previous.items():
                signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}

    # ---- the decisions ------------------------------------------------------------------------------------
    def _decide(self, trainer: pl.Trainer, every_step: bool) -> tuple[bool, bool]:
        """(stop, save): whether any rank was signalled, and whether a timed checkpoint is due, decided by all
        ranks together at the same steps (module docstring)."""
        if trainer.world_size > 1 and not every_step:
            if trainer.global_step % max(int(trainer.log_every_n_steps), 1):
                return False, False
        due = bool(self.every_s) and time.monotonic() - self._last_save >= self.every_s
        signalled = self.received is not None
        if trainer.world_size > 1:  # one all-reduce: has any rank been signalled, is any rank's clock due
            flags = torch.tensor([float(signalled), float(due)], device=trainer.strategy.root_device)
            signalled, due = (v > 0 for v in trainer.strategy.reduce(flags, reduce_op="sum").tolist())
        return signalled, due

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        last_of_epoch = batch_idx + 1 >= trainer.num_training_batches
        last_step = 0 < trainer.max_steps <= trainer.global_step
        if last_of_epoch or last_step:
            return  # the epoch's end writes its checkpoint and exports, then on_train_epoch_end decides
        stop, due = self._decide(trainer, every_step=False)
        if stop or due:
            raise_if_diverged(trainer, pl_module)  # nothing non-finite is ever checkpointed (divergence.py)
            self._writer(trainer).save_mid_epoch(trainer)
            self._last_save = time.monotonic()
        if stop:  # raised at the next step's start, so that every callback has seen this step's end
            self._stopping = self._preempted(trainer, mid_epoch=True)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self._stopping is not None:
            raise self._stopping

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_save = time.monotonic()  # EpochCheckpoint, before this callback, has just written last.ckpt
        stop, _ = self._decide(trainer, every_step=True)
        done = trainer.current_epoch + 1 >= trainer.max_epochs or 0 < trainer.max_steps <= trainer.global_step
        if stop and not done:  # raised at the next step's start: the epoch's other end-of-epoch work runs first
            self._stopping = self._preempted(trainer, mid_epoch=False)

    # ---- the end ------------------------------------------------------------------------------------------
    @staticmethod
    def _writer(trainer: pl.Trainer) -> EpochCheckpoint:
        writer = next((c for c in trainer.callbacks if isinstance(c, EpochCheckpoint)), None)
        if writer is None:
            raise RuntimeError("StopOnSignal writes its checkpoints through the trainer's EpochCheckpoint, "
                               "which the trainer does not have")
        return writer

    def _preempted(self, trainer: pl.Trainer, mid_epoch: bool) -> RunPreempted:
        sig = self.received if self.received is not None else signal.SIGTERM  # another rank's
        name = signal.Signals(sig).name if self.received is not None else "a signal (on another rank)"
        requeue = (self.requeue not in (False, "false") and sig in TIME_LIMIT and trainer.is_global_zero
                   and job_identity().slurm_job is not None)
        last = self._writer(trainer).dirpath / "last.ckpt"
        where = (f"step {trainer.global_step}, in epoch {trainer.current_epoch + 1}" if mid_epoch
                 else f"the end of epoch {trainer.current_epoch + 1}, step {trainer.global_step}")
        return RunPreempted(f"{name} received: stopped after the checkpoint {last} of {where}", last,
                            name, requeue)


def after_preemption(err: RunPreempted) -> list[str]:
    """What a preempted run does once its trainer and lock are released: requeue its SLURM job when
    ``err.requeue`` says so, and the lines that say what happened and how it goes on."""
    lines = [f"preempted: {err}"]
    if err.requeue:
        job = job_identity().slurm_job
        refused = requeue(job)
        lines.append(f"requeued SLURM job {job}: it runs the same command again and continues from {err.checkpoint}"
                     if refused is None else
                     f"could not requeue SLURM job {job} ({refused}); the same command continues the run from "
                     f"{err.checkpoint}")
    else:
        lines.append(f"the same command continues it from {err.checkpoint} (RESUME=1, or RESUME=auto; under SLURM "
                     "or torchrun that is the default)")
    return lines
