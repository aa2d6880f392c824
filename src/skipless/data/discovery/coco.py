"""COCO20k: the 19,817 COCO train2014 images on which object discovery is scored (TokenCut's CorLoc).

The list ``coco_20k_filenames.txt`` comes from LOST (Simeoni et al., BMVC 2021; valeoai/LOST) and
is shipped by TokenCut (YangtaoWANG95/TokenCut, ``datasets/``); each line is ``train2014/COCO_train2014_<12 digits>.jpg``. Boxes come from COCO's
``instances_train2014.json`` as the reference code reads them (TokenCut ``datasets.py``,
``extract_gt_COCO``): crowd annotations dropped, ``[x, y, w, h]`` turned into
``[x, y, x + w, y + h]`` and rounded to integers (Python's ``round``). ``root`` holds:

    <root>/images/train2014/COCO_train2014_<12 digits>.jpg
    <root>/annotations/instances_train2014.json     (or LOST's filtered instances_train2014_sel20k.json)
    <root>/coco_20k_filenames.txt
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
from PIL import Image

from ..errors import MalformedDatasetError, missing_dataset
from ..voc import load_rgb

NAME = "COCO20k"
LIST = "coco_20k_filenames.txt"
# LOST / TokenCut's filtered file (written beside the list by their code) first, then COCO's own.
ANNOTATIONS = ("instances_train2014_sel20k.json", "annotations/instances_train2014_sel20k.json",
               "annotations/instances_train2014.json")
LAYOUT = ("<root>/{images/train2014/COCO_train2014_<id>.jpg, annotations/instances_train2014.json, "
          "coco_20k_filenames.txt}")


def image_id_of(filename: str) -> int:
    """``train2014/COCO_train2014_000000000009.jpg`` -> 9 (the digits after the last ``_``)."""
    stem = Path(filename).stem
    try:
        return int(stem.rsplit("_", 1)[-1])
    except ValueError:
        raise MalformedDatasetError(
            f"{NAME}: {filename!r} in {LIST} is not a COCO file name (COCO_train2014_<digits>.jpg)") from None


def coco_boxes(annotations: list[dict]) -> tuple[np.ndarray, list[int]]:
    """Boxes (n, 4) float32 ``x0, y0, x1, y1`` and category ids of an image's annotations, crowds dropped."""
    boxes, categories = [], []
    for ann in annotations:
        if ann.get("iscrowd", 0) == 1:
            continue
        x, y, w, h = ann["bbox"]
        boxes.append([round(v) for v in (x, y, x + w, y + h)])
        categories.append(int(ann["category_id"]))
    return np.asarray(boxes, dtype=np.float32).reshape(-1, 4), categories


class COCO20kDetection:
    """``(PIL RGB image, float32 boxes (n, 4))`` of the COCO20k images, in the list's order.

    Attributes:
        ids: the list's file names (``train2014/COCO_train2014_<id>.jpg``), as given.
        image_ids: their COCO image ids.
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise missing_dataset(NAME, self.root, LAYOUT)
        list_path = self.root / LIST
        if not list_path.is_file():
            raise missing_dataset(f"{NAME} image list", list_path, LAYOUT)
        self.ids = [line.strip() for line in list_path.read_text().splitlines() if line.strip()]
        if not self.ids:
            raise MalformedDatasetError(f"{NAME}: the list {str(list_path)!r} is empty; see data/README.md")
        self.image_ids = [image_id_of(name) for name in self.ids]
        self.paths = [self.root / "images" / (name if "/" in name else f"train2014/{name}") for name in self.ids]
        missing = [p for p in self.paths if not p.is_file()]
        if missing:
            raise missing_dataset(f"{NAME} ({len(missing)} of {len(self.ids)} listed images, e.g. {missing[0].name})",
                                  missing[0].parent, LAYOUT)
        annotation_file = next((self.root / a for a in ANNOTATIONS if (self.root / a).is_file()), None)
        if annotation_file is None:
            raise missing_dataset(f"{NAME} annotations", self.root / ANNOTATIONS[-1], LAYOUT)
        try:
            coco = json.loads(annotation_file.read_text())
            annotations = coco["annotations"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise MalformedDatasetError(f"{NAME}: {str(annotation_file)!r} is not a COCO instances file ({err})") from err
        wanted = set(self.image_ids)
        self._annotations: dict[int, list[dict]] = {i: [] for i in wanted}
        for ann in annotations:
            if ann.get("image_id") in wanted:
                self._annotations[ann["image_id"]].append(ann)

    def __len__(self) -> int:
        return len(self.ids)

    def boxes(self, index: int) -> np.ndarray:
        """Ground-truth boxes of one image, crowds dropped (see ``coco_boxes``)."""
        return coco_boxes(self._annotations[self.image_ids[index]])[0]

    def __getitem__(self, index: int) -> tuple[Image.Image, np.ndarray]:
        return load_rgb(self.paths[index]), self.boxes(index)
