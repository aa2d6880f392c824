"""Views of a segmentation dataset: a seeded random subset, a mirrored copy; same names and classes.

The paper probes ADE20K and COCO-Stuff on 3,000 randomly sampled training images (Section 6.2.1):
``random_subset``. ``Mirrored`` is the probe's ``augmentation: flip``.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from PIL import Image

from ...config import ConfigError


class _View:
    """A dataset seen through a change of its images (a subset, a flip): same names and classes."""

    def __init__(self, base: Any, split: str) -> None:
        self.base, self.name, self.class_names, self.split = base, base.name, base.class_names, split

    @property
    def num_classes(self) -> int:
        return self.base.num_classes


class Subset(_View):
    """The images ``indices`` of a dataset, with the same interface."""

    def __init__(self, base: Any, indices: Sequence[int]) -> None:
        super().__init__(base, getattr(base, "split", ""))
        self.indices = [int(i) for i in indices]
        self.ids = [base.ids[i] for i in self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def image(self, index: int) -> Image.Image:
        return self.base.image(self.indices[index])

    def mask(self, index: int) -> np.ndarray:
        return self.base.mask(self.indices[index])

    def label_file(self, index: int):
        return self.base.label_file(self.indices[index])


class Mirrored(_View):
    """The same images and label maps, flipped left to right (the probe's ``augmentation: flip``)."""

    def __init__(self, base: Any) -> None:
        super().__init__(base, f"{getattr(base, 'split', '')}-mirrored")
        self.ids = base.ids

    def __len__(self) -> int:
        return len(self.base)

    def image(self, index: int) -> Image.Image:
        return self.base.image(index).transpose(Image.FLIP_LEFT_RIGHT)

    def mask(self, index: int) -> np.ndarray:
        return np.ascontiguousarray(self.base.mask(index)[:, ::-1])


def random_subset(dataset: Any, size: int | None, seed: int) -> Any:
    """A seeded random sample of ``size`` images (in dataset order); all of them if size is None or larger."""
    if size is None or size >= len(dataset):
        return dataset
    if size <= 0:
        raise ConfigError(f"a subset needs a positive number of images, got {size}")
    picked = np.sort(np.random.default_rng(seed).choice(len(dataset), size=size, replace=False))
    return Subset(dataset, picked)

