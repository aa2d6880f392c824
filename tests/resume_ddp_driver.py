"""Run by tests/test_resume_ddp_workers.py as a script: ``resume_ddp_driver.py <tag> <signal> key=value ...``, a
pretraining through the real entry point with Lightning's DDP on two CPU processes, each with its loader worker.

``<signal>``: ``none``, or ``<step>:<ranks>`` (``3:all``, ``6:1``): SIGUSR2 to the listed ranks at the start of that
optimizer step, as SLURM sends it before a time limit. Each rank appends every step's loss to
``<run.root>/<tag>-rank<r>.json``. Lightning's DDP launcher starts rank 1 by running this same script again with the
same arguments, which is why it is a file and not a function of the test; the exit status is the entry point's.
"""
import json
import signal
import sys
from pathlib import Path

import lightning.pytorch as pl

from fake_slurm import SignalAt
from skipless.config import load_config
from skipless.pretrain import main


class RankLosses(pl.Callback):
    def __init__(self, folder: Path, tag: str) -> None:
        self.folder, self.tag, self.values = folder, tag, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.values.append(float(outputs["loss"] if isinstance(outputs, dict) else outputs))
        (self.folder / f"{self.tag}-rank{trainer.global_rank}.json").write_text(json.dumps(self.values))


if __name__ == "__main__":
    tag, when, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]
    callbacks = [RankLosses(Path(load_config("pretrain", overrides).run.root), tag)]
    if when != "none":
        step, ranks = when.split(":")
        callbacks.append(SignalAt(int(step), signal.SIGUSR2, None if ranks == "all" else (int(ranks),)))
    sys.exit(main(overrides, extra_callbacks=callbacks))
