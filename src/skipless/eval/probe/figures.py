"""The probe's pictures: palette PNG predictions and the example figure.

Predictions are saved as palette PNGs in VOC's colours, like the ground truth of VOC itself, so
any VOC tool reads them and ``np.array(Image.open(p))`` gives the class indices back (scored again,
they reproduce the reported mIoU; tested). The figure shows a few validation images with ground
truth and prediction side by side, in the same colours (255, ignored, is VOC's cream), above a legend
of the classes they show.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from skipless.atomic import atomic_write
from skipless.data.conventions import IGNORE_INDEX
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


def legend_entries(maps: Sequence[np.ndarray], class_names: Sequence[str]) -> list[tuple[int, str]]:
    """``(index, name)`` of every class drawn in ``maps`` (ground truths and predictions), in index
    order, then ``(255, "ignored")`` if an ignored pixel is shown: the legend names only what is seen,
    so 150 ADE20K classes do not bury the few in the pictures."""
    present = set()
    for m in maps:
        present.update(int(v) for v in np.unique(m))
    entries = [(i, class_names[i]) for i in sorted(present) if i < len(class_names)]
    return entries + ([(IGNORE_INDEX, "ignored")] if IGNORE_INDEX in present else [])


def draw_examples(images: Sequence[Image.Image], targets: Sequence[np.ndarray], predictions: Sequence[np.ndarray],
                  titles: Sequence[str], heading: str, class_names: Sequence[str]):
    """The figure: one row per image (image | ground truth | prediction), and below them a legend that
    maps each colour shown to its class name."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    entries = legend_entries([*targets, *predictions], class_names)
    columns = 4
    legend_h = 0.3 + 0.22 * -(-len(entries) // columns)  # inches: a line per `columns` classes
    rows = len(images)
    fig, axes = plt.subplots(rows, 3, figsize=(9, 3 * rows + legend_h), squeeze=False)
    for r, (image, target, pred, title) in enumerate(zip(images, targets, predictions, titles)):
        for c, (panel, name) in enumerate(((np.asarray(image), title), (colorize(target), "ground truth"),
                                           (colorize(pred), "prediction"))):
            axes[r][c].imshow(panel)
            axes[r][c].set_title(name, fontsize=9)
            axes[r][c].axis("off")
    palette = np.asarray(voc_palette(), dtype=float).reshape(256, 3) / 255
    fig.legend([Patch(facecolor=palette[i], edgecolor="0.3", linewidth=0.5) for i, _ in entries],
               [name for _, name in entries], loc="lower center", ncol=columns, fontsize=8, frameon=False)
    fig.suptitle(heading, fontsize=10)
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, legend_h / height, 1, 1 - 0.3 / height))  # room for the legend and the heading
    return fig


def example_figure(path: str | os.PathLike, images: Sequence[Image.Image], targets: Sequence[np.ndarray],
                   predictions: Sequence[np.ndarray], titles: Sequence[str], heading: str,
                   class_names: Sequence[str]) -> Path:
    """``draw_examples`` written as PNG (atomically). Returns the path."""
    import matplotlib.pyplot as plt

    fig = draw_examples(images, targets, predictions, titles, heading, class_names)
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=80))
    plt.close(fig)
    return path


def figure_array(path: str | os.PathLike) -> np.ndarray:
    """A written figure as (3, H, W) uint8, for TensorBoard's add_image."""
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB")).transpose(2, 0, 1).copy()
