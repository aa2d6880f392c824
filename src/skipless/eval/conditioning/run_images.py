"""``images=run``: each backbone measured on the validation images of the run it comes from, and
``image_fraction``: a fraction of a split, spread evenly over it.

"Always Skip Attention" (seeds/003) plots the per-layer condition numbers of a trained ViT-Tiny with "10%
validation sets" (Fig. 3's caption; Fig. 1b and Fig. 5 say nothing else, so we read them the same way). An
experiment evaluates runs on different datasets (CIFAR-10 at 32 px, Tiny-ImageNet at 64 px: the skip
ablation) with one evaluation cell, so the images cannot be one folder named in the cell: with
``images=run`` each backbone reads the ``val`` split of the dataset its run trained on (``data.name`` and
``data.root`` of the run's ``config.yaml``, any dataset of the classification registry, CIFAR's pickles
included), through the validation transform the run validated with (``aug.image_size``,
``aug.eval_crop_pct``, ``aug.interpolation``: timm's ``create_transform``, as ``make train`` builds it), so
``image_size`` is the run's own.

``image_fraction`` (null: ``num_images``, the first images) takes ``round(fraction * N)`` of the source's
N images, at least 2, evenly spaced: image ``floor(i N / count)`` for ``i < count``
(``square_images.evenly_spaced``, which a folder of images goes through too). Evenly spaced, not the first
ones, because a class-folder layout (ImageNet's val/<wnid>/) lists its classes in order; deterministic, so
that two evaluations read the same images.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from timm.data import create_transform

from skipless.data.classification.registry import LabelledImages, classification_split
from skipless.data.conventions import IMAGENET_MEAN, IMAGENET_STD
from skipless.errors import SkiplessError

from ..shared.backbones import BackboneSpec, run_config_value
from ..shared.square_images import evenly_spaced

RUN = "run"
RUN_KEYS = ("data.name", "data.root", "aug.image_size", "aug.eval_crop_pct", "aug.interpolation")


class RunImagesError(SkiplessError, ValueError):
    """A backbone whose run's validation images ``images=run`` cannot name."""


@dataclass(frozen=True)
class RunSplit:
    """A backbone's own validation split (``val``), opened and checked, its images not read yet."""

    run: Path
    dataset: LabelledImages
    image_size: int

    def load(self, fraction: float | None, num_images: int) -> torch.Tensor:
        """(count, 3, S, S) normalised images: ``fraction`` of the split evenly spread, or its first ``num_images``."""
        total = len(self.dataset)
        indices = evenly_spaced(total, fraction) if fraction is not None else list(range(min(num_images, total)))
        return torch.stack([self.dataset[i][0] for i in indices])


def run_folder(spec: BackboneSpec) -> Path:
    """The run folder a backbone file lies in (``<run>/backbone.pt``, ``<run>/backbone-epoch<N>.pt``)."""
    if spec.path is None or not (spec.path.parent / "config.yaml").is_file():
        where = "has no file" if spec.path is None else f"lies in {spec.path.parent}, which has no config.yaml"
        raise RunImagesError(f"images=run reads the validation images of the run a backbone was trained in, and "
                             f"{spec.name} {where}; expected run folders of make train in ckpt, or images=<folder>")
    return spec.path.parent


def run_split(spec: BackboneSpec) -> RunSplit:
    """Open ``spec``'s run's validation split (module docstring); one sentence when its config lacks a key or
    the dataset is not where the run read it."""
    run = run_folder(spec)
    values: dict[str, Any] = {key: run_config_value(run, key) for key in RUN_KEYS}
    missing = [k for k, v in values.items() if v is None]
    if missing:
        raise RunImagesError(f"images=run needs {', '.join(missing)} in {run / 'config.yaml'} (a make train run's "
                             "config); expected a supervised run, or images=<folder>")
    size = int(values["aug.image_size"])
    transform = create_transform(size, is_training=False, crop_pct=float(values["aug.eval_crop_pct"]),
                                 interpolation=str(values["aug.interpolation"]), mean=IMAGENET_MEAN, std=IMAGENET_STD)
    dataset = classification_split(str(values["data.name"]), str(values["data.root"]), "val", transform=transform)
    if len(dataset) < 2:
        raise RunImagesError(f"the val split of {values['data.name']} at {values['data.root']} has {len(dataset)} "
                             "images; the embedding measures need at least 2")
    return RunSplit(run, dataset, size)


def check_fraction(cfg: DictConfig) -> None:
    """``image_fraction`` needs a split to take a fraction of: not ``images=gaussian``."""
    if cfg.image_fraction is not None and cfg.images == "gaussian":
        raise RunImagesError("image_fraction takes a fraction of a split of images, and images=gaussian draws "
                             "num_images of noise; expected image_fraction=null with images=gaussian")
