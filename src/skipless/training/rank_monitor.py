"""The effective rank of the exported backbone's class tokens over training (Zhang et al. Fig. 5).

At the epochs a run exports a backbone file (``train.export_epochs``), at each k-NN epoch
(``train.knn_every_n_epochs``, so it sits beside the k-NN accuracy) and at the last one,
``analysis.class_token_rank`` of ``exported_backbone()`` on ``diagnostics.rank_images`` fixed images:
TensorBoard ``watch/rank/rho`` and ``watch/rank/erank`` (after the final norm) and ``.../*_pre_norm``
(the last block's output), and one line of ``<run>/rank.jsonl`` per measurement, so the figure comes
out of a run. Rank 0 only; the RNG is forked, so a resumed run draws the same crops.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable

import lightning.pytorch as pl
import torch

from ..analysis.class_token_rank import class_token_rank
from ..world import isolated_rng


class RankMonitor(pl.Callback):
    """``class_token_rank`` of the exported backbone at ``epochs``, every ``every`` epochs and the last."""

    def __init__(self, images: Callable[[], torch.Tensor], run_dir: str | Path, every: int = 0,
                 epochs: Iterable[int] = ()) -> None:
        self.images_fn, self.run_dir = images, Path(run_dir)
        self.every, self.epochs = int(every), {int(e) for e in epochs}
        self._images: torch.Tensor | None = None

    def due(self, epoch: int, max_epochs: int) -> bool:
        return epoch == max_epochs or epoch in self.epochs or bool(self.every and epoch % self.every == 0)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch = trainer.current_epoch + 1
        if not trainer.is_global_zero or not self.due(epoch, trainer.max_epochs):
            return
        if self._images is None:
            self._images = self.images_fn()
        with isolated_rng(pl_module.device):
            rank = class_token_rank(pl_module.exported_backbone(), self._images)
        for logger in trainer.loggers:
            logger.log_metrics({f"watch/rank/{k}": v for k, v in rank.items() if k != "images"},
                               step=trainer.global_step)
        with open(self.run_dir / "rank.jsonl", "a") as f:
            f.write(json.dumps({"epoch": epoch, "step": trainer.global_step, **rank}) + "\n")
        print(f"class-token effective rank (epoch {epoch}): rho {rank['rho']:.3f} (exp {rank['erank']:.1f} of "
              f"{rank['images']} images; before the final norm rho {rank['rho_pre_norm']:.3f})", flush=True)
