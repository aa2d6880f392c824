"""Supervised training: ``python -m skipless.train [model=skipless] [optim=soap] [data=cifar10] [key=value ...]``.

Flow, as pretraining's (``pretrain.py``): config (``configs/train.yaml`` + groups) checked -> run folder
``runs/<name>/`` (resolved ``config.yaml``, TensorBoard events, ``checkpoints/last.ckpt``,
``backbone.pt`` = the classifier's backbone without its head, ``summary.json`` with the last
validation) -> every evaluator reads ``backbone.pt``. ``make train`` maps MODEL/OPT/DATA/RECIPE/GPUS/
NODES/RESUME/ARGS onto the config. The same resume, refusal and divergence rules as pretraining.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig
from torch import nn

from .config import load_config
from .reports.summary import describe_batch, describe_model, loader_lines, lr_key, memory_lines, peak_lr, threads_line
from .supervised.classifier import Supervised
from .supervised.augment import train_transform
from .supervised.data import labelled_splits, train_loader, val_loader
from .supervised.schema import check_train_config
from .training.diagnostics_callbacks import diagnostics_callbacks
from .training.data import evenly_spaced, loader_memory
from .training.rank_monitor import RankMonitor
from .training.collapse import SupervisedCollapse
from .training.interrupt import fit, run_command
from .training.preflight import check_run_folder
from .training.run_lock import hold_run_folder
from .training.run_start import prepare_run, record_start
from .training.run_plan import RunPlan, plan_run
from .training.trainer import build_trainer
from .devices.host_memory import check_loader_fits
from .devices.world import check_global_batch, check_gpus_visible, global_batch


def run_dir_of(cfg: DictConfig) -> Path:
    name = cfg.run.name or f"sup-{cfg.model.name}-{cfg.optim.name}-{cfg.data.name}"
    return Path(cfg.run.root) / name


def check_config(cfg: DictConfig, run_dir: Path | None = None) -> RunPlan:
    """Every key checked (``supervised/schema.py``), the GPUs asked for visible and the global batch a
    whole number of micro-batches on them (``devices/world.py``), the training loader's host memory within what
    this machine has available (``devices/host_memory.py``), and the run folder (``run_dir``, by default
    ``run_dir_of(cfg)``) writable, before anything is written; then the run resolved once
    (``training/run_plan.py``)."""
    check_train_config(cfg)
    check_gpus_visible(cfg)
    check_global_batch(cfg)
    transform = train_transform(cfg.aug)
    loader = loader_memory(cfg, lambda image: (transform(image), 0))  # a labelled sample: (image, class)
    check_loader_fits(loader)
    run_dir = run_dir_of(cfg) if run_dir is None else run_dir
    check_run_folder(run_dir)
    return replace(plan_run(cfg, run_dir), loader=loader)


def train_header(plan: RunPlan, train_size: int, val_size: int, num_classes: int, start: str = "") -> str:
    """The lines ``make train`` (and ``make finetune``, whose ``start`` line says what it starts from) prints
    before it starts."""
    cfg, run_dir = plan.cfg, plan.run_dir
    m, o, t, a = cfg.model, cfg.optim, cfg.train, cfg.aug
    mix = (f"mixup {a.mixup:g} / cutmix {a.cutmix:g}" if (a.mixup > 0 or a.cutmix > 0) else "no mixup/cutmix")
    decay = f", layer decay {float(o.layer_decay):g}" if float(o.layer_decay) != 1.0 else ""
    return "\n".join([
        f"skipless {'finetune' if start else 'train'}: model={m.name} optim={o.name} data={cfg.data.name} "
        f"recipe={cfg.choices.get('recipe', '-')} -> {run_dir}",
        *([f"  from     {start}"] if start else []),
        f"  model    {describe_model(m)}",
        f"  data     {train_size} train / {val_size} val images, {num_classes} classes, {a.image_size} px; "
        f"RandAugment {a.auto_augment or 'off'}, {mix}, label smoothing {a.label_smoothing:g}, "
        f"random erasing {a.re_prob:g}",
        f"  train    {t.epochs} epochs, global batch {describe_batch(cfg)}, {o.name}, peak lr {peak_lr(cfg):.3g} = "
        f"{lr_key(cfg)} {float(o.lr):g} x optim.lr_scale {float(o.lr_scale):g} x {global_batch(cfg)}/256, "
        f"warm-up {o.warmup_epochs} epochs, weight decay {o.weight_decay:g}{decay}",
        *memory_lines(m),
        *loader_lines(plan.loader),
        f"  precision {plan.described_precision}",
        threads_line(cfg),
    ])


def train(cfg: DictConfig, extra_callbacks: Sequence[pl.Callback] = ()) -> tuple[pl.Trainer, Supervised]:
    """Run (or resume) the supervised training described by ``cfg``; returns the trainer and the module."""
    return run_training(check_config(cfg), extra_callbacks)


def run_training(plan: RunPlan, extra_callbacks: Sequence[pl.Callback] = (),
                 backbone: Callable[[], nn.Module] | None = None, source: str = "") -> tuple[pl.Trainer, Supervised]:
    """Run (or resume) the supervised training ``check_config`` resolved; returns the trainer and the module.
    ``backbone``: builds the backbone to start from, after the run's seed is set (fine-tuning; None: drawn
    from ``cfg.model``); ``source``: the header's line on where it comes from."""
    cfg, run_dir = plan.cfg, plan.run_dir
    torch.set_num_threads(plan.threads)
    with hold_run_folder(run_dir):
        start = prepare_run(cfg, run_dir)
        pl.seed_everything(cfg.run.seed, workers=True, verbose=False)
        train_set, val_set = labelled_splits(cfg)
        module = Supervised(cfg, train_set.num_classes, None if backbone is None else backbone())
        loaders = train_loader(cfg, train_set), val_loader(cfg, val_set)
        def val_images(n: int, spread: bool = False) -> torch.Tensor:  # as validated
            indices = evenly_spaced(n, len(val_set)) if spread else range(min(int(n), len(val_set)))
            return torch.stack([val_set[i][0] for i in indices])

        watch = diagnostics_callbacks(plan, lambda: val_images(cfg.diagnostics.images))
        if cfg.diagnostics.rank_images:  # seeds/002 Fig. 4b: the rank over training, beside the val accuracy
            watch.append(RankMonitor(lambda: val_images(cfg.diagnostics.rank_images, spread=True), run_dir,
                                     every=cfg.train.val_every_n_epochs, epochs=cfg.train.export_epochs))
        trainer = build_trainer(plan, [SupervisedCollapse(), *extra_callbacks, *watch], loaders[0],
                                check_val_every_n_epoch=cfg.train.val_every_n_epochs,
                                limit_val_batches=cfg.train.limit_val_batches)
        if trainer.is_global_zero:
            print(train_header(plan, len(train_set), len(val_set), train_set.num_classes, source), flush=True)
            record_start(cfg, run_dir, start)
        fit(trainer, module, loaders[0], ckpt_path=start.ckpt_path, val_loader=loaders[1])
    return trainer, module


def main(argv: Sequence[str] | None = None, extra_callbacks: Sequence[pl.Callback] = ()) -> int:
    """The command line; ``extra_callbacks`` join the run's own (a caller's measurements: the pre-flight times the steps)."""
    return run_command(list(sys.argv[1:] if argv is None else argv), "train",
                       lambda args: check_config(load_config("train", args)),
                       lambda plan: run_training(plan, extra_callbacks)[0])


if __name__ == "__main__":
    sys.exit(main())
