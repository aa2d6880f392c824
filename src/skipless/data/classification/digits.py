"""scikit-learn's handwritten digits as a small stand-in for MNIST (``digits``): the OSA paper's
classification experiment (seeds/004, Section 3 and Appendix E: a 6-block, width-64 ViT with patch 4
on 28 x 28 MNIST digits) on a machine that can download nothing.

``sklearn.datasets.load_digits()`` ships inside scikit-learn (no download, no folder): 1,797
grey-level images of 8 x 8 pixels with values 0..16 (each pixel counts the ink of a 4 x 4 block of a
32 x 32 bitmap; UCI "optdigits"), 10 classes, about 180 per class. How it differs from MNIST (60,000
train / 10,000 test, 28 x 28, 0..255): 33 times fewer images, so 10 epochs at batch 128 are 110
optimizer steps here against MNIST's 4,690; and 8 x 8 of information, upsampled here to MNIST's
28 x 28, so the model and the patch grid (7 x 7 patches of 4 px + CLS = 50 tokens) are the paper's,
but each 4 px patch sees about one original pixel (28 / 8 = 3.5 px per pixel) and the strokes are
smooth ramps rather than MNIST's anti-aliased pen strokes. Accuracies are not comparable to the
paper's Table 2; the comparison between models is what this dataset is for.

What the reader serves:
- images: the 0..16 values scaled to 0..255 (``x * 255 / 16``), upsampled to 28 x 28 by PIL's
  *bilinear* resampling (in float, then rounded to uint8), grey replicated to 3 channels (the patch
  embedding takes RGB), held in memory as ``(N, 28, 28, 3)`` uint8. Bilinear, not bicubic: a
  bilinear output pixel is a convex combination of its input neighbours, so the values stay in
  0..255 without clipping and no ringing appears around the strokes (bicubic overshoots at the
  sharp 0 -> 16 edges of these 8 x 8 images, to -43 and 296 before clipping). Sampled back at
  the centres of the 8 x 8 pixels, an image gives its digit to within 15 levels rms (28 / 8 is not
  an integer, so no output pixel sits exactly on a source centre; ``tests/test_data_digits.py``).
- split: sklearn has one set, no train/test split (it is the test half of UCI's optdigits), so a
  fixed stratified 80/20 split is drawn here: per class, in class order, a permutation of that
  class's indices by ``numpy.random.RandomState(SPLIT_SEED)`` (the legacy generator, whose stream
  numpy keeps unchanged across versions), its first ``round(0.2 * n_class)`` to val, the rest to
  train: 1,438 train / 359 val images, the same split on every call and every machine.
- labels: sklearn's targets 0..9; class names "0".."9".
- ``root``: not read. The data come from the installed scikit-learn, so the reader never looks
  at the path it is given and a missing folder is no error; ``configs/data/digits.yaml`` keeps
  ``data.root`` only because every dataset has that key (it names ``data/digits``, the folder the
  evaluators would otherwise default to, and nothing is written there).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image

from .labelled import LabelledImages

IMAGE_SIZE = 28       # MNIST's, the size the OSA paper's patch-4 ViT is built for (Appendix E)
VAL_FRACTION = 0.2    # per class
SPLIT_SEED = 0        # fixed: the split is part of the dataset, not of a run
SOURCE_MAX = 16       # load_digits values are ink counts 0..16
CLASS_NAMES = tuple(str(d) for d in range(10))


def upsample(digit: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """One 8 x 8 digit (values 0..16) -> ``(size, size)`` uint8 0..255, PIL bilinear in float."""
    scaled = Image.fromarray(np.asarray(digit, dtype=np.float32) * (255.0 / SOURCE_MAX), mode="F")
    big = np.asarray(scaled.resize((size, size), Image.Resampling.BILINEAR))
    return np.clip(np.rint(big), 0, 255).astype(np.uint8)


def split_indices(labels: np.ndarray, val_fraction: float = VAL_FRACTION,
                  seed: int = SPLIT_SEED) -> dict[str, np.ndarray]:
    """The stratified split: ``{"train": indices, "val": indices}``, each sorted.

    Per class (in class order), ``RandomState(seed)`` permutes that class's indices and the first
    ``round(val_fraction * n_class)`` go to val."""
    rng = np.random.RandomState(seed)
    val = []
    for c in np.unique(labels):
        members = np.flatnonzero(labels == c)
        val.append(rng.permutation(members)[:int(round(val_fraction * len(members)))])
    is_val = np.zeros(len(labels), dtype=bool)
    is_val[np.concatenate(val)] = True
    return {"train": np.flatnonzero(~is_val), "val": np.flatnonzero(is_val)}


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """All 1,797 images ``(N, 28, 28, 3)`` uint8, their labels and the split, computed once per
    process (read-only arrays, shared by both splits and by forked DataLoader workers)."""
    from sklearn.datasets import load_digits  # imported here: only this reader needs scikit-learn

    digits = load_digits()
    grey = np.stack([upsample(d) for d in digits.images])
    images = np.repeat(grey[..., None], 3, axis=-1)
    labels = digits.target.astype(np.int64)
    for array in (images, labels):
        array.setflags(write=False)
    return images, labels, split_indices(labels)


def read_digits(root: Path, split: str, transform) -> LabelledImages:
    """The train or val split of the digits; ``root`` is not read (see the module docstring)."""
    images, labels, splits = _digits()
    index = splits[split]
    return LabelledImages(f"digits {split}", images[index], labels[index], CLASS_NAMES, transform)
