"""eval/tokencut/corloc.py: IoU and CorLoc against a direct pixel-counting computation."""
import numpy as np
import pytest

from skipless.eval.tokencut.corloc import best_iou, box_iou, corloc


def _pixels(box, size=40):
    """The set of unit pixels a box with integer corners covers, as a boolean image."""
    grid = np.zeros((size, size), dtype=bool)
    x0, y0, x1, y1 = (int(v) for v in box)
    grid[y0:y1, x0:x1] = True
    return grid


def _iou_by_counting(a, b):
    pa, pb = _pixels(a), _pixels(b)
    union = (pa | pb).sum()
    return (pa & pb).sum() / union if union else 0.0


def _random_box(rng):
    x0, x1 = sorted(rng.integers(0, 39, size=2))
    y0, y1 = sorted(rng.integers(0, 39, size=2))
    return np.array([x0, y0, x1 + 1, y1 + 1])  # never empty


def test_iou_equals_pixel_counting_on_random_boxes():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, gts = _random_box(rng), np.stack([_random_box(rng) for _ in range(3)])
        np.testing.assert_allclose(box_iou(a, gts), [_iou_by_counting(a, g) for g in gts], atol=1e-12)
    assert box_iou([0, 0, 10, 10], np.zeros((0, 4))).shape == (0,)


def test_corloc_counts_every_image_and_uses_iou_at_least_half():
    preds = [np.array([0, 0, 10, 10]),   # IoU exactly 0.5 with its second box: a hit
             np.array([0, 0, 10, 10]),   # IoU 0.25: a miss
             np.array([5, 5, 9, 9]),     # no ground truth at all: a miss, still counted
             np.array([20, 20, 30, 30])]  # exact match
    gts = [np.array([[30, 30, 35, 35], [0, 0, 10, 20]]), np.array([[5, 5, 15, 15]]), np.zeros((0, 4)),
           np.array([[20, 20, 30, 30]])]
    assert best_iou(preds[0], gts[0]) == pytest.approx(0.5)
    hits = [best_iou(p, g) >= 0.5 for p, g in zip(preds, gts)]
    assert hits == [True, False, False, True]
    assert corloc(preds, gts) == pytest.approx(50.0)
    assert corloc(preds, gts, threshold=0.6) == pytest.approx(25.0)
    with pytest.raises(ValueError):
        corloc(preds, gts[:3])
