"""What a self-supervised method gives the shared pretraining entry point, written down once.

``make pretrain SSL=<name>`` (``ssl=<name>``) picks a ``Method`` from ``skipless.ssl.METHODS``; the
entry point (``skipless/pretrain.py``) and ``training/`` then run it without reading any of its keys
(solo-learn's method table, without its deep base class: each method stays one flat LightningModule).

A method provides:

- its **config**: ``configs/ssl/<name>.yaml`` sets ``ssl: <name>`` and the method's own section
  (``dino:``, ``mae:``), and nothing else; ``rules`` and ``relations`` check that section (and how it
  meets the shared keys) in one sentence each, as ``training/schema.py`` checks the shared ones;
- its **LightningModule**: ``module(cfg, backbone_factory)``, where ``backbone_factory(drop_path_rate)``
  builds the ``model:`` backbone; the module uses manual optimisation with the shared optimizer factory,
  parameter groups, schedules, the divergence guard and ``full_precision`` for its step, and has
  ``exported_backbone()``: what ``backbone.pt`` holds and every evaluator reads (DINO: the teacher's
  backbone; MAE: the encoder), and ``trained_backbone()``: the one the optimiser trains, which the
  conditioning diagnostics and per-block signals measure (DINO: the student's; MAE: the encoder);
- its **data**: ``transform(cfg)``, one training image (PIL) -> the views of one sample; ``collate``, a
  list of samples -> a batch; ``view_size(cfg)``, the pixel size of its views, at which the k-NN monitor
  and the diagnostics read fixed centre crops of the same images;
- its **watchers**: ``callbacks(cfg)``, the monitors only this method has (DINO: the collapse rule);
- its **words**: ``header(cfg)``, its lines of the run header; ``run_prefix``, put before the default
  run name ``<model>-<optim>-<data>`` (empty for DINO, so runs made before the table keep their names);
  ``exported``, what ``backbone.pt`` holds in words (the line that ends a run);
- its **refusals** beyond single keys: ``check(cfg)``, called before anything is written;
- ``colour_on_device``: whether its colour augmentation can run batched on the training device
  (``data.augment_on``; DINO's can, ``ssl/dino/self_distillation.py``). A method without it keeps its
  whole view in the loader's workers, and ``data.augment_on=device`` (or ``device_crops``) is refused for it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import lightning.pytorch as pl
from omegaconf import DictConfig
from torch import nn

from ..config.rules import Rule

Relation = Callable[[dict[str, Any]], "str | None"]


def _no_check(cfg: DictConfig) -> None:
    return None


def _no_callbacks(cfg: DictConfig) -> list[pl.Callback]:
    return []


@dataclass(frozen=True)
class Method:
    """One self-supervised method of ``skipless.ssl.METHODS`` (see the module docstring)."""

    name: str
    module: Callable[[DictConfig, Callable[[float], nn.Module]], pl.LightningModule]
    transform: Callable[[DictConfig], Callable]
    collate: Callable[[list], Any]
    view_size: Callable[[DictConfig], int]
    rules: Mapping[str, Rule]
    header: Callable[[Mapping], list[str]]
    relations: tuple[Relation, ...] = ()
    callbacks: Callable[[DictConfig], list[pl.Callback]] = _no_callbacks
    check: Callable[[DictConfig], None] = _no_check
    run_prefix: str = ""
    exported: str = "backbone"  # what backbone.pt holds, in a word (DINO: "teacher", MAE: "encoder")
    colour_on_device: bool = False  # data.augment_on=device and device_crops are open to it (DINO)
