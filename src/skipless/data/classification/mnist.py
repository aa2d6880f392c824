"""MNIST (LeCun et al.) from its four distributed IDX files, for the OSA paper's classification
experiment (seeds/004, Section 3 and Appendix E) at its own scale; ``digits.py`` is the CPU stand-in.

Where the files are looked for, the first folder that holds any of them winning:

    <root>/MNIST/raw/   the layout torchvision writes (``torchvision.datasets.MNIST(root, download=True)``)
    <root>/raw/         <root> is torchvision's ``MNIST/`` folder
    <root>/             <root> is the folder of the files themselves (``raw/`` or any other)

Each of ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte`` and
``t10k-labels-idx1-ubyte`` may be there plain or gzipped (``.gz``, as distributed); where both are, the
plain one is read. Nothing is downloaded, ever. The IDX format and its checks (magic numbers
``0x00000803`` and ``0x00000801``, big-endian dimensions, sizes) are ``idx.py``'s; here the image and
label files of a split must agree on their count.

What the reader serves:
- split: MNIST's own, ``train`` = the 60,000 training images, ``val`` = the 10,000 test images (t10k), so
  a run's validation top-1 is the test accuracy of the paper's Table 2.
- images: the stored grey values 0..255 as they are, 28 x 28 (no resampling, unlike the digits), the grey
  plane replicated to 3 identical channels because the patch embedding takes RGB; held in memory as
  ``(N, 28, 28, 3)`` uint8 (141 MB for train; forked DataLoader workers share it). How they enter the
  ViT is the recipe's (``configs/recipe/supervised-osa-mnist.yaml``, Appendix E): no augmentation, the
  suite's per-channel ImageNet normalisation, patch 4 on 28 x 28: 7 x 7 patches + CLS = 50 tokens, the
  paper's n = 50.
- labels: the stored bytes, 0..9; class names "0".."9". A label outside 0..9 stops the run.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import MalformedDatasetError, missing_dataset
from .idx import read_idx
from .labelled import LabelledImages

TITLE = "MNIST"
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "val": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
CLASS_NAMES = tuple(str(d) for d in range(10))
LAYOUT = ("<root>/MNIST/raw/{" + ", ".join(name for pair in FILES.values() for name in pair)
          + "}, each plain or .gz (torchvision's layout; <root> may also be MNIST/ or the folder of the files)")


def _has_any(folder: Path) -> bool:
    return any((folder / name).is_file() or (folder / f"{name}.gz").is_file()
               for pair in FILES.values() for name in pair)


def raw_folder(root: Path) -> Path:
    """The folder of the IDX files: ``root/MNIST/raw``, ``root/raw`` or ``root``, the first holding any."""
    for folder in (root / "MNIST" / "raw", root / "raw", root):
        if _has_any(folder):
            return folder
    raise missing_dataset(TITLE, root / "MNIST" / "raw", LAYOUT)


def idx_file(folder: Path, name: str) -> Path:
    """``folder/name``, or ``folder/name.gz`` when only that is there."""
    for path in (folder / name, folder / f"{name}.gz"):
        if path.is_file():
            return path
    raise missing_dataset(f"{TITLE} file {name} (or {name}.gz)", folder / name, LAYOUT)


def read_mnist_arrays(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Grey images ``(N, rows, cols)`` uint8 and labels ``(N,)`` int64 of ``split`` at ``root``."""
    folder = raw_folder(root)
    images_file, labels_file = (idx_file(folder, name) for name in FILES[split])
    images, labels = read_idx(images_file, 3), read_idx(labels_file, 1)
    if len(images) != len(labels):
        raise MalformedDatasetError(f"{images_file} holds {len(images)} images but {labels_file} holds "
                                    f"{len(labels)} labels; expected one label per image")
    return images, labels.astype(np.int64)


def read_mnist(root: Path, split: str, transform) -> LabelledImages:
    """The train (60,000) or val (the 10,000 test images) split of MNIST at ``root``, as RGB arrays."""
    grey, labels = read_mnist_arrays(root, split)
    return LabelledImages(f"{TITLE} {split}", np.repeat(grey[..., None], 3, axis=-1), labels, CLASS_NAMES, transform)
