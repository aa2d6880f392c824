"""Callbacks that watch the paper's mechanism while a run trains (config section ``diagnostics``).

``ConditioningMonitor`` measures the trained backbone (DINO: the student's; MAE: the encoder) with ``analysis.diagnostics.diagnose`` at the
start and every ``every_n_epochs`` epochs (and at the last): kappa(J J^T) and the per-block
kappa(K_l K_l^T), so that the paper's Tables 5 and 6 (Ji et al., Appendix A.7, tracked "during DINO
ViT-S training") come out of a run as curves, with the embedding ln kappa (seeds/003, Fig. 1b) and
the effective rank (seeds/002, Section 5) beside them. A solve running longer than 10 s prints a
progress line (above Lightning's bar); ``diagnostics.budget_s`` bounds each call
(``analysis/solve_budget.py``). TensorBoard: ``watch/cond/<quantity>``
(one tag per block, at the global step; ∞ under ``<quantity>/infinite`` at float32's largest value,
a bound under ``<quantity>/lower_bound``: ``analysis/tensorboard_values.py``); every call is also a line of
``<run>/diagnostics.jsonl``.

``BlockSignals`` logs, every ``signals_every_n_steps`` steps, what a researcher watches when a
skipless run goes wrong (``analysis.block_signals``): per block the gradient norm (after backward,
before DINO's per-parameter clipping; unscaled under 16-mixed, ``training/precision.py``), the update-to-weight ratio of the optimiser step, the
attention entropy and mean diagonal weight, and the mean cosine between patch tokens (rank
collapse). TensorBoard: ``watch/signals/<name>/block<l>``.

Both measure a fixed batch (``training.data.diagnostic_images``), on rank 0 only, on a forked RNG:
observing a run never changes the crops, dropout or resume of the run it observes. On several GPUs
the other ranks wait at the next collective while rank 0 measures, so under DDP each call has a budget
(``budget_of``: at most half the collective timeout) and no rank's optional work can end the run.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import lightning.pytorch as pl
import torch
from tqdm import tqdm

from ..analysis.block_signals import attention_signals, gradient_norms, parameter_snapshot, update_ratios
from ..analysis.condition_number import unconverged_note
from ..analysis.diagnostics import MEASURES, DiagnosticSettings, diagnose, result_to_json
from ..analysis.tensorboard_values import GROUP as TB_GROUP, tensorboard_values
from ..devices.world import isolated_rng


def _log(trainer: pl.Trainer, metrics: dict[str, float]) -> None:
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=trainer.global_step)


def _trained(pl_module: pl.LightningModule) -> torch.nn.Module:
    """The backbone the optimiser trains: ``trained_backbone()`` of the method's module (DINO: the student's,
    MAE: the encoder)."""
    return pl_module.trained_backbone()


class ConditioningMonitor(pl.Callback):
    """``diagnose`` of the trained backbone at the start and every ``every`` epochs (module docstring).

    ``images``: builds the fixed (B, 3, S, S) batch once, when first needed.
    """

    def __init__(self, images: Callable[[], torch.Tensor], settings: DiagnosticSettings, every: int,
                 run_dir: str | Path) -> None:
        self.images_fn, self.settings, self.every = images, settings, int(every)
        self.path = Path(run_dir) / "diagnostics.jsonl"
        self._images: torch.Tensor | None = None
        self.history: list[dict[str, Any]] = []

    def _measure(self, trainer: pl.Trainer, pl_module: pl.LightningModule, epoch: int) -> None:
        if self._images is None:
            self._images = self.images_fn()
        with isolated_rng(pl_module.device):
            d = diagnose(_trained(pl_module), self._images.to(pl_module.device), self.settings,
                         report=lambda line: tqdm.write(f"conditioning, epoch {epoch}: {line}"))
        _log(trainer, {f"{TB_GROUP}/{k}": v for k, v in tensorboard_values(d).items()})
        row = {"epoch": epoch, "step": trainer.global_step, **result_to_json(d)}
        self.history.append(row)
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        tqdm.write(f"epoch {epoch}: {progress_line(d)}")  # above the bar

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero and self.every and trainer.current_epoch == 0 and trainer.global_step == 0:
            self._measure(trainer, pl_module, 0)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch = trainer.current_epoch + 1
        if trainer.is_global_zero and self.every and (epoch % self.every == 0 or epoch == trainer.max_epochs):
            self._measure(trainer, pl_module, epoch)


def progress_line(d: Any) -> str:
    """``kappa(JJ^T) 207; kappa(K K^T) attention L0 ≥ 6.7e4 L4 no bound (6 s; 2 of 2 solves stopped ...)``."""
    shown, conditions = [], []
    if d.jacobian is not None:
        shown.append(f"kappa(JJ^T) {d.jacobian.terse()}")
        conditions.append(d.jacobian)
    if d.block_jacobians:
        attention = [row["attn"] for row in d.block_jacobians.values()]
        shown.append("kappa(K K^T) attention " + " ".join(f"L{b} {c.terse()}"
                                                          for b, c in zip(d.block_jacobians, attention)))
        conditions += attention
    note = unconverged_note(conditions)
    return f"{'; '.join(shown)} ({sum(d.seconds.values()):.0f} s{'; ' + note if note else ''})"


class BlockSignals(pl.Callback):
    """Cheap per-block signals every ``every`` steps (module docstring)."""

    def __init__(self, images: Callable[[], torch.Tensor], every: int) -> None:
        self.images_fn, self.every = images, int(every)
        self._images: torch.Tensor | None = None
        self._snapshot: dict[int, list[torch.Tensor]] | None = None
        self._grads: dict[int, float] = {}

    def _due(self, trainer: pl.Trainer) -> bool:
        return bool(self.every) and trainer.is_global_zero and trainer.global_step % self.every == 0

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._due(trainer):
            student = _trained(pl_module)
            self._grads = gradient_norms(student)
            self._snapshot = parameter_snapshot(student)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx) -> None:
        if self._snapshot is None:
            return
        student = _trained(pl_module)
        metrics = {f"watch/signals/grad_norm/block{b}": v for b, v in self._grads.items()}
        metrics.update({f"watch/signals/update_ratio/block{b}": v for b, v in update_ratios(student, self._snapshot).items()})
        self._snapshot, self._grads = None, {}
        if self._images is None:
            self._images = self.images_fn()
        with isolated_rng(pl_module.device):
            found = attention_signals(student, self._images.to(pl_module.device))
        for b, row in found.items():
            for name in ("attention_entropy", "attention_diagonal", "token_cosine", "token_norm"):
                if name in row:  # no entropy for attention rows that are not distributions
                    metrics[f"watch/signals/{name}/block{b}"] = row[name]
        _log(trainer, metrics)


def budget_of(plan: Any) -> float | None:
    """Seconds each conditioning call may take: ``diagnostics.budget_s``; under DDP, where the other ranks wait
    for rank 0's measurements in their next collective, null is half of ``train.collective_timeout_minutes``
    (the schema refuses a budget above it: ``training/schema.py``), so no rank's optional work ends the run."""
    cfg = plan.cfg
    budget = None if cfg.diagnostics.budget_s is None else float(cfg.diagnostics.budget_s)
    if plan.devices * plan.nodes > 1 and budget is None:
        return float(cfg.train.collective_timeout_minutes) * 60 / 2
    return budget


def diagnostics_callbacks(plan: Any, images: Callable[[], torch.Tensor]) -> list[pl.Callback]:
    """The conditioning monitor and the per-block signals a run's ``diagnostics`` section asks for (0 turns each
    off), measuring the fixed batch ``images()`` (``training/run_plan.RunPlan``: its config and folder): the
    one builder of pretraining (fixed centre crops at the method's view size) and supervised training and
    fine-tuning (the first validation images as validation sees them)."""
    cfg, run_dir = plan.cfg, plan.run_dir
    d = cfg.diagnostics
    found: list[pl.Callback] = []
    if d.every_n_epochs:
        layers = d.layers if isinstance(d.layers, str) else list(d.layers)
        measures = tuple(m for m in MEASURES if m != "jacobian" or d.jacobian_images)
        settings = DiagnosticSettings(layers=layers, measures=measures, jacobian_images=max(1, int(d.jacobian_images)),
                                      tol=float(d.tol), max_iter=int(d.max_iter), dtype=str(d.dtype),
                                      seed=int(cfg.run.seed), budget_s=budget_of(plan))
        found.append(ConditioningMonitor(images, settings, int(d.every_n_epochs), run_dir))
    if d.signals_every_n_steps:
        found.append(BlockSignals(images, int(d.signals_every_n_steps)))
    return found
