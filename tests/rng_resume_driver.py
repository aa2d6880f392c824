"""Run by tests/test_training_rng_ddp.py as a script: with Lightning's DDP on two processes (gloo on the
CPU, NCCL on two GPUs: ``rng_resume_driver.py <out> [cpu|gpu]``), three fits of a tiny module that carry the trainer's ``RNGState`` and ``EpochCheckpoint``:

1. ``straight``: two epochs;
2. ``first``: the same first epoch, which writes ``<out>/first/last.ckpt``;
3. ``resumed``: from that checkpoint to the end of epoch two, after every generator was reseeded.

After each step every rank draws ``rank + 1`` more numbers from Python's, NumPy's, torch's and its
device's generators, so the ranks' states differ; at the first step of epoch two each rank records one draw
of each. ``<out>/rank<r>.json`` holds rank r's draws of the straight and the resumed fit: equal when
each rank restored its own state. Lightning's launcher runs this script again for rank 1, which is
why it is a file and not a function of the test.
"""
import json
import random
import sys
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch

from skipless.training.callbacks import EpochCheckpoint, RNGState
from skipless.training.checkpoint_io import AtomicCheckpointIO


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return self.layer(batch).square().mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class RankDraws(pl.Callback):
    """Makes each rank's generators differ (``rank + 1`` draws per step) and records the first draws of epoch two."""

    def __init__(self) -> None:
        self.recorded: dict[str, list[float]] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        for _ in range(trainer.global_rank + 1):
            random.random(), np.random.rand(), torch.rand(1), torch.rand(1, device=pl_module.device)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        # At the first batch, not at the epoch start: a resumed fit creates its loader's iterator (which
        # draws a seed from torch's generator) before the epoch starts, a straight one just after.
        if trainer.current_epoch == 1 and batch_idx == 0:
            self.recorded = {"python": [random.random()], "numpy": np.random.rand(2).tolist(),
                             "torch": torch.rand(2).tolist(), "device": torch.rand(2, device=pl_module.device).tolist()}


def fit(out: Path, accelerator: str, name: str, epochs: int, ckpt_path: str | None = None) -> tuple[dict, int]:
    draws = RankDraws()
    trainer = pl.Trainer(accelerator=accelerator, devices=2, strategy="ddp", max_epochs=epochs, default_root_dir=out,
                         callbacks=[RNGState(), EpochCheckpoint(out / name), draws], plugins=[AtomicCheckpointIO()],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)
    data = torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=2)  # 2 steps per epoch on each rank
    trainer.fit(Tiny(), data, ckpt_path=ckpt_path)
    return draws.recorded, trainer.global_rank


if __name__ == "__main__":
    out, accelerator = Path(sys.argv[1]), (sys.argv[2:] or ["cpu"])[0]
    pl.seed_everything(0, verbose=False)
    straight, rank = fit(out, accelerator, "straight", 2)
    pl.seed_everything(0, verbose=False)
    fit(out, accelerator, "first", 1)
    pl.seed_everything(123, verbose=False)  # the resume must bring each rank's own state back
    resumed, _ = fit(out, accelerator, "resumed", 2, ckpt_path=str(out / "first" / "last.ckpt"))
    (out / f"rank{rank}.json").write_text(json.dumps({"straight": straight, "resumed": resumed}))
