"""Exact resume under DDP with loader workers (issue 46, item 4), on two CPU processes (gloo), each with one loader
worker, through the real entry point: a run stopped at the end of its first epoch and again in the middle of its
second, each time by SIGUSR2 (the second time sent to rank 1 only: the ranks decide together), and resumed each
time, trains every step of every rank with the loss of the uninterrupted run, to the bit.

Before this issue the first resumed epoch trained on epoch 0's images on every rank (Lightning builds the loader's
iterator before it sets the sampler's epoch, and a worker deals the first indices at once), and a mid-epoch
checkpoint did not exist.

The same holds with gradient accumulation (issue 48, item 4): 2 micro-batches of 2 images per step on each rank,
which the loader's worker makes one micro-batch at a time and the loader gathers, the position counting them."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from skipless.errors import EXIT_PREEMPTED
from tiny_runs import DINO_TINY

TESTS = Path(__file__).parent
# 32 images, 4 per device on 2 devices: 4 steps per epoch on each rank, 8 in the run
ARGS = [*DINO_TINY, "data.n_train=32", "train.epochs=2", "train.num_workers=1", "train.log_every_n_steps=1",
        "train.accelerator=cpu", "train.devices=2"]


def ddp_run(tmp_path: Path, tag: str, name: str, signal_at: str, *extra: str) -> int:
    args = [*ARGS, f"data.root={tmp_path / 'data'}", f"run.root={tmp_path / 'runs'}", f"run.name={name}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    for var in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "TORCHELASTIC_RUN_ID"):
        env.pop(var, None)
    done = subprocess.run([sys.executable, str(TESTS / "resume_ddp_driver.py"), tag, signal_at, *args], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode in (0, EXIT_PREEMPTED), done.stderr[-3000:]
    return done.returncode


def rank_losses(tmp_path: Path, tag: str, rank: int) -> list[float]:
    path = tmp_path / "runs" / f"{tag}-rank{rank}.json"
    return json.loads(path.read_text()) if path.is_file() else []


# 4 images per device and step: one batch, or 2 micro-batches of 2 (global batch 8 on 2 devices)
# and the same with the crops and colour drawn and made on the device (data.augment_on=device_crops; the CPU
# here): each rank's rows of the step's draws, resumed with the device's generator
@pytest.mark.parametrize("step", [[], ["train.batch_size_per_device=2", "train.global_batch=8"],
                                  ["train.batch_size_per_device=2", "train.global_batch=8",
                                   "data.augment_on=device_crops"]],
                         ids=["one-batch", "two-micro-batches", "device-crops"])
def test_two_processes_with_workers_resume_at_an_epoch_end_and_mid_epoch_with_the_straight_losses(tmp_path, step):
    assert ddp_run(tmp_path, "straight", "straight", "none", *step) == 0
    # the signal at the start of step 3, the epoch's last: its end writes the epoch's checkpoint, then the run stops
    assert ddp_run(tmp_path, "first", "r", "3:all", *step) == EXIT_PREEMPTED
    run = tmp_path / "runs" / "r"
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == 4 and ckpt["world_size"] == 2
    # the signal to rank 1 alone, at the start of step 6: both ranks write the mid-epoch checkpoint after it
    assert ddp_run(tmp_path, "second", "r", "6:1", "run.resume=true", *step) == EXIT_PREEMPTED
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    position = ckpt["callbacks"]["LoaderPosition"]
    assert ckpt["global_step"] == 7 and (position["batches_done"], position["batches_total"]) == (3, 4)
    torch_states = [rank["slots"][0][0] for rank in position["ranks"]]  # each rank's worker's own streams
    assert len(torch_states) == 2 and not torch.equal(*torch_states)
    assert [rank["micro_batches"] for rank in position["ranks"]] == [2 if step else 1] * 2
    assert json.loads((run / "summary.json").read_text())["status"] == "preempted"
    assert ddp_run(tmp_path, "third", "r", "none", "run.resume=true", *step) == 0
    for rank in (0, 1):
        straight = rank_losses(tmp_path, "straight", rank)
        resumed = [loss for tag in ("first", "second", "third") for loss in rank_losses(tmp_path, tag, rank)]
        assert len(straight) == 8 and resumed == straight, f"rank {rank}"
    assert rank_losses(tmp_path, "straight", 0) != rank_losses(tmp_path, "straight", 1)  # each rank its own images
