"""The Lightning trainer every training entry point builds (pretraining with any method, supervised training).

The callbacks that make a run safe come first and in this order: the divergence guard (a non-finite
model is never exported nor checkpointed), the RNG state and the loader's position (exact resume, at an
epoch's end or in its middle: ``loader_state.py``), the epoch checkpoint with the backbone export
(``backbone.pt`` put in place once ``last.ckpt`` of its epoch is written), the signals and timed checkpoints
that stop or save a run mid-epoch (``preemption.py``), the progress bar, the run summary; an entry point adds
its own after them.
Precision, devices and strategy come from the run's plan (``run_plan.py``: the config, or the hardware when
left on ``auto``; precision: ``training/precision.py``, which also keeps the optimizer step out of autocast);
under DDP on GPUs every BatchNorm layer is a SyncBatchNorm (``run_plan.sync_batchnorm_of``).
"""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any, Sequence

import lightning.pytorch as pl
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.strategies import DDPStrategy

from .callbacks import DivergenceGuard, EpochCheckpoint, ExportBackbone, ProgressBar, RNGState, RunSummary
from .checkpoint_io import AtomicCheckpointIO
from .library_notices import silence_library_notices
from .loader_state import LoaderPosition, ResumableLoader
from .precision import LossScaleMonitor, plugin_for
from .preemption import StopOnSignal
from .run_plan import RunPlan

class RunLogger(TensorBoardLogger):
    """TensorBoard with the losses first: its Time Series sorts groups (a tag's first path component) by
    name and opens the first two, so every scalar but ``train/`` and ``val/`` is logged under ``watch/``
    (issue 27, item 3). Lightning adds its own ``epoch`` scalar to every logged step; it goes to
    ``watch/epoch``."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        super().log_metrics({("watch/epoch" if k == "epoch" else k): v for k, v in metrics.items()}, step)


def _batch_limit(limit: int | float) -> int | float | None:
    """None (Lightning's "not set") for the float 1.0, all batches, which Lightning otherwise says back in
    a line; the int 1 (one batch) and every other value unchanged."""
    return None if isinstance(limit, float) and limit == 1.0 else limit


def strategy_of_plan(plan: RunPlan) -> str | DDPStrategy:
    """The plan's strategy; DDP with ``train.collective_timeout_minutes`` as the time a rank waits in a collective
    for the others (Lightning's own default, 30 minutes, has no key)."""
    if plan.strategy != "ddp":
        return plan.strategy
    return DDPStrategy(timeout=timedelta(minutes=float(plan.cfg.train.collective_timeout_minutes)))


def build_trainer(plan: RunPlan, callbacks: Sequence[pl.Callback] = (), loader: ResumableLoader | None = None,
                  **trainer_args: Any) -> pl.Trainer:
    """A trainer for ``plan`` (``run_plan.RunPlan``), writing into its run folder (TensorBoard ``tb/``,
    ``checkpoints/last.ckpt``, ``backbone.pt``, ``summary.json``) with the shared callbacks, then ``callbacks``;
    ``loader``: the training loader, whose position every checkpoint keeps; ``trainer_args`` add to or replace
    the Trainer arguments (e.g. validation settings)."""
    silence_library_notices()
    cfg, run_dir = plan.cfg, plan.run_dir
    shared: list[pl.Callback] = [
        DivergenceGuard(),
        RNGState(),
        *([LoaderPosition(loader)] if loader is not None else []),
        EpochCheckpoint(run_dir / "checkpoints", keep_all=cfg.train.keep_checkpoints,
                        exports=ExportBackbone(run_dir, epochs=cfg.train.get("export_epochs") or ())),
        StopOnSignal(cfg.train.checkpoint_every_minutes, cfg.run.requeue),  # after EpochCheckpoint: its epoch end first
        ProgressBar(),
        RunSummary(run_dir, precision=plan.described_precision),
        LossScaleMonitor(),
    ]
    args = dict(
        default_root_dir=run_dir,
        accelerator=cfg.train.accelerator,
        devices=plan.devices,
        num_nodes=plan.nodes,
        strategy=strategy_of_plan(plan),
        sync_batchnorm=plan.sync_batchnorm,
        # a run counted in optimizer steps (the language model's train.steps, passed as max_steps) has no epochs,
        # no limit on an epoch's batches and no per-epoch exports
        max_epochs=cfg.train.get("epochs", -1),
        max_steps=cfg.train.max_steps,
        limit_train_batches=_batch_limit(cfg.train.get("limit_train_batches", 1.0)),
        logger=RunLogger(save_dir=str(run_dir), name="", version="tb", default_hp_metric=False),
        callbacks=shared + list(callbacks),
        enable_checkpointing=False,  # EpochCheckpoint writes them
        plugins=[AtomicCheckpointIO(), plugin_for(plan.precision, plan.autocast_device)],
        log_every_n_steps=cfg.train.log_every_n_steps,
        num_sanity_val_steps=0,
        enable_model_summary=False,
    )
    args.update(trainer_args)
    return pl.Trainer(**args)
