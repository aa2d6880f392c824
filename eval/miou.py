"""Mean intersection-over-union from a dataset-level confusion matrix (SPEC section 6).

The standard segmentation metric (PASCAL VOC, ADE20K, COCO-Stuff; the paper's Table 2): pixels of
the *whole* split are accumulated into one ``K x K`` confusion matrix ``C`` (rows: ground truth,
columns: prediction), then per class ``IoU_k = C_kk / (sum_j C_kj + sum_i C_ik - C_kk)`` (summed
intersection over summed union, not a mean of per-image IoUs), and mIoU is the mean of ``IoU_k``
over the classes present in the ground truth. Pixels labelled 255 are ignored. A class that is
predicted but absent from the ground truth has no IoU (``nan``) and is left out of the mean; its
false positives still lower the IoU of the classes whose pixels it took.
"""
from __future__ import annotations

import numpy as np
import torch

from skipless.data.conventions import IGNORE_INDEX



class ConfusionMatrix:
    """Accumulates ``(ground truth, prediction)`` label maps of a whole split.

    Args:
        num_classes: K; ground-truth values must be in ``[0, K)`` or ``ignore_index``.
        ignore_index: the ground-truth value that is not scored.
    """

    def __init__(self, num_classes: int, ignore_index: int = IGNORE_INDEX) -> None:
        self.num_classes, self.ignore_index = int(num_classes), ignore_index
        self.matrix = torch.zeros(self.num_classes, self.num_classes, dtype=torch.int64)

    def update(self, target: torch.Tensor | np.ndarray, pred: torch.Tensor | np.ndarray) -> None:
        """Add one batch of label maps (any equal shapes; integer values)."""
        target, pred = torch.as_tensor(target), torch.as_tensor(pred)
        if target.shape != pred.shape:
            raise ValueError(f"target {tuple(target.shape)} and prediction {tuple(pred.shape)} differ in shape")
        target, pred = target.reshape(-1).long(), pred.reshape(-1).long()
        keep = target != self.ignore_index
        target, pred = target[keep], pred[keep]
        k = self.num_classes
        if target.numel() and (int(target.min()) < 0 or int(target.max()) >= k):
            raise ValueError(f"ground truth holds values outside [0, {k}) other than {self.ignore_index}")
        if pred.numel() and (int(pred.min()) < 0 or int(pred.max()) >= k):
            raise ValueError(f"prediction holds values outside [0, {k})")
        counts = torch.bincount(target * k + pred, minlength=k * k)
        self.matrix += counts.reshape(k, k).to(self.matrix.device, torch.int64)

    def merge(self, other: "ConfusionMatrix") -> None:
        self.matrix += other.matrix

    def iou(self) -> np.ndarray:
        """Per-class IoU, float64 (K,); ``nan`` for classes absent from the ground truth."""
        return iou_per_class(self.matrix.cpu().numpy())

    def miou(self) -> float:
        return mean_iou(self.matrix.cpu().numpy())

    def pixel_accuracy(self) -> float:
        m = self.matrix.cpu().numpy()
        total = m.sum()
        return float(np.trace(m) / total) if total else float("nan")


def iou_per_class(matrix: np.ndarray) -> np.ndarray:
    """IoU of each class from a confusion matrix (rows ground truth); nan where the class has no GT pixel."""
    m = np.asarray(matrix, dtype=np.float64)
    inter = np.diag(m)
    gt, pred = m.sum(axis=1), m.sum(axis=0)
    union = gt + pred - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        iou = inter / union
    iou[gt == 0] = np.nan
    return iou


def mean_iou(matrix: np.ndarray) -> float:
    """Mean IoU over the classes present in the ground truth (nan if none is)."""
    iou = iou_per_class(matrix)
    present = ~np.isnan(iou)
    return float(iou[present].mean()) if present.any() else float("nan")
