"""Tiny ImageNet (Stanford CS231N, ``tiny-imagenet-200.zip``) in the layout its zip unpacks to.

```
tiny-imagenet-200/wnids.txt                               the 200 wnids, one a line: the class order
tiny-imagenet-200/words.txt                               "<wnid>\\t<names>" for all WordNet synsets
tiny-imagenet-200/train/<wnid>/images/<wnid>_<k>.JPEG     500 per class, 64x64
tiny-imagenet-200/train/<wnid>/<wnid>_boxes.txt           (unused)
tiny-imagenet-200/val/images/val_<k>.JPEG                 10,000
tiny-imagenet-200/val/val_annotations.txt                 "<file>\\t<wnid>\\t<x0>\\t<y0>\\t<x1>\\t<y1>"
```

The test split has no labels and is not read. Class ``i`` is line ``i`` of ``wnids.txt`` (the order
every Tiny ImageNet loader uses), not the sorted wnids; names come from ``words.txt`` when it is there.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import MalformedDatasetError, missing_dataset
from ..image_folder import list_images
from .labelled import LabelledImages

FOLDER = "tiny-imagenet-200"
TITLE = "Tiny ImageNet"
LAYOUT = (f"<root>/{FOLDER}/{{wnids.txt, words.txt (optional), train/<wnid>/images/<wnid>_<k>.JPEG, "
          f"val/images/val_<k>.JPEG, val/val_annotations.txt}} (tiny-imagenet-200.zip unpacked; "
          f"<root> may also be {FOLDER}/ itself)")


def _folder(root: Path) -> Path:
    if (root / FOLDER).is_dir():
        return root / FOLDER
    if (root / "wnids.txt").is_file():
        return root
    raise missing_dataset(TITLE, root / FOLDER, LAYOUT)


def _wnids(base: Path) -> list[str]:
    path = base / "wnids.txt"
    if not path.is_file():
        raise missing_dataset(f"{TITLE} class list", path, LAYOUT)
    wnids = path.read_text().split()
    if not wnids or len(set(wnids)) != len(wnids):
        raise MalformedDatasetError(f"{path} lists {len(wnids)} wnids ({len(set(wnids))} distinct); "
                                    "expected one distinct wnid a line")
    return wnids


def _names(base: Path, wnids: list[str]) -> list[str]:
    """Each class's words from ``words.txt`` ("goldfish, Carassius auratus"), else its wnid."""
    path = base / "words.txt"
    words: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            wnid, _, text = line.partition("\t")
            words[wnid.strip()] = text.strip()
    return [words.get(w) or w for w in wnids]


def _train(base: Path, wnids: list[str]) -> tuple[list[Path], list[int]]:
    train = base / "train"
    if not train.is_dir():
        raise missing_dataset(f"{TITLE} train", train, LAYOUT)
    unknown = sorted(set(os.listdir(train)) - set(wnids))
    if unknown:
        raise MalformedDatasetError(f"{train / unknown[0]} is not a class of {base / 'wnids.txt'} "
                                    f"({len(unknown)} such folders); expected {LAYOUT}")
    files, labels = [], []
    for label, wnid in enumerate(wnids):
        images = list_images(train / wnid / "images")
        if not images:
            raise MalformedDatasetError(f"{train / wnid / 'images'} holds no image of class {wnid} "
                                        f"(listed in wnids.txt); expected {LAYOUT}")
        files += images
        labels += [label] * len(images)
    return files, labels


def _val(base: Path, wnids: list[str]) -> tuple[list[Path], list[int]]:
    """The images of ``val_annotations.txt``, in its order, labelled by its second column."""
    path, images = base / "val" / "val_annotations.txt", base / "val" / "images"
    if not path.is_file() or not images.is_dir():
        raise missing_dataset(f"{TITLE} val", path if not path.is_file() else images, LAYOUT)
    index = {w: i for i, w in enumerate(wnids)}
    present = set(os.listdir(images))
    files, labels = [], []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1].strip() not in index:
            what = f"names {fields[1].strip()!r}, not a wnid of wnids.txt" if len(fields) >= 2 else "has no wnid"
            raise MalformedDatasetError(f"{path} line {number} {what}; expected "
                                        "<file>\\t<wnid>\\t<x0>\\t<y0>\\t<x1>\\t<y1> with a wnid of wnids.txt")
        name = fields[0].strip()
        if name not in present:
            raise MalformedDatasetError(f"{path} line {number} names {name}, which is not in {images}")
        files.append(images / name)
        labels.append(index[fields[1].strip()])
    if not files:
        raise MalformedDatasetError(f"{path} lists no image; expected {LAYOUT}")
    return files, labels


def read_tiny_imagenet(root: Path, split: str, transform) -> LabelledImages:
    """The train or val split of Tiny ImageNet at ``root`` (200 classes, 64x64 JPEGs)."""
    base = _folder(root)
    wnids = _wnids(base)
    files, labels = (_train if split == "train" else _val)(base, wnids)
    return LabelledImages(f"{TITLE} {split}", files, labels, _names(base, wnids), transform)
