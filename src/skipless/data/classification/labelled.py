"""``LabelledImages``: what every classification reader gives (``registry.py`` lists the readers
by name): ``(image, label)`` pairs with ``label`` in ``[0, num_classes)``, ``class_names``, all
``labels`` as an array (for k-NN and class counts without decoding an image) and ``skipped``, the
unreadable images met so far. One corrupt JPEG in a class folder must not stop a 300-epoch run:
``__getitem__`` serves the next readable image (with *its* label) instead, counts the skip and warns
once per file; ``read(index)`` is the strict version for callers that would rather leave the image out
(the evaluators' feature extraction).

The readers (``imagenet.py``, ``cifar.py``, ``tiny_imagenet.py``, ``mnist.py``, ``digits.py``) import this module and
nothing of ``registry.py``, which imports them to build its table: no circle.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
from PIL import Image

from ..errors import MalformedDatasetError
from ..reads import UnreadableSkips


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
        """The PIL RGB image of sample ``index``; raises one of ``reads.READ_ERRORS`` if it cannot be read. A
        file is read under ``limit_reads``'s limits; an array (CIFAR, MNIST, digits: whole datasets of one known
        size) is not checked."""
        item = self.items[index]
        if isinstance(item, np.ndarray):
            return Image.fromarray(item)
        return self._decode(index, item)

    def read(self, index: int) -> tuple[Any, int]:
        """``(transform(image), label)`` of sample ``index``; raises if the image cannot be read."""
        image = self.image(index)
        return (self.transform(image) if self.transform is not None else image), int(self._labels[index])

    def __getitem__(self, index: int) -> tuple[Any, int]:
        return self._first_readable(index, self.read, self.items.__getitem__,
                                    lambda: MalformedDatasetError(f"{self.name}: none of its {len(self)} images can "
                                                                  "be read"))
