"""DINO pretraining: ``python -m skipless.pretrain [model=skipless] [optim=soap] [key=value ...]``.

Flow: config -> ``runs/<name>/`` (resolved ``config.yaml``, TensorBoard events, checkpoints,
``backbone.pt`` = the teacher backbone in timm's names) -> evaluators read ``backbone.pt``.
``make pretrain`` calls this with the MODEL/OPT/DATA/RECIPE/GPUS/NODES/RESUME/ARGS a user set mapped
onto the config; the rest comes from ``configs/pretrain.yaml`` and its groups. It prints
``summary.pretrain_header`` (model, crops, schedule, effective peak lr, exports) before it starts.
"""
from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Sequence

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig
from torch import nn

from .analysis.diagnostics import MEASURES, DiagnosticSettings
from .config import load_config, save_config
from .errors import SkiplessError
from .models.from_config import vit_from_config
from .ssl.dino_module import DINO
from .ssl.errors import NothingToResumeError
from .summary import pretrain_header
from .training.callbacks import DivergenceGuard, EpochCheckpoint, ExportTeacher, KNNMonitor, RNGState, RunSummary
from .training.checkpoint_io import AtomicCheckpointIO
from .training.data import diagnostic_images, knn_loaders, pretrain_dataset, pretrain_loader
from .training.diagnostics_callbacks import BlockSignals, ConditioningMonitor
from .training.interrupt import fit, resume_message
from .training.preflight import check_run_folder, read_resume_checkpoint
from .training.run_folder import check_new_run, is_first_process, record_resume, resume_changes
from .training.schema import check_pretrain_config


def run_dir_of(cfg: DictConfig) -> Path:
    name = cfg.run.name or f"{cfg.model.name}-{cfg.optim.name}-{cfg.data.name}"
    return Path(cfg.run.root) / name


def backbone_factory(cfg: DictConfig, drop_path_rate: float) -> nn.Module:
    """The student/teacher backbone of ``cfg.model`` (the teacher is built with drop-path 0)."""
    return vit_from_config(cfg.model, drop_path_rate)


def check_config(cfg: DictConfig) -> None:
    """Settings that load but cannot run as asked, each refused in one sentence (training/schema.py),
    and a run folder that could not be written."""
    check_pretrain_config(cfg)
    check_run_folder(run_dir_of(cfg))


def _precision(cfg: DictConfig) -> str:
    if cfg.train.precision != "auto":
        return str(cfg.train.precision)
    gpu = cfg.train.accelerator in ("gpu", "cuda") or (cfg.train.accelerator == "auto" and torch.cuda.is_available())
    return "bf16-mixed" if gpu else "32-true"


def _strategy(cfg: DictConfig) -> str:
    if cfg.train.strategy != "auto":
        return str(cfg.train.strategy)
    return "ddp" if int(cfg.train.devices) * int(cfg.train.num_nodes) > 1 else "auto"


def diagnostics_callbacks(cfg: DictConfig, run_dir: Path) -> list[pl.Callback]:
    """The conditioning monitor and the per-block signals of ``cfg.diagnostics`` (0 turns each off)."""
    d = cfg.diagnostics
    images = partial(diagnostic_images, cfg, int(d.images))
    found: list[pl.Callback] = []
    if d.every_n_epochs:
        layers = d.layers if isinstance(d.layers, str) else list(d.layers)
        measures = tuple(m for m in MEASURES if m != "jacobian" or d.jacobian_images)
        settings = DiagnosticSettings(layers=layers, measures=measures, jacobian_images=max(1, int(d.jacobian_images)),
                                      tol=float(d.tol), max_iter=int(d.max_iter), dtype=str(d.dtype),
                                      seed=int(cfg.run.seed))
        found.append(ConditioningMonitor(images, settings, int(d.every_n_epochs), run_dir))
    if d.signals_every_n_steps:
        found.append(BlockSignals(images, int(d.signals_every_n_steps)))
    return found


def build_trainer(cfg: DictConfig, run_dir: Path, extra_callbacks: Sequence[pl.Callback] = ()) -> pl.Trainer:
    callbacks: list[pl.Callback] = [
        DivergenceGuard(),  # first: a non-finite model is never exported nor checkpointed
        RNGState(),
        ExportTeacher(run_dir, epochs=cfg.train.export_epochs),
        EpochCheckpoint(run_dir / "checkpoints", keep_all=cfg.train.keep_checkpoints),
        TQDMProgressBar(refresh_rate=1),
        RunSummary(run_dir),
        *extra_callbacks,
    ]
    callbacks += diagnostics_callbacks(cfg, run_dir)
    loaders = knn_loaders(cfg) if cfg.train.knn_every_n_epochs else None
    if loaders is not None:
        callbacks.append(KNNMonitor(loaders[0], loaders[1], every=cfg.train.knn_every_n_epochs,
                                    k=cfg.train.knn_k, num_classes=loaders[2],
                                    random_backbone=partial(backbone_factory, cfg, 0.0)))
    return pl.Trainer(
        default_root_dir=run_dir,
        accelerator=cfg.train.accelerator,
        devices=cfg.train.devices,
        num_nodes=cfg.train.num_nodes,
        strategy=_strategy(cfg),
        precision=_precision(cfg),
        max_epochs=cfg.train.epochs,
        max_steps=cfg.train.max_steps,
        limit_train_batches=cfg.train.limit_train_batches,
        logger=TensorBoardLogger(save_dir=str(run_dir), name="", version="tb", default_hp_metric=False),
        callbacks=callbacks,
        enable_checkpointing=False,  # EpochCheckpoint writes them
        plugins=[AtomicCheckpointIO()],
        log_every_n_steps=cfg.train.log_every_n_steps,
        num_sanity_val_steps=0,
        enable_model_summary=False,
    )


def pretrain(cfg: DictConfig, extra_callbacks: Sequence[pl.Callback] = ()) -> tuple[pl.Trainer, DINO]:
    """Run (or resume) the pretraining described by ``cfg``; returns the trainer and the module."""
    run_dir = run_dir_of(cfg)
    last = run_dir / "checkpoints" / "last.ckpt"
    check_config(cfg)
    if cfg.run.resume and not last.is_file():
        raise NothingToResumeError(f"RESUME=1 but there is no checkpoint to resume at {last}; "
                                   "start the run without RESUME or name the run with run.name=")
    if cfg.run.resume:
        read_resume_checkpoint(last)
    first = is_first_process()  # the folder rules are checked once, by rank 0 (run_folder.py)
    changes = resume_changes(cfg, run_dir) if first and cfg.run.resume else {}
    if first and not cfg.run.resume:
        check_new_run(run_dir)
    pl.seed_everything(cfg.run.seed, workers=True, verbose=False)
    # First, so that an impossible model key (a ModelArgumentError naming the valid values) fails
    # before any data is generated.
    module = DINO(cfg, partial(backbone_factory, cfg))
    dataset = pretrain_dataset(cfg)
    loader = pretrain_loader(cfg, dataset)
    trainer = build_trainer(cfg, run_dir, extra_callbacks)
    if trainer.is_global_zero:
        save_config(cfg, run_dir)
        if cfg.run.resume:
            record_resume(run_dir, changes)
    fit(trainer, module, loader, ckpt_path=str(last) if cfg.run.resume else None)
    return trainer, module


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_dir = None
    try:
        cfg = load_config("pretrain", argv)
        check_config(cfg)
        run_dir = run_dir_of(cfg)
        print(pretrain_header(cfg, run_dir), flush=True)
        trainer, _ = pretrain(cfg)
    except SkiplessError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"error: {resume_message(argv, run_dir)}", file=sys.stderr)
        return 130
    if not trainer.is_global_zero:
        return 0
    print(f"done: teacher backbone at {run_dir / 'backbone.pt'}; TensorBoard: make tensorboard", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
