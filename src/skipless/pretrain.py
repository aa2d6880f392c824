"""Self-supervised pretraining: ``python -m skipless.pretrain [ssl=dino|mae] [model=skipless] [optim=soap] [key=value ...]``.

The method (``ssl=``, ``make pretrain SSL=``; DINO by default) comes from ``skipless.ssl.METHODS``: its
LightningModule, views, config rules, monitors and header lines (``ssl/method.py``). Everything else
here (config, run folder, data, trainer, callbacks, diagnostics, k-NN monitor, exports) is shared and
reads none of the method's keys.

Flow: config -> ``runs/<name>/`` (resolved ``config.yaml``, TensorBoard events, checkpoints,
``backbone.pt`` = the method's exported backbone in timm's names: DINO's teacher, MAE's encoder) -> evaluators read ``backbone.pt``.
``make pretrain`` calls this with the MODEL/OPT/DATA/RECIPE/GPUS/NODES/RESUME/ARGS a user set mapped
onto the config; the rest comes from ``configs/pretrain.yaml`` and its groups. It prints
``summary.pretrain_header`` (model, crops, schedule, effective peak lr, exports) before it starts.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Sequence

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig
from torch import nn

from .config import ConfigError, load_config
from .models.from_config import vit_from_config
from .ssl import METHODS, Method, method_of
from .reports.summary import pretrain_header
from .training.callbacks import KNNMonitor
from .training.data import diagnostic_images, knn_loaders, loader_memory, pretrain_dataset, pretrain_loader
from .training.loader_state import ResumableLoader
from .training.diagnostics_callbacks import diagnostics_callbacks
from .training.interrupt import fit, run_command
from .training.preflight import check_run_folder
from .training.rank_monitor import RankMonitor
from .training.run_lock import hold_run_folder
from .training.run_start import prepare_run, record_start
from .training.schema import check_pretrain_config
from .training.run_plan import RunPlan, plan_run
from .training.trainer import build_trainer
from .devices.host_memory import check_loader_fits
from .devices.world import check_global_batch, check_gpus_visible


def run_dir_of(cfg: DictConfig, method: Method | None = None) -> Path:
    """``<run.root>/<run.name>``; by default the name is ``[<method prefix>]<model>-<optim>-<data>``."""
    prefix = (method or method_of(cfg)).run_prefix
    name = cfg.run.name or f"{prefix}{cfg.model.name}-{cfg.optim.name}-{cfg.data.name}"
    return Path(cfg.run.root) / name


def backbone_factory(cfg: DictConfig, drop_path_rate: float) -> nn.Module:
    """The backbone of ``cfg.model`` a method trains (DINO: student and teacher, the teacher with drop-path 0)."""
    return vit_from_config(cfg.model, drop_path_rate)


def refuse_other_methods_keys(cfg: DictConfig, method: Method) -> None:
    """A section of another method in the config (a recipe written for DINO, which sets ``dino.*``, under
    ``ssl=mae``) would be silently ignored: refused in one sentence naming the recipe to use."""
    others = [name for name in METHODS if name != method.name and name in cfg]
    if others:
        recipe = (cfg.get("choices") or {}).get("recipe", "-")
        raise ConfigError(f"recipe={recipe} sets keys of ssl={others[0]} ({others[0]}.*), which this ssl={method.name} "
                          f"run would ignore; expected a recipe of {method.name} (leave RECIPE= unset for its "
                          f"default, or name one of configs/recipe/ written for it)")


def refuse_colour_on_device(cfg: DictConfig, method: Method) -> None:
    """``data.augment_on=device`` for a method whose views have no colour augmentation to batch (MAE: a crop
    and a flip, made in the loader's workers) would change nothing: refused in one sentence."""
    if cfg.data.augment_on in ("device", "device_crops") and not method.colour_on_device:
        raise ConfigError(f"data.augment_on={cfg.data.augment_on} moves a colour augmentation onto the training device, and "
                          f"ssl={method.name} has none (its views are made whole in the loader's workers); "
                          f"expected data.augment_on=auto or workers")


def check_keys(cfg: DictConfig) -> Method:
    """Every key of ``cfg`` by its rule, the shared ones (``training/schema.py``) and the method's; returns the method."""
    method = method_of(cfg)
    refuse_other_methods_keys(cfg, method)
    check_pretrain_config(cfg, dict(method.rules), method.relations)
    refuse_colour_on_device(cfg, method)
    return method


def check_config(cfg: DictConfig) -> tuple[Method, RunPlan]:
    """Settings that load but cannot run as asked, each refused in one sentence (training/schema.py and
    the method's rules), more GPUs than this machine shows and a global batch they do not divide
    (``devices/world.py``), what the method refuses beyond single keys (DINO: a BatchNorm head that DDP on the CPU
    cannot synchronise), a training loader that would hold more host memory than this machine has available
    (``devices/host_memory.py``), and a run folder that could not be written; then the run resolved once: the
    method and the plan (``training/run_plan.py``) every later step takes."""
    method = check_keys(cfg)
    check_gpus_visible(cfg)
    check_global_batch(cfg)
    method.check(cfg)
    loader = loader_memory(cfg, method.transform(cfg), method.collate)
    check_loader_fits(loader)
    run_dir = run_dir_of(cfg, method)
    check_run_folder(run_dir)
    return method, replace(plan_run(cfg, run_dir), loader=loader)


def pretrain_trainer(method: Method, plan: RunPlan, extra_callbacks: Sequence[pl.Callback] = (),
                     loader: ResumableLoader | None = None) -> pl.Trainer:
    """The shared trainer (``training/trainer.py``) with the method's own monitors (DINO: collapse), the
    diagnostics and the k-NN monitor; ``loader``: the training loader, whose position checkpoints keep."""
    cfg, run_dir = plan.cfg, plan.run_dir
    callbacks: list[pl.Callback] = [*method.callbacks(cfg), *extra_callbacks,
                                  *diagnostics_callbacks(plan, partial(diagnostic_images, cfg, method.view_size(cfg),
                                                                       int(cfg.diagnostics.images)))]
    loaders = knn_loaders(cfg, method.view_size(cfg)) if cfg.train.knn_every_n_epochs else None
    if loaders is not None:
        callbacks.append(KNNMonitor(loaders[0], loaders[1], every=cfg.train.knn_every_n_epochs,
                                    k=cfg.train.knn_k, num_classes=loaders[2],
                                    random_backbone=partial(backbone_factory, cfg, 0.0), label=method.exported))
    if cfg.diagnostics.rank_images:
        split = "val" if cfg.data.name == "default" else "train"  # an image folder has one split
        images = partial(diagnostic_images, cfg, method.view_size(cfg), int(cfg.diagnostics.rank_images), split,
                         spread=True)
        callbacks.append(RankMonitor(images, run_dir, every=cfg.train.knn_every_n_epochs,
                                     epochs=cfg.train.export_epochs))
    return build_trainer(plan, callbacks, loader)


def pretrain(cfg: DictConfig, extra_callbacks: Sequence[pl.Callback] = ()) -> tuple[pl.Trainer, pl.LightningModule]:
    """Run (or resume) the pretraining described by ``cfg``; returns the trainer and the method's module."""
    return run_pretraining(*check_config(cfg), extra_callbacks)


def run_pretraining(method: Method, plan: RunPlan, extra_callbacks: Sequence[pl.Callback] = ()
                    ) -> tuple[pl.Trainer, pl.LightningModule]:
    """Run (or resume) the pretraining ``check_config`` resolved; returns the trainer and the method's module."""
    cfg, run_dir = plan.cfg, plan.run_dir
    torch.set_num_threads(plan.threads)
    with hold_run_folder(run_dir):
        start = prepare_run(cfg, run_dir)
        pl.seed_everything(cfg.run.seed, workers=True, verbose=False)
        # First, so that an impossible model key (a ModelArgumentError naming the valid values) fails
        # before any data is generated.
        module = method.module(cfg, partial(backbone_factory, cfg))
        dataset = pretrain_dataset(cfg, method.transform(cfg))
        loader = pretrain_loader(cfg, dataset, method.collate)
        trainer = pretrain_trainer(method, plan, extra_callbacks, loader)
        if trainer.is_global_zero:
            record_start(cfg, run_dir, start)
        fit(trainer, module, loader, ckpt_path=start.ckpt_path)
    return trainer, module


def main(argv: Sequence[str] | None = None, extra_callbacks: Sequence[pl.Callback] = ()) -> int:
    """The command line; ``extra_callbacks`` join the run's own (a caller's measurements: the pre-flight times the steps)."""
    methods: list[Method] = []

    def plan_of(args: list[str]) -> RunPlan:
        cfg = load_config("pretrain", args)
        method, plan = check_config(cfg)
        methods.append(method)
        print(pretrain_header(cfg, plan.run_dir, precision=plan.described_precision, method_lines=method.header(cfg),
                              loader=plan.loader), flush=True)
        return plan

    return run_command(list(sys.argv[1:] if argv is None else argv), "pretrain", plan_of,
                       lambda plan: run_pretraining(methods[-1], plan, extra_callbacks)[0],
                       lambda: f"{methods[-1].exported} backbone")


if __name__ == "__main__":
    sys.exit(main())
