"""Labelled image datasets for supervised training (``make train``) and the global-feature
evaluators (``make knn``, ``make linear``), by name: ``classification_split(name, root, split)``.

Every reader gives the same thing, a ``LabelledImages`` (``labelled.py``: ``(image, label)`` pairs,
``class_names``, all ``labels`` as an array, the unreadable images skipped and counted).

The readers of each layout live in their own modules and are listed by name in ``READERS`` below
(``imagenet.py``, ``cifar.py`` for ``cifar10`` / ``cifar100``, ``tiny_imagenet.py``, ``mnist.py`` for
MNIST's IDX files, ``digits.py`` for scikit-learn's 8 x 8 digits upsampled to 28 x 28, which need no
folder); they import ``labelled.py`` only, never this module, so the table is written here and nothing
imports back. The embedded default (``default``) labels each generated scene with its dominant object
class (10 classes), as the k-NN monitor of pretraining does.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image

from .cifar import CIFAR10, CIFAR100, read_cifar
from .digits import read_digits
from ..errors import UnknownDatasetError
from .imagenet import read_imagenet
from .labelled import LabelledImages
from .mnist import read_mnist
from .tiny_imagenet import read_tiny_imagenet

SPLITS = ("train", "val")


def _default(root: Path, split: str, transform) -> LabelledImages:
    """The embedded default: each scene labelled with its dominant object class (``VOCClassification``);
    scenes without any object pixel (label -1) are left out."""
    from ..voc import VOCClassification

    scenes = VOCClassification(root, split)
    keep = np.flatnonzero(scenes.labels >= 0)
    files = [scenes.segmentation.image_dir / f"{scenes.ids[i]}.jpg" for i in keep]
    return LabelledImages(f"default {split}", files, scenes.labels[keep], scenes.class_names, transform)


# name -> reader(root, split, transform): every classification dataset a config may name.
READERS: dict[str, Callable[[Path, str, Any], LabelledImages]] = {
    "default": _default,
    "cifar10": lambda root, split, transform: read_cifar(CIFAR10, root, split, transform),
    "cifar100": lambda root, split, transform: read_cifar(CIFAR100, root, split, transform),
    "digits": read_digits,
    "imagenet": read_imagenet,
    "imagenet10": read_imagenet,  # ImageNet-10 (imagenet_subset.py, Imagenette): the same layout, a name of its own
    "mnist": read_mnist,
    "tiny-imagenet": read_tiny_imagenet,
}


def classification_split(name: str, root: str | os.PathLike, split: str,
                         transform: Callable[[Image.Image], Any] | None = None) -> LabelledImages:
    """The ``split`` ("train" or "val") of dataset ``name`` at ``root``.

    Raises:
        UnknownDatasetError: a name no reader knows (the message lists them).
        DatasetNotFoundError / MalformedDatasetError: from the reader, naming the expected layout.
    """
    if name not in READERS:
        raise UnknownDatasetError(f"unknown classification dataset {name!r}; expected one of: {', '.join(READERS)}")
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of: {', '.join(SPLITS)}")
    return READERS[name](Path(root), split, transform)

