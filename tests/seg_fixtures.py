"""Tiny segmentation datasets written in the real layouts (VOC, ADE20K, COCO-Stuff), for the probe's tests.

Each image is random colour noise with one rectangle; its label map has the rectangle's class,
background elsewhere and a 1-pixel 255 band along the rectangle's edge (VOC's void). Values are
chosen by the caller so that the edge cases of each layout's label mapping can be written.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from skipless.data.voc import voc_palette


def _scene(rng: np.random.Generator, size: tuple[int, int], inside: int, outside: int,
           edge: int | None = 255) -> tuple[Image.Image, np.ndarray]:
    h, w = size
    image = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    mask = np.full((h, w), outside, dtype=np.uint8)
    y0, x0 = int(rng.integers(2, h // 3)), int(rng.integers(2, w // 3))
    y1, x1 = int(rng.integers(h // 2, h - 2)), int(rng.integers(w // 2, w - 2))
    image[y0:y1, x0:x1] = (image[y0:y1, x0:x1] // 4 + 40 * (inside % 6)).astype(np.uint8)
    mask[y0:y1, x0:x1] = inside
    if edge is not None:
        mask[y0, x0:x1] = mask[y1 - 1, x0:x1] = edge
        mask[y0:y1, x0] = mask[y0:y1, x1 - 1] = edge
    return Image.fromarray(image), mask


def save_palette(path: Path, mask: np.ndarray) -> None:
    image = Image.fromarray(mask, mode="P")
    image.putpalette(voc_palette())
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)


def write_voc(root: Path, n_train: int = 6, n_val: int = 4, classes: Sequence[str] | None = None,
              sizes: Sequence[tuple[int, int]] = ((40, 48), (48, 40), (44, 44)), seed: int = 0) -> Path:
    """A VOC 2012 segmentation layout under ``root``; with ``classes`` it is marked as the default."""
    voc = root / "VOCdevkit" / "VOC2012"
    rng = np.random.default_rng(seed)
    k = len(classes) if classes else 21
    ids = {"train": [f"{i:06d}" for i in range(n_train)], "val": [f"{i:06d}" for i in range(n_train, n_train + n_val)]}
    for split, names in ids.items():
        for j, image_id in enumerate(names):
            image, mask = _scene(rng, sizes[j % len(sizes)], inside=1 + j % (k - 1), outside=0)
            (voc / "JPEGImages").mkdir(parents=True, exist_ok=True)
            image.save(voc / "JPEGImages" / f"{image_id}.jpg", quality=95)
            save_palette(voc / "SegmentationClass" / f"{image_id}.png", mask)
        lists = voc / "ImageSets" / "Segmentation"
        lists.mkdir(parents=True, exist_ok=True)
        (lists / f"{split}.txt").write_text("\n".join(names) + "\n")
    if classes:
        (voc / "skipless_default.json").write_text(json.dumps({"classes": list(classes)}))
    return root


def write_ade20k(root: Path, split: str, values: Sequence[tuple[int, int]], seed: int = 0) -> Path:
    """``ADEChallengeData2016`` with one image per ``(inside, outside)`` raw label pair (grey PNGs)."""
    base = root / "ADEChallengeData2016"
    rng = np.random.default_rng(seed)
    tag = "train" if split == "training" else "val"
    for j, (inside, outside) in enumerate(values):
        image, mask = _scene(rng, (36, 44), inside, outside, edge=None)
        name = f"ADE_{tag}_{j + 1:08d}"
        (base / "images" / split).mkdir(parents=True, exist_ok=True)
        (base / "annotations" / split).mkdir(parents=True, exist_ok=True)
        image.save(base / "images" / split / f"{name}.jpg", quality=95)
        Image.fromarray(mask, mode="L").save(base / "annotations" / split / f"{name}.png")
    return root


def write_cocostuff(root: Path, split: str, values: Sequence[tuple[int, int]], train_ids: Sequence[bool],
                    seed: int = 0) -> Path:
    """COCO-Stuff 164k layout: one image per ``(inside, outside)`` pair; label PNGs named ``<id>.png``
    (raw ids) or ``<id>_labelTrainIds.png`` (mmsegmentation's train ids) as ``train_ids`` says."""
    rng = np.random.default_rng(seed)
    for j, ((inside, outside), converted) in enumerate(zip(values, train_ids)):
        image, mask = _scene(rng, (40, 36), inside, outside)
        image_id = f"{139 + j:012d}"
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "annotations" / split).mkdir(parents=True, exist_ok=True)
        image.save(root / "images" / split / f"{image_id}.jpg", quality=95)
        suffix = "_labelTrainIds" if converted else ""
        Image.fromarray(mask, mode="L").save(root / "annotations" / split / f"{image_id}{suffix}.png")
    return root
