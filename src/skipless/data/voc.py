"""Readers of the PASCAL VOC layout, shared by real VOC 2007/2012 and the embedded default.

The embedded default is written in exactly this layout (``generator/synthetic.py``), so one set of readers
serves both and a result on the default exercises the code path of a result on real VOC.
``root`` is always the data root that *contains* ``VOCdevkit/``:

    <root>/VOCdevkit/VOC2012/JPEGImages/<id>.jpg
    <root>/VOCdevkit/VOC2012/SegmentationClass/<id>.png      palette PNG, values = class indices
    <root>/VOCdevkit/VOC2012/SegmentationClassAug/<id>.png   optional (split "trainaug")
    <root>/VOCdevkit/VOC2012/Annotations/<id>.xml
    <root>/VOCdevkit/VOC2012/ImageSets/Segmentation/{train,val}.txt
    <root>/VOCdevkit/VOC2012/ImageSets/Main/trainval.txt

Masks are read as the palette *indices* (``np.array(Image.open(p))``), never converted to RGB:
0 is background, 1..K the classes, 255 the "void" band along object boundaries (ignored).
"""
from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image

from .conventions import IGNORE_INDEX
from .errors import MalformedDatasetError, missing_dataset, own_folder_hint
from .reads import UnreadableSkips

VOC_CLASSES: tuple[str, ...] = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
    "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa",
    "train", "tvmonitor")
MARKER = "skipless_default.json"  # written by generator/synthetic.py into VOC2012/; marks the generated default
SEG_LAYOUT = ("<root>/VOCdevkit/VOC{year}/{{JPEGImages/<id>.jpg, {masks}/<id>.png, "
              "ImageSets/Segmentation/<split>.txt}}")
DET_LAYOUT = ("<root>/VOCdevkit/VOC{year}/{{JPEGImages/<id>.jpg, Annotations/<id>.xml, "
              "ImageSets/Main/<split>.txt}}")


def voc_palette() -> list[int]:
    """VOC's colour map as a flat list of 768 ints for ``Image.putpalette``.

    Colour of index i: the bits of i are dealt in turn to R, G and B, most significant first, so
    that small indices get well separated colours (1 = dark red, 2 = dark green, 255 = cream).
    """
    palette = []
    for index in range(256):
        rgb, bits = [0, 0, 0], index
        for shift in range(7, -1, -1):
            for channel in range(3):
                rgb[channel] |= ((bits >> channel) & 1) << shift
            bits >>= 3
        palette.extend(rgb)
    return palette


def voc_dir(root: str | os.PathLike, year: str = "2012") -> Path:
    """``<root>/VOCdevkit/VOC<year>``: the folder that holds JPEGImages, Annotations, ..."""
    return Path(root) / "VOCdevkit" / f"VOC{year}"


def read_marker(voc: Path) -> dict[str, Any] | None:
    """The generated default's description (classes, sizes, seed), or None for real VOC."""
    path = voc / MARKER
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def class_names_of(voc: Path) -> tuple[str, ...]:
    """Class names with background first: the default's own classes, or VOC's 21."""
    marker = read_marker(voc)
    return tuple(marker["classes"]) if marker and "classes" in marker else VOC_CLASSES


def read_ids(voc: Path, split: str, kinds: tuple[str, ...], name: str, layout: str) -> list[str]:
    """Image ids of ``ImageSets/<kind>/<split>.txt`` for the first kind whose list exists."""
    if not voc.is_dir():
        raise missing_dataset(name, voc, layout, own_folder_hint(voc.parent.parent, ("VOCdevkit",)))
    for kind in kinds:
        path = voc / "ImageSets" / kind / f"{split}.txt"
        if path.is_file():
            # Main/<class>_<split>.txt lines carry a second column (the presence flag): keep the id.
            ids = [line.split()[0] for line in path.read_text().splitlines() if line.strip()]
            if not ids:
                raise MalformedDatasetError(f"{name}: the list {str(path)!r} is empty; see data/README.md")
            return ids
    raise missing_dataset(name, voc / "ImageSets" / kinds[0] / f"{split}.txt", layout)


def check_files(folder: Path, ids: list[str], suffix: str, name: str, layout: str) -> None:
    """Fail early, with one clear error, when the list names files that are not in ``folder``."""
    if not folder.is_dir():
        raise missing_dataset(name, folder, layout)
    present = set(os.listdir(folder))
    missing = [i for i in ids if i + suffix not in present]
    if missing:
        raise missing_dataset(
            f"{name} ({len(missing)} of {len(ids)} listed files, e.g. {missing[0]}{suffix})", folder, layout)


def load_rgb(path: Path) -> Image.Image:
    """Open an image and return it as RGB (VOC has a few grayscale / CMYK JPEGs)."""
    with Image.open(path) as image:
        return image.convert("RGB")


MASK_MODES = ("P", "L")  # what a label map may be: palette indices or 8-bit grey values, both class indices


def mask_mode_error(path: Path, mode: str | None, more: str = "") -> MalformedDatasetError:
    """The one sentence for a label file that is not a class-index PNG (``mode`` None: not a PNG at all);
    ``more`` adds how many others are alike."""
    what = f"has mode {mode!r}" if mode is not None else "is not a PNG file"
    return MalformedDatasetError(f"mask {str(path)!r} {what}{more}; expected a palette (P) or index (L) PNG "
                                 "whose pixel values are class indices; see data/README.md")


def load_mask(path: Path) -> np.ndarray:
    """Class indices of a VOC mask, uint8 (H, W); refuses RGB masks instead of misreading them."""
    with Image.open(path) as image:
        if image.mode not in MASK_MODES:
            raise mask_mode_error(path, image.mode)
        return np.array(image, dtype=np.uint8)


@dataclass
class VOCAnnotation:
    """One parsed ``Annotations/<id>.xml``; ``boxes`` in 0-based ``x0, y0, x1, y1`` (see below)."""

    filename: str
    width: int
    height: int
    names: list[str]
    boxes: np.ndarray  # float32 (n, 4)
    difficult: np.ndarray  # bool (n,)
    truncated: np.ndarray  # bool (n,)


def parse_annotation(path: Path) -> VOCAnnotation:
    """Read a VOC XML file.

    VOC boxes are 1-based inclusive pixel indices: ``xmin=1, xmax=W`` spans the whole width. In
    continuous 0-based coordinates that is ``x0 = xmin - 1, x1 = xmax`` (same for y), which is the
    convention of LOST / TokenCut for CorLoc and gives ``x1 - x0`` = the width in pixels.
    """
    try:
        tree = ET.parse(path)
    except ET.ParseError as error:
        raise MalformedDatasetError(f"annotation {str(path)!r} is not valid XML ({error})") from error
    node = tree.getroot()
    size = node.find("size")
    names, boxes, difficult, truncated = [], [], [], []
    for obj in node.iter("object"):
        box = obj.find("bndbox")
        if box is None:
            continue
        xmin, ymin, xmax, ymax = (float(box.findtext(k, "nan")) for k in ("xmin", "ymin", "xmax", "ymax"))
        names.append((obj.findtext("name") or "").strip())
        boxes.append((xmin - 1.0, ymin - 1.0, xmax, ymax))
        difficult.append((obj.findtext("difficult") or "0").strip() == "1")
        truncated.append((obj.findtext("truncated") or "0").strip() == "1")
    return VOCAnnotation(
        filename=node.findtext("filename") or path.with_suffix(".jpg").name,
        width=int(size.findtext("width", "0")) if size is not None else 0,
        height=int(size.findtext("height", "0")) if size is not None else 0,
        names=names, boxes=np.asarray(boxes, dtype=np.float32).reshape(-1, 4),
        difficult=np.asarray(difficult, dtype=bool), truncated=np.asarray(truncated, dtype=bool))


class VOCSegmentation:
    """``(PIL RGB image, uint8 mask of class indices)`` pairs of a VOC segmentation split.

    Args:
        root: data root containing ``VOCdevkit/``.
        split: a list of ``ImageSets/Segmentation/`` ("train", "val", "trainval"), or "trainaug",
            which reads its masks from ``SegmentationClassAug/`` (the 10,582-image augmented set).
        year: VOC year, "2012" for segmentation.

    Attributes:
        ids: image ids in list order.
        num_classes: 21 for real VOC, 1 + the number of object classes for the default.
        class_names: names, background first.
    """

    def __init__(self, root: str | os.PathLike, split: str = "train", year: str = "2012") -> None:
        self.voc = voc_dir(root, year)
        masks = "SegmentationClassAug" if split == "trainaug" else "SegmentationClass"
        name = f"PASCAL VOC {year} segmentation ({split})"
        layout = SEG_LAYOUT.format(year=year, masks=masks)
        self.ids = read_ids(self.voc, split, ("Segmentation",), name, layout)
        self.image_dir, self.mask_dir = self.voc / "JPEGImages", self.voc / masks
        check_files(self.image_dir, self.ids, ".jpg", name, layout)
        check_files(self.mask_dir, self.ids, ".png", name, layout)
        self.class_names = class_names_of(self.voc)
        self.num_classes = len(self.class_names)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[Image.Image, np.ndarray]:
        image_id = self.ids[index]
        image = load_rgb(self.image_dir / f"{image_id}.jpg")
        mask = load_mask(self.mask_dir / f"{image_id}.png")
        if mask.shape != (image.height, image.width):
            raise MalformedDatasetError(
                f"mask of {image_id} is {mask.shape[1]}x{mask.shape[0]} but its image is "
                f"{image.width}x{image.height}; see data/README.md")
        return image, mask


class VOCDetection:
    """``(PIL RGB image, float32 boxes (n, 4))`` of a VOC detection split (VOC07 / VOC12 / default).

    Boxes are 0-based continuous ``x0, y0, x1, y1`` (``parse_annotation``). TokenCut's CorLoc
    keeps every box, difficult ones included, hence the default ``drop_difficult=False``; LOST's
    "remove hards" variant also drops truncated boxes (``drop_truncated=True``). Names and flags of
    the kept boxes come from ``annotation(index)``.
    """

    def __init__(self, root: str | os.PathLike, split: str = "trainval", year: str = "2012",
                 drop_difficult: bool = False, drop_truncated: bool = False) -> None:
        self.voc = voc_dir(root, year)
        name = f"PASCAL VOC {year} detection ({split})"
        layout = DET_LAYOUT.format(year=year)
        self.ids = read_ids(self.voc, split, ("Main",), name, layout)
        self.image_dir, self.annotation_dir = self.voc / "JPEGImages", self.voc / "Annotations"
        check_files(self.image_dir, self.ids, ".jpg", name, layout)
        check_files(self.annotation_dir, self.ids, ".xml", name, layout)
        self.drop_difficult, self.drop_truncated = drop_difficult, drop_truncated
        self.class_names = class_names_of(self.voc)

    def __len__(self) -> int:
        return len(self.ids)

    def annotation(self, index: int) -> VOCAnnotation:
        """The parsed XML of one image, restricted to the boxes this dataset keeps."""
        ann = parse_annotation(self.annotation_dir / f"{self.ids[index]}.xml")
        keep = np.ones(len(ann.names), dtype=bool)
        if self.drop_difficult:
            keep &= ~ann.difficult
        if self.drop_truncated:
            keep &= ~ann.truncated
        ann.names = [n for n, k in zip(ann.names, keep) if k]
        ann.boxes, ann.difficult, ann.truncated = ann.boxes[keep], ann.difficult[keep], ann.truncated[keep]
        return ann

    def __getitem__(self, index: int) -> tuple[Image.Image, np.ndarray]:
        image = load_rgb(self.image_dir / f"{self.ids[index]}.jpg")
        return image, self.annotation(index).boxes


class VOCImages(UnreadableSkips):
    """The images of a VOC split alone (pretraining), optionally transformed.

    Reads ``ImageSets/Segmentation/<split>.txt`` and falls back to ``ImageSets/Main/<split>.txt``,
    so that real VOC's larger detection lists can be used too. An unreadable image is skipped, as by
    ``ImageFolderDataset`` (``reads.UnreadableSkips``: ``files``, ``limit_reads``, the hooks).
    """

    def __init__(self, root: str | os.PathLike, split: str = "train", year: str = "2012",
                 transform: Callable[[Image.Image], Any] | None = None) -> None:
        self.voc = voc_dir(root, year)
        name = f"PASCAL VOC {year} images ({split})"
        layout = (f"<root>/VOCdevkit/VOC{year}/{{JPEGImages/<id>.jpg, "
                  "ImageSets/Segmentation/<split>.txt or ImageSets/Main/<split>.txt}")
        self.ids = read_ids(self.voc, split, ("Segmentation", "Main"), name, layout)
        self.image_dir = self.voc / "JPEGImages"
        check_files(self.image_dir, self.ids, ".jpg", name, layout)
        self.files = [self.image_dir / f"{i}.jpg" for i in self.ids]
        self.transform = transform
        self._start_skips()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> Any:
        image = self._first_readable(index, lambda i: self._decode(i, self.files[i]), self.files.__getitem__,
                                     lambda: MalformedDatasetError(f"none of the {len(self)} images of "
                                                                   f"{self.image_dir} can be read"))
        return self.transform(image) if self.transform is not None else image


class VOCClassification:
    """``(PIL RGB image, label)`` with label = the image's dominant object class, 0-based.

    The dominant class is the one with most mask pixels, 0 (background) and 255 (void) excluded;
    ties go to the smaller index. Labels are in ``[0, num_classes - 1]`` over the object classes
    (``class_names`` has no background); an image without any object pixel gets -1. This gives a
    k-NN monitor of pretraining a labelled task without a separate classification dataset.
    """

    def __init__(self, root: str | os.PathLike, split: str = "train", year: str = "2012",
                 transform: Callable[[Image.Image], Any] | None = None) -> None:
        self.segmentation = VOCSegmentation(root, split, year)
        self.ids = self.segmentation.ids
        self.class_names = self.segmentation.class_names[1:]
        self.num_classes = len(self.class_names)
        self.transform = transform
        self._labels: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def label(self, index: int) -> int:
        """Dominant object class of one image (read once from its mask, then cached)."""
        if index not in self._labels:
            mask = load_mask(self.segmentation.mask_dir / f"{self.ids[index]}.png")
            counts = np.bincount(mask.ravel(), minlength=256)[1:self.num_classes + 1]
            self._labels[index] = int(counts.argmax()) if counts.any() else -1
        return self._labels[index]

    @property
    def labels(self) -> np.ndarray:
        """All labels, int64 (n,); reading every mask once (~1 s for 2,000 small PNGs)."""
        return np.array([self.label(i) for i in range(len(self))], dtype=np.int64)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        image = load_rgb(self.segmentation.image_dir / f"{self.ids[index]}.jpg")
        return (self.transform(image) if self.transform is not None else image), self.label(index)
