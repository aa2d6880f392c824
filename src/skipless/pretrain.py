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
from omegaconf import DictConfig
from torch import nn

from .analysis.diagnostics import MEASURES, DiagnosticSettings
from .config import load_config
from .errors import SkiplessError, user_message
from .models.from_config import vit_from_config
from .ssl.dino_module import DINO
from .summary import pretrain_header
from .training.callbacks import KNNMonitor
from .training.collapse import DINOCollapse
from .training.data import diagnostic_images, knn_loaders, pretrain_dataset, pretrain_loader
from .training.diagnostics_callbacks import BlockSignals, ConditioningMonitor
from .training.interrupt import fit, resume_message
from .training.precision import describe_precision
from .training.preflight import check_run_folder
from .training.run_lock import hold_run_folder
from .training.run_start import prepare_run, record_start
from .training.schema import check_pretrain_config
from .training.trainer import build_trainer, refuse_unsynced_batchnorm
from .world import check_gpus_visible


def run_dir_of(cfg: DictConfig) -> Path:
    name = cfg.run.name or f"{cfg.model.name}-{cfg.optim.name}-{cfg.data.name}"
    return Path(cfg.run.root) / name


def backbone_factory(cfg: DictConfig, drop_path_rate: float) -> nn.Module:
    """The student/teacher backbone of ``cfg.model`` (the teacher is built with drop-path 0)."""
    return vit_from_config(cfg.model, drop_path_rate)


def check_config(cfg: DictConfig) -> None:
    """Settings that load but cannot run as asked, each refused in one sentence (training/schema.py),
    more GPUs than this machine shows (``world.py``), a BatchNorm head that DDP on the CPU cannot
    synchronise, and a run folder that could not be written."""
    check_pretrain_config(cfg)
    check_gpus_visible(cfg)
    if cfg.dino.use_bn_in_head:
        refuse_unsynced_batchnorm(cfg, "dino.use_bn_in_head")
    check_run_folder(run_dir_of(cfg))


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
                                      seed=int(cfg.run.seed),
                                      budget_s=None if d.budget_s is None else float(d.budget_s))
        found.append(ConditioningMonitor(images, settings, int(d.every_n_epochs), run_dir))
    if d.signals_every_n_steps:
        found.append(BlockSignals(images, int(d.signals_every_n_steps)))
    return found


def pretrain_trainer(cfg: DictConfig, run_dir: Path, extra_callbacks: Sequence[pl.Callback] = ()) -> pl.Trainer:
    """The shared trainer (``training/trainer.py``) with DINO's monitors: collapse, diagnostics and the k-NN
    monitor."""
    callbacks: list[pl.Callback] = [DINOCollapse(cfg.dino.out_dim), *extra_callbacks,
                                    *diagnostics_callbacks(cfg, run_dir)]
    loaders = knn_loaders(cfg) if cfg.train.knn_every_n_epochs else None
    if loaders is not None:
        callbacks.append(KNNMonitor(loaders[0], loaders[1], every=cfg.train.knn_every_n_epochs,
                                    k=cfg.train.knn_k, num_classes=loaders[2],
                                    random_backbone=partial(backbone_factory, cfg, 0.0)))
    return build_trainer(cfg, run_dir, callbacks)


def pretrain(cfg: DictConfig, extra_callbacks: Sequence[pl.Callback] = ()) -> tuple[pl.Trainer, DINO]:
    """Run (or resume) the pretraining described by ``cfg``; returns the trainer and the module."""
    run_dir = run_dir_of(cfg)
    check_config(cfg)
    with hold_run_folder(run_dir):
        start = prepare_run(cfg, run_dir)
        pl.seed_everything(cfg.run.seed, workers=True, verbose=False)
        # First, so that an impossible model key (a ModelArgumentError naming the valid values) fails
        # before any data is generated.
        module = DINO(cfg, partial(backbone_factory, cfg))
        dataset = pretrain_dataset(cfg)
        loader = pretrain_loader(cfg, dataset)
        trainer = pretrain_trainer(cfg, run_dir, extra_callbacks)
        if trainer.is_global_zero:
            record_start(cfg, run_dir, start)
        fit(trainer, module, loader, ckpt_path=start.ckpt_path)
    return trainer, module


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_dir = None
    try:
        cfg = load_config("pretrain", argv)
        check_config(cfg)
        run_dir = run_dir_of(cfg)
        print(pretrain_header(cfg, run_dir, precision=describe_precision(cfg)), flush=True)
        trainer, _ = pretrain(cfg)
    except SkiplessError as err:
        print(f"error: {user_message(err)}", file=sys.stderr)
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
