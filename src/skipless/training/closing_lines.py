"""What a finished training found, in the lines printed just before its ``done:`` line, each on its own:
the k-NN of the exported backbone against a random init of the same architecture (``KNNMonitor``), MAE's
loss against the loss of predicting each masked patch as its own mean colour (``train/mean_patch_loss``,
``ssl/mae/autoencoder.py``), a supervised run's or a language model's last validation (``last_val``). Read from
what the run already measured; nothing is computed again."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .callbacks import KNNMonitor


def knn_line(history: list[tuple[int, float]], random: float | None, label: str) -> str | None:
    """``k-NN top-1 of the teacher: 0.327 at epoch 4, random init 0.225 (+0.102)``; None before any score."""
    if not history:
        return None
    epoch, acc = history[-1]
    if random is None:
        return f"k-NN top-1 of the {label}: {acc:.3f} at epoch {epoch}"
    verdict = "above" if acc > random else "not above"
    return (f"k-NN top-1 of the {label}: {acc:.3f} at epoch {epoch}, random init {random:.3f} "
            f"({acc - random:+.3f}: {verdict} its random floor)")


def floor_line(loss: float | None, floor: float | None) -> str | None:
    """``MAE loss 0.595 at the last logged step, mean-patch floor 0.983 (0.61 of it)``; None without both."""
    if loss is None or floor is None:
        return None
    return (f"MAE loss {loss:.3f} at the last logged step, against {floor:.3f} for predicting each masked patch "
            f"as its own mean colour ({loss / floor:.2f} of it)")


def val_line(last_val: Mapping[str, Any] | None) -> str | None:
    """A classifier's last top-1 / top-5, or a language model's last validation loss against its first."""
    if not last_val:
        return None
    if "perplexity" in last_val:
        first = last_val.get("first") or last_val
        return (f"validation at step {last_val['step']}: loss {last_val['loss']:.4f}, perplexity "
                f"{last_val['perplexity']:.1f} (at step {first['step']}: loss {first['loss']:.4f}, perplexity "
                f"{first['perplexity']:.1f})")
    return f"validation at epoch {last_val['epoch']}: top-1 {last_val['top1']:.2f}%, top-5 {last_val['top5']:.2f}%"


def _scalar(metrics: Mapping[str, Any], name: str) -> float | None:
    value = metrics.get(name)
    return None if value is None else float(value)


def closing_lines(trainer: Any) -> list[str]:
    """Every line of this module that the run has the numbers for."""
    monitor = next((c for c in trainer.callbacks if isinstance(c, KNNMonitor)), None)
    metrics = trainer.callback_metrics
    lines = [knn_line(monitor.history, monitor.random_accuracy, monitor.label) if monitor else None,
             floor_line(_scalar(metrics, "train/loss"), _scalar(metrics, "train/mean_patch_loss")),
             val_line(getattr(trainer.lightning_module, "last_val", None))]
    return [line for line in lines if line]
