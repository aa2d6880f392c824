"""TokenCut's example figure stands alone: a legend naming each mark, hit or miss at IoU 0.5 over each image,
a colour bar for every Ncut vector, and boxes drawn over a black halo so they show on any object colour."""
from pathlib import Path

import numpy as np
import torch

from skipless.eval.shared.backbones import BackboneSpec
from skipless.eval.tokencut.ncut import Discovery
from skipless.eval.tokencut.outputs import FOUND, TRUTH, draw_examples
from skipless.eval.tokencut.result import BackboneResult


def _example(box, truth):
    vector = np.linspace(-1, 1, 16).reshape(4, 4)
    foreground = vector > 0
    return (torch.zeros(3, 64, 64), np.array([truth], dtype=float),
            [Discovery(np.array(box, dtype=float), (3, 3), foreground, foreground, vector)])


def test_the_figure_has_a_legend_hit_and_miss_colour_bars_and_haloed_boxes():
    result = BackboneResult(BackboneSpec("tiny", None, Path("."), {}), [5], 16)
    result.examples = [_example([0, 0, 32, 32], [0, 0, 32, 32]),    # IoU 1: a hit
                       _example([0, 0, 16, 16], [32, 32, 64, 64])]  # IoU 0: a miss
    fig = draw_examples(result, 5, "tiny")
    titles = [ax.get_title() for ax in fig.axes]
    assert "IoU 1.00: hit" in titles and "IoU 0.00: miss" in titles
    assert len(fig.axes) == 2 * 3 + 2  # a colour bar beside each Ncut vector
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:3] == ["true box", "found box", "seed patch"]
    boxes = [p for p in fig.axes[0].patches]
    assert {tuple(np.round(p.get_edgecolor()[:3], 3)) for p in boxes} == {
        tuple(np.round(np.array([int(c[i:i + 2], 16) for i in (1, 3, 5)]) / 255, 3)) for c in (TRUTH, FOUND)}
    assert all(p.get_path_effects() for p in boxes)  # the black halo
    assert "IoU >= 0.5" in fig._suptitle.get_text()
