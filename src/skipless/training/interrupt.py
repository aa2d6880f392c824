"""Ctrl-C during a pretraining: stop, then say in one sentence how to resume.

Lightning catches the first Ctrl-C inside ``trainer.fit`` (``trainer/call.py``,
``_call_and_handle_interrupt``): it calls the callbacks' ``on_exception``, tears the trainer down,
ignores further Ctrl-C and ends with ``sys.exit(1)``. ``fit`` turns that exit back into the
``KeyboardInterrupt`` it was, so the entry point can print ``resume_message`` and exit with 130
(the shell's status for SIGINT); a Ctrl-C outside the fit arrives as a plain ``KeyboardInterrupt``.
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Sequence

import lightning.pytorch as pl


def fit(trainer: pl.Trainer, module: pl.LightningModule, loader: Any, ckpt_path: str | None,
        val_loader: Any = None) -> None:
    """``trainer.fit``; a Ctrl-C that Lightning turned into ``sys.exit(1)`` is raised as ``KeyboardInterrupt``."""
    try:
        trainer.fit(module, train_dataloaders=loader, val_dataloaders=val_loader, ckpt_path=ckpt_path)
    except SystemExit:
        if trainer.interrupted:
            raise KeyboardInterrupt from None
        raise


def resume_message(argv: Sequence[str], run_dir: Path | None, target: str = "pretrain") -> str:
    """The sentence printed after Ctrl-C: the checkpoint a resume starts from and the exact command."""
    args = [a for a in argv if not a.startswith("run.resume=")]
    quoted = f' ARGS="{" ".join(shlex.quote(a) for a in args)}"' if args else ""
    last = run_dir / "checkpoints" / "last.ckpt" if run_dir is not None else None
    if last is not None and last.is_file():
        return (f"interrupted; resume from {last} (written at the last epoch end; later steps are redone) "
                f"with: make {target} RESUME=1{quoted}")
    if run_dir is None or not run_dir.is_dir():
        return f"interrupted before the run started; start it again with: make {target}{quoted}"
    # The folder holds this attempt's config and events but no checkpoint: the same command starts afresh
    # and sets them aside (run_folder.py).
    return (f"interrupted before any checkpoint was written in {run_dir} (one is written at each epoch end), so "
            f"there is nothing to resume; start again with: make {target}{quoted} (this attempt's files move to "
            f"{run_dir}/attempts/<n>/)")
