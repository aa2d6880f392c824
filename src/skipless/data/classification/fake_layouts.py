"""Tiny stand-ins written in the real layouts of datasets that cannot be fetched here: MNIST's four IDX
files (``mnist.py``) and an ImageNet tree of class folders (``imagenet.py``, ``imagenet100.py``). For
the tests and for whatever must exercise those readers without the data (``make paper`` preflight):
the files are the format's own, so the real readers read them unchanged.

    write_fake_mnist(root)                    -> root/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
    write_fake_imagenet(root, wnids)          -> root/{train,val}/<wnid>/<wnid>_<k>.JPEG
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np
from PIL import Image

from .idx import write_idx
from .mnist import FILES

MNIST_SIZE = 28


def fake_digits(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random grey ``28 x 28`` uint8 images and labels ``0, 1, ..., 9, 0, ...`` (uint8), from ``seed``."""
    images = np.random.default_rng(seed).integers(0, 256, size=(n, MNIST_SIZE, MNIST_SIZE), dtype=np.uint8)
    return images, (np.arange(n) % 10).astype(np.uint8)


def write_mnist(folder: Path, split: str, images: np.ndarray, labels: np.ndarray, gz: bool = False) -> list[Path]:
    """The image and label IDX files of ``split`` (``train`` or ``val``, i.e. t10k) in ``folder``, gzipped
    (``<name>.gz``) or not. Returns the two paths."""
    suffix = ".gz" if gz else ""
    images_name, labels_name = FILES[split]
    return [write_idx(Path(folder) / f"{images_name}{suffix}", images),
            write_idx(Path(folder) / f"{labels_name}{suffix}", labels)]


def write_fake_mnist(root: str | Path, n_train: int = 20, n_val: int = 10, gz: bool = True,
                     seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A fake MNIST at ``root/MNIST/raw`` (torchvision's layout): ``{split: (images, labels)}`` written."""
    raw = Path(root) / "MNIST" / "raw"
    written = {}
    for offset, (split, n) in enumerate((("train", n_train), ("val", n_val))):
        written[split] = fake_digits(n, seed + offset)
        write_mnist(raw, split, *written[split], gz=gz)
    return written


def write_fake_imagenet(root: str | Path, wnids: Iterable[str], per_class: int = 1, size: int = 16,
                        splits: Iterable[str] = ("train", "val")) -> Path:
    """``per_class`` JPEGs of ``size`` px, one flat colour per class, in ``root/<split>/<wnid>/`` for every
    split and wnid (val sorted into class folders). Returns ``root``."""
    root = Path(root)
    for c, wnid in enumerate(wnids):
        colour = ((37 * c) % 256, (91 * c) % 256, (151 * c) % 256)
        for split in splits:
            folder = root / split / wnid
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(per_class):
                Image.new("RGB", (size, size), colour).save(folder / f"{wnid}_{k + 1}.JPEG", quality=90)
    return root
