"""The interface of the semantic-segmentation readers, and the reader of the VOC layout for it.

Every segmentation dataset answers the same small interface (``SegDataset``), so the probe never
branches on a name: ``ids`` (one per image, used to name saved predictions), ``class_names``,
``num_classes``, ``image(i)`` (PIL RGB) and ``mask(i)`` (uint8 train ids ``0 .. num_classes - 1``,
255 ignored). VOC 2012 and the embedded default store palette PNGs read as indices, 0 background,
255 void (``VOCSegmentation``; split ``trainaug`` reads ``SegmentationClassAug``). ADE20K
(``ade20k.py``) and COCO-Stuff (``cocostuff.py``) pair image and label folders (``PairedFolders``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
from PIL import Image

from ..errors import MalformedDatasetError, missing_dataset
from ..voc import IGNORE_INDEX, VOCSegmentation, load_mask, load_rgb


class SegDataset(Protocol):
    """What the probe needs of a segmentation dataset."""

    name: str
    ids: list[str]
    class_names: tuple[str, ...]

    @property
    def num_classes(self) -> int: ...

    def __len__(self) -> int: ...

    def image(self, index: int) -> Image.Image: ...

    def mask(self, index: int) -> np.ndarray: ...



class LabelledImages:
    """What the readers of files share: ``ids`` and ``class_names`` give the length and class count."""

    ids: list[str]
    class_names: tuple[str, ...]

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def __len__(self) -> int:
        return len(self.ids)


class VOCSegDataset(LabelledImages):
    """VOC 2012 (or the embedded default, which is written in VOC's layout) for the probe.

    Values at or above ``num_classes`` other than 255 (none in real VOC) are ignored, never
    counted as a class.
    """

    def __init__(self, root: str | os.PathLike, split: str, name: str = "voc") -> None:
        self._voc = VOCSegmentation(root, split)
        self.name, self.split = name, split
        self.ids = list(self._voc.ids)
        self.class_names = tuple(self._voc.class_names)
        self._lut = np.full(256, IGNORE_INDEX, dtype=np.uint8)
        self._lut[:self.num_classes] = np.arange(self.num_classes, dtype=np.uint8)

    def image(self, index: int) -> Image.Image:
        return load_rgb(self._voc.image_dir / f"{self.ids[index]}.jpg")

    def label_file(self, index: int) -> Path:
        return self._voc.mask_dir / f"{self.ids[index]}.png"

    def mask(self, index: int) -> np.ndarray:
        return self._lut[load_mask(self.label_file(index))]



class PairedFolders(LabelledImages):
    """Images ``<image_dir>/<id>.jpg`` paired with label PNGs found by ``label_path(id)``."""

    name: str
    class_names: tuple[str, ...]

    def __init__(self, image_dir: Path, title: str, layout: str,
                 label_path: Callable[[str], Path | None]) -> None:
        if not image_dir.is_dir():
            raise missing_dataset(title, image_dir, layout)
        self.ids = sorted(p.stem for p in image_dir.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
        if not self.ids:
            raise missing_dataset(f"{title} (no images)", image_dir, layout)
        self._suffix = {p.stem: p.suffix for p in image_dir.iterdir()}
        self.image_dir = image_dir
        self._labels: list[Path] = []
        missing = []
        for image_id in self.ids:
            path = label_path(image_id)
            if path is None:
                missing.append(image_id)
            else:
                self._labels.append(path)
        if missing:
            raise missing_dataset(f"{title} (no label PNG for {len(missing)} of {len(self.ids)} images, "
                                  f"e.g. {missing[0]})", image_dir.parent.parent / "annotations", layout)

    def image(self, index: int) -> Image.Image:
        image_id = self.ids[index]
        return load_rgb(self.image_dir / f"{image_id}{self._suffix[image_id]}")

    def label_file(self, index: int) -> Path:
        return self._labels[index]



def check_pair(image: Image.Image, mask: np.ndarray, image_id: str) -> None:
    """An image and its label map must have the same size."""
    if mask.shape != (image.height, image.width):
        raise MalformedDatasetError(f"label map of {image_id} is {mask.shape[1]}x{mask.shape[0]} but its image is "
                                    f"{image.width}x{image.height}; see data/README.md")
