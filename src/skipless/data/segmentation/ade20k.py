"""ADE20K scene parsing (MIT SceneParsing, ``ADEChallengeData2016``), read for the dense probe.

150 classes; label 0 ("other") is ignored: 0 -> 255, k -> k - 1 (the benchmark's convention).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import missing_dataset, own_folder_hint
from .interface import PairedFolders
from ..voc import IGNORE_INDEX, load_mask

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

ADE20K_LAYOUT = ("<root>/ADEChallengeData2016/{images/<split>/ADE_*.jpg, annotations/<split>/ADE_*.png} "
                 "with split training|validation")


def ade20k_lut() -> np.ndarray:
    """uint8 lookup table raw ADE20K label -> train id: 0 -> 255, 1..150 -> 0..149, above -> 255."""
    lut = np.full(256, IGNORE_INDEX, dtype=np.uint8)
    lut[1:151] = np.arange(150, dtype=np.uint8)
    return lut



class ADE20K(PairedFolders):
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
            raise missing_dataset(title, base, ADE20K_LAYOUT, own_folder_hint(root, ("ADEChallengeData2016",)))
        labels = base / "annotations" / split
        present = set(os.listdir(labels)) if labels.is_dir() else set()
        super().__init__(base / "images" / split, title, ADE20K_LAYOUT,
                         lambda i: labels / f"{i}.png" if f"{i}.png" in present else None)
        self._lut = ade20k_lut()

    def mask(self, index: int) -> np.ndarray:
        return self._lut[load_mask(self.label_file(index))]

