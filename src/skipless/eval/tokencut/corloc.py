"""CorLoc: the share of images whose predicted box overlaps some ground-truth box with IoU >= 0.5.

The object-discovery score of LOST (Simeoni et al., BMVC 2021) and TokenCut (Wang et al., TPAMI
2023). Boxes are continuous ``x0, y0, x1, y1`` pixel corners, so a box's area is
``(x1 - x0) * (y1 - y0)`` without the ``+ 1`` of inclusive pixel indices; VOC's 1-based boxes are
converted on reading (``skipless.data.voc.parse_annotation``), as in the reference code. Every image
counts in the denominator: an image without ground-truth boxes is a miss.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

THRESHOLD = 0.5


def box_iou(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """IoU of one box (4,) with each of ``boxes`` (n, 4); (n,) float64, empty when n = 0."""
    box = np.asarray(box, dtype=np.float64)
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    w = np.clip(np.minimum(box[2], boxes[:, 2]) - np.maximum(box[0], boxes[:, 0]), 0, None)
    h = np.clip(np.minimum(box[3], boxes[:, 3]) - np.maximum(box[1], boxes[:, 1]), 0, None)
    inter = w * h
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    union = area + areas - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def best_iou(box: np.ndarray, boxes: np.ndarray) -> float:
    """The largest IoU of ``box`` with any ground-truth box (0 when there is none)."""
    ious = box_iou(box, boxes)
    return float(ious.max()) if ious.size else 0.0


def corloc(predictions: Iterable[np.ndarray], ground_truths: Iterable[np.ndarray],
           threshold: float = THRESHOLD) -> float:
    """CorLoc in percent over paired predictions (4,) and ground-truth boxes (n_i, 4)."""
    hits = [best_iou(p, g) >= threshold for p, g in zip(predictions, ground_truths, strict=True)]
    if not hits:
        raise ValueError("CorLoc of no image is undefined")
    return 100.0 * float(np.mean(hits))
