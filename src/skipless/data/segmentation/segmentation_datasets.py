"""The semantic-segmentation datasets of the dense probe, by name: ``SEGMENTATION_DATASETS``.

Each entry builds a reader of ``segmentation.SegDataset``'s interface from a data root and a split;
``build_split`` adds the seeded random subset the paper uses for ADE20K and COCO-Stuff (3,000
training images, Section 6.2.1). The object-discovery datasets are another registry
(``discovery_datasets.DISCOVERY_DATASETS``): the same name there means boxes, not label maps.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from .ade20k import ADE20K
from .cocostuff import COCOStuff
from ..errors import UnknownDatasetError
from .label_modes import check_label_modes
from .seg_views import random_subset
from .interface import VOCSegDataset
from ..voc import voc_dir


def _voc(root: str, split: str) -> VOCSegDataset:
    return VOCSegDataset(root, split, name="voc")


def _default(root: str, split: str) -> VOCSegDataset:
    """The embedded default, generated on first use when its folder does not exist yet."""
    if not voc_dir(root).is_dir():
        from ..generator.synthetic import ensure_default  # generation is only imported when needed
        ensure_default(root)
    return VOCSegDataset(root, split, name="default")


SEGMENTATION_DATASETS: dict[str, Callable[[str, str], Any]] = {
    "default": _default,
    "voc": _voc,
    "ade20k": ADE20K,
    "cocostuff": COCOStuff,
}


def build_split(name: str, root: str | os.PathLike, split: str, subset: int | None = None, seed: int = 0) -> Any:
    """The reader of split ``split`` of dataset ``name`` at ``root``, optionally a seeded random subset,
    each of its label files checked to be a class-index PNG (``label_modes``).

    Args:
        name: a key of ``SEGMENTATION_DATASETS``.
        root: the data root (``roots.<name>`` of configs/probe.yaml).
        split: the dataset's own split name (``train``, ``training``, ``val2017`` ...).
        subset: a number of images drawn at random (seeded); None keeps all.
        seed: seed of the random subset.
    """
    if name not in SEGMENTATION_DATASETS:
        raise UnknownDatasetError(f"unknown segmentation dataset {name!r}; expected one of: "
                                  f"{', '.join(SEGMENTATION_DATASETS)}")
    dataset = random_subset(SEGMENTATION_DATASETS[name](str(root), str(split)), None if subset is None else int(subset), seed)
    check_label_modes(dataset)  # an RGB label map is said now, not after a split's features were extracted
    return dataset
