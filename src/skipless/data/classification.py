"""Labelled image datasets for supervised training (``make train``) and the global-feature
evaluators (``make knn``, ``make linear``), by name: ``classification_split(name, root, split)``.

Every reader gives the same thing, a ``LabelledImages``: ``(image, label)`` pairs with ``label`` in
``[0, num_classes)``, ``class_names``, all ``labels`` as an array (for k-NN and class counts without
decoding an image) and ``skipped``, the unreadable images met so far. One corrupt JPEG in a class
folder must not stop a 300-epoch run: ``__getitem__`` serves the next readable image (with *its*
label) instead, counts the skip and warns once per file; ``read(index)`` is the strict version for
callers that would rather leave the image out (the evaluators' feature extraction).

The readers of each layout live in their own modules and register here (``imagenet.py``,
``cifar.py`` for ``cifar10`` / ``cifar100``, ``tiny_imagenet.py``, ``digits.py`` for scikit-learn's
8 x 8 digits upsampled to 28 x 28, which need no folder); the embedded default
(``default``) labels each generated scene with its dominant object class (10 classes), as the
k-NN monitor of pretraining does.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image

from .errors import MalformedDatasetError, UnknownDatasetError, UnreadableSkips
from .image_folder import READ_ERRORS, decode_rgb

SPLITS = ("train", "val")


class LabelledImages(UnreadableSkips):
    """``(image, label)`` pairs of one split; images read from files or held in memory.

    Args:
        name: the dataset as users call it, for messages ("CIFAR-10 train").
        items: per sample, a file path or an ``(H, W, 3)`` uint8 array.
        labels: per sample, its class in ``[0, len(class_names))``.
        class_names: the class of each index.
        transform: applied to the PIL image; None gives the PIL image.
    """

    def __init__(self, name: str, items: Sequence[Any], labels: Sequence[int] | np.ndarray,
                 class_names: Sequence[str], transform: Callable[[Image.Image], Any] | None = None) -> None:
        labels = np.asarray(labels, dtype=np.int64)
        if len(items) != len(labels):
            raise ValueError(f"{name}: {len(items)} images but {len(labels)} labels")
        if len(labels) and (labels.min() < 0 or labels.max() >= len(class_names)):
            raise MalformedDatasetError(
                f"{name}: labels from {labels.min()} to {labels.max()} but {len(class_names)} classes; "
                f"expected labels in [0, {len(class_names) - 1}]")
        self.name, self.items, self._labels = name, items, labels
        self.class_names = tuple(class_names)
        self.transform = transform
        self._start_skips()

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def labels(self) -> np.ndarray:
        """Every sample's label, int64 ``(n,)``, without reading an image."""
        return self._labels

    def __len__(self) -> int:
        return len(self.items)

    def image(self, index: int) -> Image.Image:
        """The PIL RGB image of sample ``index``; raises one of ``READ_ERRORS`` if it cannot be read."""
        item = self.items[index]
        if isinstance(item, np.ndarray):
            return Image.fromarray(item)
        return decode_rgb(item)

    def read(self, index: int) -> tuple[Any, int]:
        """``(transform(image), label)`` of sample ``index``; raises if the image cannot be read."""
        image = self.image(index)
        return (self.transform(image) if self.transform is not None else image), int(self._labels[index])

    def __getitem__(self, index: int) -> tuple[Any, int]:
        for step in range(len(self)):
            i = (index + step) % len(self)
            try:
                return self.read(i)
            except READ_ERRORS as error:
                self._skip(i, self.items[i], error)
        raise MalformedDatasetError(f"{self.name}: none of its {len(self)} images can be read")



def _default(root: Path, split: str, transform) -> LabelledImages:
    """The embedded default: each scene labelled with its dominant object class (``VOCClassification``);
    scenes without any object pixel (label -1) are left out."""
    from .voc import VOCClassification

    scenes = VOCClassification(root, split)
    keep = np.flatnonzero(scenes.labels >= 0)
    files = [scenes.segmentation.image_dir / f"{scenes.ids[i]}.jpg" for i in keep]
    return LabelledImages(f"default {split}", files, scenes.labels[keep], scenes.class_names, transform)


# name -> reader(root, split, transform); the other layouts add themselves in their modules.
READERS: dict[str, Callable[[Path, str, Any], LabelledImages]] = {"default": _default}


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


# The readers of the real layouts register themselves in READERS when imported; importing them here
# (after READERS and LabelledImages exist, which they import back) makes every name available to
# whoever imports this module alone, and works whichever module is imported first.
from . import cifar, digits, imagenet, tiny_imagenet  # noqa: E402,F401
