"""How a training run ends when it does not finish: Ctrl-C, a signal, an error, and the exit status of each.

Lightning catches the first Ctrl-C inside ``trainer.fit`` (``trainer/call.py``,
``_call_and_handle_interrupt``): it calls the callbacks' ``on_exception``, tears the trainer down,
ignores further Ctrl-C and ends with ``sys.exit(1)``. ``fit`` turns that exit back into the
``KeyboardInterrupt`` it was, so the entry point can print ``resume_message`` and exit with 130
(the shell's status for SIGINT); a Ctrl-C outside the fit arrives as a plain ``KeyboardInterrupt``.

``run_command`` is the one command line of the training entry points (``make pretrain``, ``make train``,
``make finetune``): the plan, the run, and its end. ``run_ended`` is that end when the run does not finish: a
``SkiplessError`` is one sentence and its ``exit_status``; a signal's ``RunPreempted`` (``preemption.py``)
requeues the job where it should and says how the run goes on (status 75); Ctrl-C says how to resume.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import lightning.pytorch as pl
import torch

from ..devices.device_memory import out_of_memory
from ..errors import EXIT_INTERRUPTED, SkiplessError, user_message
from .closing_lines import closing_lines
from .preemption import RunPreempted, StopOnSignal, after_preemption
from .run_plan import RunPlan
from .run_start import checkpoint_position


def fit(trainer: pl.Trainer, module: pl.LightningModule, loader: Any, ckpt_path: str | None,
        val_loader: Any = None) -> None:
    """``trainer.fit``; a Ctrl-C that Lightning turned into ``sys.exit(1)`` is raised as ``KeyboardInterrupt``."""
    try:
        trainer.fit(module, train_dataloaders=loader, val_dataloaders=val_loader, ckpt_path=ckpt_path)
    except SystemExit:
        if trainer.interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        for callback in trainer.callbacks:
            if isinstance(callback, StopOnSignal):
                callback.restore()  # the signals' handlers of before the run, also after an exception


def resume_message(argv: Sequence[str], run_dir: Path | None, target: str = "pretrain") -> str:
    """The sentence printed after Ctrl-C: the checkpoint a resume starts from and the exact command."""
    args = [a for a in argv if not a.startswith("run.resume=")]
    quoted = f' ARGS="{" ".join(shlex.quote(a) for a in args)}"' if args else ""
    last = run_dir / "checkpoints" / "last.ckpt" if run_dir is not None else None
    if last is not None and last.is_file():
        return (f"interrupted; resume from {last} ({written_at(last)}; later steps are redone) "
                f"with: make {target} RESUME=1{quoted}")
    if run_dir is None or not run_dir.is_dir():
        return f"interrupted before the run started; start it again with: make {target}{quoted}"
    # The folder holds this attempt's config and events but no checkpoint: the same command starts afresh
    # and sets them aside (run_folder.py).
    return (f"interrupted before any checkpoint was written in {run_dir} (one is written at each epoch end), so "
            f"there is nothing to resume; start again with: make {target}{quoted} (this attempt's files move to "
            f"{run_dir}/attempts/<n>/)")


def written_at(last: Path) -> str:
    """``written at the end of epoch 2, step 124`` (or mid-epoch) of a checkpoint, or less when it cannot be read."""
    try:
        return f"written at {checkpoint_position(torch.load(last, map_location='cpu', weights_only=False, mmap=True))}"
    except Exception:  # the message must not fail: the resume will say what is wrong with the file
        return "the last checkpoint written"


def run_ended(err: BaseException, argv: Sequence[str], run_dir: Path | None, target: str = "pretrain") -> int:
    """Say how the run ended on ``err`` (a ``SkiplessError`` or ``KeyboardInterrupt``) and return its exit status."""
    if isinstance(err, RunPreempted):
        print("\n" + "\n".join(after_preemption(err)), file=sys.stderr, flush=True)  # below the progress bar
        return err.exit_status
    if isinstance(err, SkiplessError):
        print(f"error: {user_message(err)}", file=sys.stderr)
        return err.exit_status
    print(f"error: {resume_message(argv, run_dir, target=target)}", file=sys.stderr)
    return EXIT_INTERRUPTED


def run_command(argv: list[str], target: str, plan_of: Callable[[list[str]], RunPlan],
                train_plan: Callable[[RunPlan], pl.Trainer], what: str | Callable[[], str] = "backbone") -> int:
    """A training command line (``make <target>``): ``plan_of(argv)`` checks the config and resolves the run (an
    entry point prints its header there), ``train_plan(plan)`` trains it; then the closing lines and where the
    exported backbone is (``what``: its name, or a function giving it once the plan exists), or ``run_ended``'s
    sentence for a run that did not finish. Returns the exit status."""
    run_dir = None
    try:
        plan = plan_of(argv)
        run_dir = plan.run_dir
        try:
            trainer = train_plan(plan)
        except torch.cuda.OutOfMemoryError:
            raise out_of_memory(plan.cfg) from None
    except (SkiplessError, KeyboardInterrupt) as err:
        return run_ended(err, argv, run_dir, target)
    if trainer.is_global_zero:
        for line in closing_lines(trainer):
            print(line, flush=True)
        name = what() if callable(what) else what
        print(f"done: {name} at {run_dir / 'backbone.pt'}; TensorBoard: make tensorboard", flush=True)
    return 0
