"""Mean intersection-over-union from a dataset-level confusion matrix.

The standard segmentation metric (PASCAL VOC, ADE20K, COCO-Stuff; the paper's Table 2): pixels of
the *whole* split are accumulated into one ``K x K`` confusion matrix ``C`` (rows: ground truth,
columns: prediction), then per class ``IoU_k = C_kk / (sum_j C_kj + sum_i C_ik - C_kk)`` (summed
intersection over summed union, not a mean of per-image IoUs), and mIoU is the mean of ``IoU_k``
over the classes present in the ground truth. Pixels labelled 255 are ignored. A class that is
predicted but absent from the ground truth has no IoU (``nan``) and is left out of the mean; its
false positives still lower the IoU of the classes whose pixels it took.

Where the suite's metric library serves and where it does not:

- the confusion matrix is the state of torchmetrics' ``MulticlassConfusionMatrix``: it is summed
  across DDP ranks by ``compute()``/``sync``, which a multi-GPU evaluation needs. The counting is
  done here, not by its ``update``, which drops the ignored pixels with a boolean index and counts
  them with ``bincount``: on a GPU both read a size back to the host, a sync per update. Here every
  pixel goes to one ``scatter_add_`` bin (ignored ones and out-of-range values to an extra bin that
  is dropped), and a value outside the classes is flagged on the device and refused at the first
  read of the matrix (at once for CPU tensors, where checking costs nothing);
- the reduction to IoU and mIoU stays hand-written (``iou_per_class``, ``mean_iou``): torchmetrics'
  ``MulticlassJaccardIndex(average="macro")`` averages over every class with a non-empty union, so
  a class predicted but absent from the ground truth enters the mean with IoU 0 (on
  ``gt = [0, 0, 1, 1], pred = [0, 2, 1, 1]`` it gives 0.5 where the benchmarks' rule gives 0.75).
  The few lines below keep the benchmarks' rule; ``tests/test_eval_miou.py`` checks both pieces
  against an independent per-class set computation.
"""
from __future__ import annotations

import numpy as np
import torch
from torchmetrics.classification import MulticlassConfusionMatrix

from skipless.data.conventions import IGNORE_INDEX


class ConfusionMatrix:
    """Accumulates ``(ground truth, prediction)`` label maps of a whole split.

    Args:
        num_classes: K; ground-truth values must be in ``[0, K)`` or ``ignore_index``.
        ignore_index: the ground-truth value that is not scored.

    ``metric`` is the torchmetrics state (moved to the device of the first update); ``matrix`` its
    ``K x K`` counts, rows ground truth.
    """

    def __init__(self, num_classes: int, ignore_index: int = IGNORE_INDEX) -> None:
        self.num_classes, self.ignore_index = int(num_classes), ignore_index
        self.metric = MulticlassConfusionMatrix(self.num_classes, ignore_index=ignore_index, validate_args=False)
        self.bad: torch.Tensor | None = None  # (2,) bool: a ground truth / prediction value outside the classes

    @property
    def matrix(self) -> torch.Tensor:
        self._refuse(self.bad)
        return self.metric.confmat

    def update(self, target: torch.Tensor | np.ndarray, pred: torch.Tensor | np.ndarray) -> None:
        """Add one batch of label maps (any equal shapes; integer values), reading nothing back to the host."""
        target, pred = torch.as_tensor(target), torch.as_tensor(pred)
        if target.shape != pred.shape:
            raise ValueError(f"target {tuple(target.shape)} and prediction {tuple(pred.shape)} differ in shape")
        if self.metric.device != target.device:
            self.metric = self.metric.to(target.device)
        target, pred = target.reshape(-1).long(), pred.reshape(-1).long()
        k = self.num_classes
        scored = target != self.ignore_index
        bad_target, bad_pred = scored & ((target < 0) | (target >= k)), scored & ((pred < 0) | (pred >= k))
        bad = torch.stack((bad_target.any(), bad_pred.any()))
        if target.device.type == "cpu":
            self._refuse(bad)  # at once: nothing of this batch is counted
        else:
            self.bad = bad if self.bad is None else self.bad | bad
        cell = torch.where(scored & ~bad_target & ~bad_pred, target * k + pred, k * k)
        counts = torch.zeros(k * k + 1, dtype=torch.long, device=target.device)
        counts.scatter_add_(0, cell, torch.ones_like(cell))
        self.metric.confmat += counts[:k * k].view(k, k)

    def _refuse(self, bad: torch.Tensor | None) -> None:
        if bad is None:
            return
        bad_target, bad_pred = bad.tolist()
        k = self.num_classes
        if bad_target:
            raise ValueError(f"ground truth holds values outside [0, {k}) other than {self.ignore_index}")
        if bad_pred:
            raise ValueError(f"prediction holds values outside [0, {k})")

    def merge(self, other: "ConfusionMatrix") -> None:
        """Add the counts of another matrix of the same classes (e.g. another shard of the split)."""
        self.metric.confmat += other.matrix.to(self.matrix.device)

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
