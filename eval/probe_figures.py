"""The probe's pictures: palette PNG predictions and the example figure.

Predictions are saved as palette PNGs in VOC's colours, like the ground truth of VOC itself, so
any VOC tool reads them and ``np.array(Image.open(p))`` gives the class indices back (scored again,
they reproduce the reported mIoU; tested). The figure shows a few validation images with ground
truth and prediction side by side, in the same colours (255, ignored, is VOC's cream).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from skipless.atomic import atomic_write
from skipless.data.voc import voc_palette


def save_prediction(path: str | os.PathLike, prediction: np.ndarray) -> Path:
    """Write a (H, W) uint8 class map as a palette PNG (atomically)."""
    image = Image.fromarray(np.asarray(prediction, dtype=np.uint8), mode="P")
    image.putpalette(voc_palette())
    return atomic_write(Path(path), lambda tmp: image.save(tmp, format="PNG"))


def colorize(labels: np.ndarray) -> np.ndarray:
    """(H, W) class indices -> (H, W, 3) uint8 RGB in VOC's colours."""
    palette = np.asarray(voc_palette(), dtype=np.uint8).reshape(256, 3)
    return palette[np.asarray(labels, dtype=np.uint8)]


def example_figure(path: str | os.PathLike, images: Sequence[Image.Image], targets: Sequence[np.ndarray],
                   predictions: Sequence[np.ndarray], titles: Sequence[str], heading: str) -> Path:
    """One row per image: image | ground truth | prediction; written as PNG. Returns the path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = len(images)
    fig, axes = plt.subplots(rows, 3, figsize=(9, 3 * rows), squeeze=False)
    for r, (image, target, pred, title) in enumerate(zip(images, targets, predictions, titles)):
        for c, (panel, name) in enumerate(((np.asarray(image), title), (colorize(target), "ground truth"),
                                           (colorize(pred), "prediction"))):
            axes[r][c].imshow(panel)
            axes[r][c].set_title(name, fontsize=9)
            axes[r][c].axis("off")
    fig.suptitle(heading, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=80))
    plt.close(fig)
    return path


def figure_array(path: str | os.PathLike) -> np.ndarray:
    """A written figure as (3, H, W) uint8, for TensorBoard's add_image."""
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB")).transpose(2, 0, 1).copy()
