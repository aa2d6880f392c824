"""Which images a t-SNE shows: the images of a few classes drawn at random, seeded.

Seed 002 (Zhang et al., Figure 3) embeds "test samples" of "a subset comprising 10 classes selected at
random" of ImageNet-100. Here the classes are drawn from those present in the split with
``numpy.random.default_rng(seed)``, without replacement (a split with fewer classes shows them all),
and every image of a chosen class is shown, or a seeded ``max_per_class`` of them. Only the labels
are read: no image is opened to choose.
"""
from __future__ import annotations

import numpy as np


def choose_points(labels: np.ndarray, num_classes: int, max_per_class: int | None,
                  seed: int) -> tuple[list[int], np.ndarray]:
    """``(chosen classes, ascending, and the indices of their images, ascending)`` among ``labels`` (N,)."""
    labels = np.asarray(labels)
    present = np.unique(labels[labels >= 0])
    rng = np.random.default_rng(seed)
    classes = present if len(present) <= num_classes else np.sort(rng.choice(present, num_classes, replace=False))
    chosen = []
    for c in classes:
        members = np.flatnonzero(labels == c)
        if max_per_class is not None and len(members) > max_per_class:
            members = np.sort(rng.choice(members, max_per_class, replace=False))
        chosen.append(members)
    return [int(c) for c in classes], np.sort(np.concatenate(chosen)) if chosen else np.zeros(0, dtype=np.int64)
