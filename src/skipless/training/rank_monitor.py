"""The effective rank of the exported backbone's features over training (Zhang et al. Figs. 4b and 5).

At the epochs a run exports a backbone file (``train.export_epochs``), every ``every`` epochs (a pretraining's
k-NN epochs, ``train.knn_every_n_epochs``, so it sits beside the k-NN accuracy; a supervised run's validation
epochs) and at the last one, the rank of ``exported_backbone()`` on ``diagnostics.rank_images`` fixed images:
a ViT's class tokens (``analysis.class_token_rank``, Fig. 5: ``rho`` and ``erank`` after the final norm,
``*_pre_norm`` of the last block's output), a CNN's pooled features (``analysis.pooled_rank``, Fig. 4: ``rho``
and ``erank`` of the pooled feature, ``blocks`` after every block). TensorBoard ``watch/rank/<key>`` and one line
of ``<run>/rank.jsonl`` per measurement, so the figure comes out of a run. Rank 0 only; the RNG is forked, so a
resumed run draws the same crops.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable

import lightning.pytorch as pl
import torch

from ..analysis.class_token_rank import class_token_rank
from ..analysis.pooled_rank import pooled_feature_rank
from ..models.timm_family import family_of
from ..devices.world import isolated_rng


def feature_rank(model: torch.nn.Module, images: torch.Tensor) -> dict:
    """The rank the monitor records for ``model``: its class tokens' (a ViT), its pooled features' (a timm model)."""
    if family_of(getattr(model, "skipless_args", {})) != "vit":
        return pooled_feature_rank(model, images)
    return class_token_rank(model, images)


def scalars(rank: dict, prefix: str = "watch/rank") -> dict[str, float]:
    """The TensorBoard scalars of a measurement: every number, the per-block ones as ``<prefix>/blocks/<i>/<key>``."""
    out = {}
    for key, value in rank.items():
        if isinstance(value, dict):
            out.update(scalars(value, f"{prefix}/{key}"))
        elif key != "images":
            out[f"{prefix}/{key}"] = float(value)
    return out


class RankMonitor(pl.Callback):
    """``feature_rank`` of the exported backbone at ``epochs``, every ``every`` epochs and the last."""

    def __init__(self, images: Callable[[], torch.Tensor], run_dir: str | Path, every: int = 0,
                 epochs: Iterable[int] = ()) -> None:
        self.images_fn, self.run_dir = images, Path(run_dir)
        self.every, self.epochs = int(every), {int(e) for e in epochs}
        self._images: torch.Tensor | None = None
        self.last_rank: dict | None = None  # {"epoch", "step", "rho", ...}: summary.json's ``rank`` (RunSummary)

    def due(self, epoch: int, max_epochs: int) -> bool:
        return epoch == max_epochs or epoch in self.epochs or bool(self.every and epoch % self.every == 0)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch = trainer.current_epoch + 1
        if not trainer.is_global_zero or not self.due(epoch, trainer.max_epochs):
            return
        if self._images is None:
            self._images = self.images_fn()
        with isolated_rng(pl_module.device):
            rank = feature_rank(pl_module.exported_backbone(), self._images)
        for logger in trainer.loggers:
            logger.log_metrics(scalars(rank), step=trainer.global_step)
        self.last_rank = {"epoch": epoch, "step": trainer.global_step, **rank}
        with open(self.run_dir / "rank.jsonl", "a") as f:
            f.write(json.dumps(self.last_rank) + "\n")
        where = (f"before the final norm rho {rank['rho_pre_norm']:.3f}" if "rho_pre_norm" in rank else
                 "after each block " + " ".join(f"{b['rho']:.2f}" for b in rank.get("blocks", {}).values()))
        print(f"{'class-token' if 'rho_pre_norm' in rank else 'pooled-feature'} effective rank (epoch {epoch}): rho "
              f"{rank['rho']:.3f} (exp {rank['erank']:.1f} of {rank['images']} images; {where})", flush=True)
