"""COCO-Stuff 164k (Caesar et al. 2018), read for the dense probe.

The stuffthingmaps PNGs hold raw ids 0-181 (COCO category id - 1; 255 unlabeled); 11 of COCO's 91
thing ids are unused, leaving 80 things + 91 stuff = 171 train ids, numbered in raw-id order (the
convention of the COCO-Stuff repository and mmsegmentation). mmsegmentation's converted
``<id>_labelTrainIds.png`` already hold train ids and pass through.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import missing_dataset
from .interface import PairedFolders
from ..voc import IGNORE_INDEX, load_mask

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

COCOSTUFF_LAYOUT = ("<root>/{images/<split>/<id>.jpg, annotations/<split>/<id>.png (raw ids 0-181) or "
                    "<id>_labelTrainIds.png} with split train2017|val2017")


def cocostuff_lut() -> np.ndarray:
    """uint8 lookup table raw COCO-Stuff id (0-181) -> train id (0-170); unused/unlabeled -> 255."""
    lut = np.full(256, IGNORE_INDEX, dtype=np.uint8)
    used = [r for r in range(182) if r not in COCO_UNUSED_RAW_IDS]
    lut[used] = np.arange(len(used), dtype=np.uint8)
    return lut


def _annotations_hint(root: Path, split: str) -> str:
    """Where the label maps go: ``stuffthingmaps_trainval2017.zip`` unpacks to ``train2017/`` and
    ``val2017/`` with no ``annotations/`` above them, so an unzip in the data root leaves them beside
    ``images/`` instead of under ``annotations/``."""
    if (root / split).is_dir():
        return (f"{root / split} is there: stuffthingmaps_trainval2017.zip unzips to train2017/ and val2017/, which go "
                f"under {root / 'annotations'}/ (move both there)")
    return (f"stuffthingmaps_trainval2017.zip unzips to train2017/ and val2017/; put both under "
            f"{root / 'annotations'}/ (unzip -d {root / 'annotations'} stuffthingmaps_trainval2017.zip)")


class COCOStuff(PairedFolders):
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
        if not labels.is_dir():
            raise missing_dataset(f"{title} annotations", labels, COCOSTUFF_LAYOUT, _annotations_hint(Path(root), split))
        present = set(os.listdir(labels))

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
