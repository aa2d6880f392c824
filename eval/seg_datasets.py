"""Semantic-segmentation datasets of the dense linear probe, read in the layouts users already have.

Every dataset here answers the same small interface, so the probe never branches on a name:
``ids`` (one per image, used to name saved predictions), ``class_names``, ``num_classes``,
``image(i)`` (PIL RGB) and ``mask(i)`` (uint8 train ids ``0 .. num_classes - 1``, 255 ignored).
The label conventions of each layout (SPEC section 5, data/README.md):

- VOC 2012 and the embedded default: palette PNGs read as indices, 0 background, 255 void
  (``skipless.data.VOCSegmentation``; split ``trainaug`` reads ``SegmentationClassAug``).
- ADE20K (``ADEChallengeData2016``): 150 classes; label 0 ("other") is ignored: 0 -> 255, k -> k-1.
- COCO-Stuff 164k: the stuffthingmaps PNGs hold raw ids 0-181 (COCO category id - 1; 255
  unlabeled); 11 of COCO's 91 thing ids are unused, leaving 80 things + 91 stuff = 171 train ids,
  numbered in raw-id order (the convention of the COCO-Stuff repository and mmsegmentation).
  mmsegmentation's converted ``<id>_labelTrainIds.png`` already hold train ids and pass through.

``build_split`` turns a dataset name and its config into a reader, with the seeded random subset
of training images the paper uses for ADE20K and COCO-Stuff (3,000, Section 6.2.1).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np
from PIL import Image

from skipless.data.errors import MalformedDatasetError, missing_dataset
from skipless.data.voc import IGNORE_INDEX, VOCSegmentation, load_mask, load_rgb, voc_dir

ADE20K_CLASSES: tuple[str, ...] = (
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane", "grass",
    "cabinet", "sidewalk", "person", "earth", "door", "table", "mountain", "plant", "curtain", "chair",
    "car", "water", "painting", "sofa", "shelf", "house", "sea", "mirror", "rug", "field",
    "armchair", "seat", "fence", "desk", "rock", "wardrobe", "lamp", "bathtub", "railing", "cushion",
    "base", "box", "column", "signboard", "chest of drawers", "counter", "sand", "sink", "skyscraper",
    "fireplace", "refrigerator", "grandstand", "path", "stairs", "runway", "case", "pool table",
    "pillow", "screen door", "stairway", "river", "bridge", "bookcase", "blind", "coffee table",
    "toilet", "flower", "book", "hill", "bench", "countertop", "stove", "palm", "kitchen island",
    "computer", "swivel chair", "boat", "bar", "arcade machine", "hovel", "bus", "towel", "light",
    "truck", "tower", "chandelier", "awning", "streetlight", "booth", "television receiver",
    "airplane", "dirt track", "apparel", "pole", "land", "bannister", "escalator", "ottoman",
    "bottle", "buffet", "poster", "stage", "van", "ship", "fountain", "conveyer belt", "canopy",
    "washer", "plaything", "swimming pool", "stool", "barrel", "basket", "waterfall", "tent", "bag",
    "minibike", "cradle", "oven", "ball", "food", "step", "tank", "trade name", "microwave", "pot",
    "animal", "bicycle", "lake", "dishwasher", "screen", "blanket", "sculpture", "hood", "sconce",
    "vase", "traffic light", "tray", "ashcan", "fan", "pier", "crt screen", "plate", "monitor",
    "bulletin board", "shower", "radiator", "glass", "clock", "flag")

COCO_THINGS: tuple[str, ...] = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich", "orange",
    "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch", "potted plant", "bed",
    "dining table", "toilet", "tv", "laptop", "mouse", "remote", "keyboard", "cell phone",
    "microwave", "oven", "toaster", "sink", "refrigerator", "book", "clock", "vase", "scissors",
    "teddy bear", "hair drier", "toothbrush")
COCO_STUFF: tuple[str, ...] = (  # category ids 92-182, raw ids 91-181
    "banner", "blanket", "branch", "bridge", "building-other", "bush", "cabinet", "cage", "cardboard",
    "carpet", "ceiling-other", "ceiling-tile", "cloth", "clothes", "clouds", "counter", "cupboard",
    "curtain", "desk-stuff", "dirt", "door-stuff", "fence", "floor-marble", "floor-other",
    "floor-stone", "floor-tile", "floor-wood", "flower", "fog", "food-other", "fruit",
    "furniture-other", "grass", "gravel", "ground-other", "hill", "house", "leaves", "light", "mat",
    "metal", "mirror-stuff", "moss", "mountain", "mud", "napkin", "net", "paper", "pavement", "pillow",
    "plant-other", "plastic", "platform", "playingfield", "railing", "railroad", "river", "road",
    "rock", "roof", "rug", "salad", "sand", "sea", "shelf", "sky-other", "skyscraper", "snow",
    "solid-other", "stairs", "stone", "straw", "structural-other", "table", "tent", "textile-other",
    "towel", "tree", "vegetable", "wall-brick", "wall-concrete", "wall-other", "wall-panel",
    "wall-stone", "wall-tile", "wall-wood", "water-other", "waterdrops", "window-blind",
    "window-other", "wood")
COCOSTUFF_CLASSES: tuple[str, ...] = COCO_THINGS + COCO_STUFF
# COCO category ids 12, 26, 29, 30, 45, 66, 68, 69, 71, 83, 91 were never annotated: raw id = id - 1.
COCO_UNUSED_RAW_IDS: tuple[int, ...] = (11, 25, 28, 29, 44, 65, 67, 68, 70, 82, 90)

ADE20K_LAYOUT = ("<root>/ADEChallengeData2016/{images/<split>/ADE_*.jpg, annotations/<split>/ADE_*.png} "
                 "with split training|validation")
COCOSTUFF_LAYOUT = ("<root>/{images/<split>/<id>.jpg, annotations/<split>/<id>.png (raw ids 0-181) or "
                    "<id>_labelTrainIds.png} with split train2017|val2017")


class UnknownDatasetError(ValueError):
    """A dataset name that is not in ``DATASETS``; the message lists the known ones."""


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


def ade20k_lut() -> np.ndarray:
    """uint8 lookup table raw ADE20K label -> train id: 0 -> 255, 1..150 -> 0..149, above -> 255."""
    lut = np.full(256, IGNORE_INDEX, dtype=np.uint8)
    lut[1:151] = np.arange(150, dtype=np.uint8)
    return lut


def cocostuff_lut() -> np.ndarray:
    """uint8 lookup table raw COCO-Stuff id (0-181) -> train id (0-170); unused/unlabeled -> 255."""
    lut = np.full(256, IGNORE_INDEX, dtype=np.uint8)
    used = [r for r in range(182) if r not in COCO_UNUSED_RAW_IDS]
    lut[used] = np.arange(len(used), dtype=np.uint8)
    return lut


class _LabelledImages:
    """What the readers of files share: ``ids`` and ``class_names`` give the length and class count."""

    ids: list[str]
    class_names: tuple[str, ...]

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def __len__(self) -> int:
        return len(self.ids)


class VOCSegDataset(_LabelledImages):
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

    def mask(self, index: int) -> np.ndarray:
        return self._lut[load_mask(self._voc.mask_dir / f"{self.ids[index]}.png")]


class _PairedFolders(_LabelledImages):
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


class ADE20K(_PairedFolders):
    """ADE20K scene parsing (MIT SceneParsing, ``ADEChallengeData2016``), 150 classes.

    Args:
        root: data root containing ``ADEChallengeData2016/``.
        split: ``training`` (20,210 images) or ``validation`` (2,000).
    """

    class_names = ADE20K_CLASSES

    def __init__(self, root: str | os.PathLike, split: str = "training") -> None:
        self.name, self.split = "ade20k", split
        base = Path(root) / "ADEChallengeData2016"
        title = f"ADE20K ({split})"
        if not base.is_dir():
            raise missing_dataset(title, base, ADE20K_LAYOUT)
        labels = base / "annotations" / split
        present = set(os.listdir(labels)) if labels.is_dir() else set()
        super().__init__(base / "images" / split, title, ADE20K_LAYOUT,
                         lambda i: labels / f"{i}.png" if f"{i}.png" in present else None)
        self._lut = ade20k_lut()

    def mask(self, index: int) -> np.ndarray:
        return self._lut[load_mask(self.label_file(index))]


class COCOStuff(_PairedFolders):
    """COCO-Stuff 164k (Caesar et al. 2018), 171 classes.

    Args:
        root: data root containing ``images/`` and ``annotations/``.
        split: ``train2017`` (118k images) or ``val2017`` (5,000).

    For each image the reader takes ``annotations/<split>/<id>_labelTrainIds.png`` when present
    (already train ids) and ``annotations/<split>/<id>.png`` (raw ids, mapped) otherwise.
    """

    class_names = COCOSTUFF_CLASSES

    def __init__(self, root: str | os.PathLike, split: str = "train2017") -> None:
        self.name, self.split = "cocostuff", split
        title = f"COCO-Stuff 164k ({split})"
        labels = Path(root) / "annotations" / split
        present = set(os.listdir(labels)) if labels.is_dir() else set()

        def label_path(image_id: str) -> Path | None:
            for name in (f"{image_id}_labelTrainIds.png", f"{image_id}.png"):
                if name in present:
                    return labels / name
            return None

        super().__init__(Path(root) / "images" / split, title, COCOSTUFF_LAYOUT, label_path)
        self._raw_lut = cocostuff_lut()
        self._train_lut = np.full(256, IGNORE_INDEX, dtype=np.uint8)
        self._train_lut[:171] = np.arange(171, dtype=np.uint8)

    def mask(self, index: int) -> np.ndarray:
        path = self.label_file(index)
        lut = self._train_lut if path.stem.endswith("_labelTrainIds") else self._raw_lut
        return lut[load_mask(path)]


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
        raise ValueError(f"a subset needs a positive number of images, got {size}")
    picked = np.sort(np.random.default_rng(seed).choice(len(dataset), size=size, replace=False))
    return Subset(dataset, picked)


def _voc(root: str, split: str) -> VOCSegDataset:
    return VOCSegDataset(root, split, name="voc")


def _default(root: str, split: str) -> VOCSegDataset:
    """The embedded default, generated on first use when its folder does not exist yet."""
    if not voc_dir(root).is_dir():
        from skipless.data import ensure_default  # generation is only imported when needed
        ensure_default(root)
    return VOCSegDataset(root, split, name="default")


DATASETS: dict[str, Callable[[str, str], Any]] = {
    "default": _default,
    "voc": _voc,
    "ade20k": ADE20K,
    "cocostuff": COCOStuff,
}


def build_split(name: str, settings: Mapping[str, Any], which: str, seed: int = 0) -> Any:
    """The ``train`` or ``val`` reader of dataset ``name`` as its ``settings`` ask.

    Args:
        name: a key of ``DATASETS``.
        settings: ``root``, ``train_split``, ``val_split``, ``train_subset``, ``val_subset``
            (the ``datasets.<name>`` block of configs/probe.yaml).
        which: ``train`` or ``val``.
        seed: seed of the random subset.
    """
    if name not in DATASETS:
        raise UnknownDatasetError(f"unknown dataset {name!r}; expected one of: {', '.join(DATASETS)}")
    if which not in ("train", "val"):
        raise ValueError(f"which must be 'train' or 'val', got {which!r}")
    dataset = DATASETS[name](str(settings["root"]), str(settings[f"{which}_split"]))
    size = settings.get(f"{which}_subset")
    return random_subset(dataset, None if size is None else int(size), seed)


def check_pair(image: Image.Image, mask: np.ndarray, image_id: str) -> None:
    """An image and its label map must have the same size."""
    if mask.shape != (image.height, image.width):
        raise MalformedDatasetError(f"label map of {image_id} is {mask.shape[1]}x{mask.shape[0]} but its image is "
                                    f"{image.width}x{image.height}; see data/README.md")
