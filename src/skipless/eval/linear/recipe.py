"""A linear probe's recipe as ``configs/linear.yaml`` and its preset state it: what the heads read, how
they are built, and how they are trained (``Recipe``, checked by ``RULES``).

The presets (``configs/linear-preset/``, ``make linear PRESET=``) are four published protocols:
``dino`` (Caron et al. 2021, ``eval_linear.py``; the values of ``linear.yaml``), ``zhang`` (seed 002,
App. 8.1, its ImageNet-100 probe), ``zhang-in1k`` (seed 002, App. 8.1, its ImageNet-1k probe: 3 random
views + the centre crop, ``views``) and ``mae`` (He et al. 2022, App. A.2). Each file says where every
value comes from.

The batch: a preset's batch may be larger than a small training split (MAE's 16384 against the 2,000
images of the generated default). Then every epoch is one batch of the whole split, and the lrs are
scaled by that batch, the one actually used (the linear scaling rule, ``lr x batch / lr_batch``, is
about the images per step); the run says so and the JSON records both numbers (``batch_for``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from omegaconf import DictConfig

from skipless.config import ConfigError
from skipless.config.rules import Rule, boolean, integer, is_real, non_empty_list, number, one_of

INPUTS = ("cls", "cls+avgpool", "last_cls", "pooled")
NORMS = ("none", "batchnorm")
INITS = ("normal", "trunc_normal")
OPTIMIZERS = ("sgd", "adamw", "lars")
LR_UPDATES = ("epoch", "step")

RULES = {
    "inputs": Rule(lambda v: non_empty_list(one_of(*INPUTS), "").check(v) and len(set(v)) == len(v),
                   f"a non-empty list of distinct names among {', '.join(INPUTS)}"),
    "lrs": non_empty_list(number(0, low_open=True), "finite numbers > 0"),
    "lr_batch": integer(1),
    "epochs": integer(1),
    "warmup_epochs": integer(0),
    "lr_update": one_of(*LR_UPDATES),
    "batch_size": integer(1),
    "drop_last": boolean(),
    "views": integer(1),
    "head.norm": one_of(*NORMS),
    "head.norm_eps": number(0, low_open=True),
    "head.init": one_of(*INITS),
    "head.init_std": number(0, low_open=True),
    "optimizer.name": one_of(*OPTIMIZERS),
    "optimizer.momentum": number(0, 1),
    "optimizer.weight_decay": number(0),
    "optimizer.trust_coefficient": number(0, low_open=True),
    "optimizer.betas": Rule(lambda v: isinstance(v, list) and len(v) == 2 and all(is_real(b) and 0 <= b < 1 for b in v),
                            "a list [beta1, beta2] of two numbers in [0, 1)"),
}


@dataclass(frozen=True)
class Recipe:
    """The checked keys of a linear probe (``configs/linear.yaml`` holds each default, with its source)."""

    preset: str
    inputs: tuple[str, ...]
    lrs: tuple[float, ...]  # per lr_batch images
    lr_batch: int
    epochs: int
    warmup_epochs: int
    per_step: bool  # the lr moves every step (MAE), else once per epoch (DINO)
    batch_size: int  # as configured; batch_for gives the one used
    drop_last: bool
    views: int  # feature sets per training image, the centre crop and views - 1 random ones (eval/linear/views.py)
    norm: str
    norm_eps: float
    init: str
    init_std: float
    optimizer: str
    momentum: float
    weight_decay: float
    trust_coefficient: float
    betas: tuple[float, float]

    @classmethod
    def from_config(cls, cfg: DictConfig) -> "Recipe":
        """The recipe of a config whose keys ``RULES`` has checked; raises on a warm-up as long as the run."""
        if int(cfg.warmup_epochs) >= int(cfg.epochs):
            raise ConfigError(f"warmup_epochs ({cfg.warmup_epochs}) must be less than epochs ({cfg.epochs}): the "
                              "cosine follows the warm-up")
        head, opt = cfg.head, cfg.optimizer
        return cls(preset=str(cfg.choices["linear-preset"]), inputs=tuple(str(x) for x in cfg.inputs),
                   lrs=tuple(float(x) for x in cfg.lrs), lr_batch=int(cfg.lr_batch), epochs=int(cfg.epochs),
                   warmup_epochs=int(cfg.warmup_epochs), per_step=cfg.lr_update == "step",
                   batch_size=int(cfg.batch_size), drop_last=bool(cfg.drop_last), views=int(cfg.views),
                   norm=str(head.norm),
                   norm_eps=float(head.norm_eps), init=str(head.init), init_std=float(head.init_std),
                   optimizer=str(opt.name), momentum=float(opt.momentum), weight_decay=float(opt.weight_decay),
                   trust_coefficient=float(opt.trust_coefficient), betas=(float(opt.betas[0]), float(opt.betas[1])))

    def batch_for(self, n_train: int) -> int:
        """The batch used on ``n_train`` training images: ``batch_size``, or all of them when fewer."""
        return min(self.batch_size, int(n_train))

    def lr_scale(self, batch: int) -> float:
        """The linear scaling rule (Goyal et al. 2017; DINO's and MAE's ``lr x batch / 256``)."""
        return batch / self.lr_batch

    def scaled_lrs(self, batch: int) -> list[float]:
        return [lr * self.lr_scale(batch) for lr in self.lrs]

    def steps_per_epoch(self, n_train: int, batch: int) -> int:
        """Optimizer steps per epoch: a last partial batch counts unless ``drop_last``."""
        return int(n_train) // batch if self.drop_last else math.ceil(int(n_train) / batch)
