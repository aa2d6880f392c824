"""Run by tests/test_pretrain_ddp.py as a script: a pretraining through the real entry point with
Lightning's DDP, each rank saving its student's weights at the end (``<run.root>/rank<r>.pt``), with
the class names of the module's BatchNorm layers while it trains (SyncBatchNorm under DDP on GPUs).

Lightning's DDP launcher starts the other ranks by running this same script again with the same
arguments (the configuration overrides), which is why it is a file and not a function of the test.
"""
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch

from skipless.config import load_config
from skipless.pretrain import pretrain


class SaveRankWeights(pl.Callback):
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on_train_end(self, trainer, pl_module):
        state = {k: v.detach().cpu() for k, v in pl_module.student.state_dict().items()}
        norms = sorted({type(m).__name__ for m in pl_module.modules()
                        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.SyncBatchNorm))})
        torch.save({"world": trainer.world_size, "backend": str(getattr(trainer.strategy, "_process_group_backend", "")),
                    "state": state, "steps": trainer.global_step, "batchnorms": norms},
                   self.folder / f"rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    cfg = load_config("pretrain", sys.argv[1:])
    pretrain(cfg, extra_callbacks=[SaveRankWeights(Path(cfg.run.root))])
