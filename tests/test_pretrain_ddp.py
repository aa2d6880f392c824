"""DDP through the real entry point: two processes (gloo on the CPU; NCCL on two GPUs) train one run,
end with identical weights on both ranks, share the steps of one global batch, and write one run
folder. NCCL with one process on one GPU runs where a GPU is present (the path a one-GPU box takes
with train.strategy=ddp)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tiny_runs import DINO_TINY

TESTS = Path(__file__).parent
TINY = [*DINO_TINY, "data.n_train=16"]


def run_ddp(tmp_path: Path, accelerator: str, devices: int, strategy: str = "auto", *extra: str) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    args = [*TINY, f"data.root={tmp_path / 'data'}", f"run.root={root}", "run.name=ddp",
            f"train.accelerator={accelerator}", f"train.devices={devices}", f"train.strategy={strategy}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(TESTS / "ddp_driver.py"), *args], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def check_run(root: Path, world: int, backend: str) -> None:
    ranks = [torch.load(root / f"rank{r}.pt", weights_only=True) for r in range(world)]
    assert all(r["world"] == world and r["backend"] == backend for r in ranks)
    steps = 16 // (4 * world)  # one epoch of 16 images, 4 per device
    assert all(r["steps"] == steps for r in ranks)
    for name, value in ranks[0]["state"].items():
        for other in ranks[1:]:
            torch.testing.assert_close(other["state"][name], value, rtol=0, atol=0)  # DDP keeps ranks equal
    summary = json.loads((root / "ddp" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == steps
    assert (root / "ddp" / "backbone.pt").is_file() and (root / "ddp" / "checkpoints" / "last.ckpt").is_file()
    assert sorted(p.name for p in root.iterdir()) == ["ddp", *[f"rank{r}.pt" for r in range(world)]]


def test_two_cpu_processes_train_one_run_with_identical_weights(tmp_path):
    check_run(run_ddp(tmp_path, "cpu", 2), 2, "gloo")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_nccl_ddp_on_one_gpu(tmp_path):
    check_run(run_ddp(tmp_path, "gpu", 1, "ddp"), 1, "nccl")


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_nccl_ddp_on_two_gpus(tmp_path):
    check_run(run_ddp(tmp_path, "gpu", 2), 2, "nccl")


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_a_batchnorm_head_is_synchronised_across_two_gpus(tmp_path):
    """dino.use_bn_in_head: the official DINO converts the heads' BatchNorm to SyncBatchNorm under DDP."""
    root = run_ddp(tmp_path, "gpu", 2, "auto", "dino.use_bn_in_head=true")
    check_run(root, 2, "nccl")
    assert all(torch.load(root / f"rank{r}.pt", weights_only=True)["batchnorms"] == ["SyncBatchNorm"] for r in range(2))
