"""The t-SNE scatter plots: one per backbone, and the backbones side by side (seed 002's Figure 3 puts
the residual baseline beside its decayed shortcuts). A class keeps its colour in every panel, and a
legend names the classes."""
from __future__ import annotations

from typing import Sequence

import numpy as np


def class_colours(n: int) -> list:
    """``n`` distinct colours: matplotlib's tab10 up to 10 classes, tab20 up to 20, then hues."""
    import matplotlib

    if n <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [matplotlib.colormaps["tab20"](i) for i in range(n)]
    return [matplotlib.colormaps["hsv"](i / n) for i in range(n)]


def scatter_figure(panels: Sequence[tuple[str, np.ndarray, np.ndarray]], classes: Sequence[int],
                   class_names: Sequence[str], title: str):
    """One panel per ``(title, points (N, 2), labels (N,))``, side by side, one legend for all."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = class_colours(len(classes))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 1.8, 4.4), squeeze=False)
    for ax, (name, points, labels) in zip(axes[0], panels):
        for colour, c in zip(colours, classes):
            mine = labels == c
            ax.scatter(points[mine, 0], points[mine, 1], s=9, color=colour, label=class_names[c], linewidths=0)
        ax.set_title(name, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center right", fontsize=7, markerscale=1.6, frameon=False)
    fig.suptitle(title, fontsize=9)
    width, height = fig.get_size_inches()
    fig.subplots_adjust(left=0.1 / width, right=1 - 1.8 / width, bottom=0.1 / height, top=1 - 0.6 / height,
                        wspace=0.3 / 4.2)  # room for the legend at the right, the titles at the top
    return fig
