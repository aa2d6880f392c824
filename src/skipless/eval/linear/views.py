"""Several feature sets per training image, one drawn per epoch: seed 002's ImageNet-1k probe (``views=``).

Seed 002 (Zhang et al., App. 8.1) trains its ImageNet-1k linear probe on features "precomputed" for "each
image using three variations of random data augmentations and one instance of central cropping", and
"during each training epoch, we then randomly selected one set of these precomputed features". Here
``views`` (``configs/linear.yaml``) is the number of those sets: set 0 is the centre crop (the cache that
``make knn`` and every other preset read), sets 1 ... ``views`` - 1 are random-augmentation views of the
train split (``eval/shared/global_features.RandomView``: MAE's linear-probe train transform, random resized
crop and flip). ``views=4`` is the seed's 3 + 1 (``linear-preset=zhang-in1k``); ``views=1``, the default,
is the one centre crop of before, the same numbers to the bit. The val split is always its centre crop.

The draw (``view_draws``): epoch ``e`` trains on set ``rng([seed, e, tag]).integers(views)``, uniform and
with replacement, as "randomly selected" reads; a stream of its own, so the batch order (``rng([seed,
e])``, ``heads.train_heads``) and the heads' init are those of ``views=1``, and epoch ``e``'s draw does not
depend on how many epochs the run has.
"""
from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np

from skipless.data.errors import MalformedDatasetError

from ..shared.global_features import GlobalFeatures

_DRAW_STREAM = zlib.crc32(b"skipless linear views")


def view_draws(seed: int, epochs: int, views: int) -> list[int]:
    """The feature set of each epoch, 0 (the centre crop) to ``views`` - 1 (module docstring); all 0 for one."""
    if int(views) == 1:
        return [0] * int(epochs)
    return [int(np.random.default_rng([int(seed), epoch, _DRAW_STREAM]).integers(int(views)))
            for epoch in range(int(epochs))]


def check_views_agree(sets: Sequence[GlobalFeatures], name: str) -> None:
    """One sentence when a view left out other images than the centre crop (an image read once and not
    the next time) or holds other labels: the heads pair every view's rows with one label vector."""
    centre = sets[0]
    for i, other in enumerate(sets[1:], 1):
        if not (np.array_equal(other.valid, centre.valid) and np.array_equal(other.labels, centre.labels)):
            differ = int((other.valid != centre.valid).sum())
            raise MalformedDatasetError(f"random view {i} of {name} left out {differ} other images than its centre "
                                        "crop or reads other labels; its images changed between two reads")
