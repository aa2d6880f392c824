"""Collapse: a run that trains without failing and without learning says so while it trains.

A collapsed run raises nothing (its loss stays finite, the divergence guard never fires), and its
numbers look like numbers: a supervised ViT-Ti whose predictions went uniform still reports a top-1,
a DINO teacher that went uniform still exports a backbone. So each training module has a rule, the
rule is checked as the run goes, and a run that meets it says so in one line of its log (when it
collapses, and again if it recovers), in TensorBoard (``watch/health/collapsed``, 0 or 1 at every check,
beside the rule's quantities under ``watch/health/``) and in ``summary.json`` (``collapsed``: the reason at
the last check, or null), which ``make paper`` marks beside the run's numbers.

DINO's rule is DINO's (``ssl/dino/module.py``), on the ``CollapseMonitor`` of this module.

Supervised: at each validation once the warm-up is over (before the lr reaches its peak a classifier
near chance is starting, not collapsed: the paper's recipe warms up for 50 epochs),

- *at chance*: the validation cross-entropy within ``CHANCE_TOLERANCE`` (a share of ``ln C``) of the
  entropy of the validation labels, the loss of the best answer that ignores the image (the class
  frequencies; ``ln C`` on balanced classes, and the uniform answer's ``ln C`` is above it).
- *one class*: at least ``ONE_CLASS_SHARE`` of the validation predictions are the same class.

The thresholds are far from a run that learns and close to the floors a collapsed run reaches, as
measured on the CPU demos (docs/results.md, "Collapse"): see each constant.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import lightning.pytorch as pl
import torch
from torchmetrics import Metric

# Supervised, at chance: validation loss >= chance - 5% of ln C (0.115 nats for 10 classes, 0.35 for
# 1000). Measured on the supervised CPU demo at peak lr 1e-3 (docs/results.md "Collapse"), skipless with
# the paper's init: from epoch 2 on 0.00-0.01 below chance in bf16-mixed (top-1 12.2, the largest
# class's share) and 0.07-0.10 below in 32-true (top-1 12-16, two thirds of the answers one class),
# both backbones far below their random init on k-NN (10.3 and 14.5 against 37.4); after its first
# epoch the same run was 0.21 below (top-1 27.3), and runs that learn go on down.
CHANCE_TOLERANCE = 0.05
# Supervised, one class: >= 90% of the predictions in one class, whatever the loss (a classifier that
# tells classes apart spreads its answers over them: 1/C each on balanced data).
ONE_CLASS_SHARE = 0.9

def label_entropy(counts: Sequence[int]) -> float:
    """Entropy (nats) of the class frequencies ``counts``: the cross-entropy of predicting them for
    every image, the lowest loss of any answer that ignores the image."""
    total = float(sum(counts))
    return -sum(c / total * math.log(c / total) for c in counts if c > 0)


def supervised_collapse(val_loss: float, predicted: Sequence[int], labels: Sequence[int]) -> str | None:
    """The reason a classifier with this validation cross-entropy has collapsed, or None.

    Args:
        val_loss: mean cross-entropy over the validation set (nats).
        predicted: per class, how many validation images it predicted that class for.
        labels: per class, how many validation images have that label.
    """
    classes, total = len(labels), sum(predicted)
    chance = label_entropy(labels)
    if val_loss >= chance - CHANCE_TOLERANCE * math.log(classes):
        return (f"validation loss {val_loss:.3f} is at chance {chance:.3f} (the entropy of the validation "
                f"labels; ln {classes} = {math.log(classes):.3f})")
    top = max(range(classes), key=lambda k: predicted[k])
    if total and predicted[top] >= ONE_CLASS_SHARE * total:
        return f"{predicted[top] / total:.0%} of the validation predictions are class {top}"
    return None


class ClassCounts(Metric):
    """Per class, how many samples were predicted as it and how many carry it as label: a (2, C) tensor,
    counted on the device and summed over ranks by torchmetrics."""

    full_state_update = False

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.num_classes = int(num_classes)
        self.add_state("counts", default=torch.zeros(2, self.num_classes, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, predicted: torch.Tensor, labels: torch.Tensor) -> None:
        self.counts[0] += torch.bincount(predicted.flatten(), minlength=self.num_classes)
        self.counts[1] += torch.bincount(labels.flatten(), minlength=self.num_classes)

    def compute(self) -> torch.Tensor:
        return self.counts


class CollapseMonitor(pl.Callback):
    """Reports the verdict of a rule (subclasses say when and how it is read): a TensorBoard scalar
    at each check, one log line when the run collapses or recovers, the reason kept for
    ``summary.json`` (``reason``) and in checkpoints, so a resumed run still knows it."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def report(self, trainer: pl.Trainer, reason: str | None, quantities: dict[str, float]) -> None:
        where = f"step {trainer.global_step} (epoch {trainer.current_epoch + 1})"
        for logger in trainer.loggers:
            logger.log_metrics({"watch/health/collapsed": float(reason is not None), **quantities}, step=trainer.global_step)
        if trainer.is_global_zero and (reason is None) != (self.reason is None):
            line = (f"health: the run has collapsed at {where}: {reason}" if reason is not None
                    else f"health: the run is no longer collapsed at {where} (it was: {self.reason})")
            bar = trainer.progress_bar_callback  # on its own line, above the progress bar, as LightningModule.print
            bar.print(line) if bar is not None and bar.is_enabled else print(line, flush=True)
            experiment = getattr(trainer.logger, "experiment", None)
            if experiment is not None and hasattr(experiment, "add_text"):
                experiment.add_text("watch/health/collapse", line, trainer.global_step)
        self.reason = reason

    def state_dict(self) -> dict[str, Any]:
        return {"reason": self.reason}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.reason = state["reason"]


class SupervisedCollapse(CollapseMonitor):
    """``supervised_collapse`` at the end of each validation after the warm-up (``optim.warmup_epochs``):
    the epoch's ``val/loss`` and the module's ``val_class_counts`` (predictions and labels per class,
    from ``ClassCounts``)."""

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or trainer.current_epoch + 1 < int(pl_module.cfg.optim.warmup_epochs):
            return
        counts = getattr(pl_module, "val_class_counts", None)
        if counts is None or "val/loss" not in trainer.callback_metrics:
            raise KeyError("the collapse monitor reads val/loss and the module's val_class_counts after each "
                           "validation; the classifier no longer provides them")
        val_loss = float(trainer.callback_metrics["val/loss"])
        predicted, labels = counts.tolist()
        chance = label_entropy(labels)
        self.report(trainer, supervised_collapse(val_loss, predicted, labels),
                    {"watch/health/val_loss_below_chance": chance - val_loss,
                     "watch/health/top_class_share": max(predicted) / max(1, sum(predicted))})
