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


def test_two_cpu_processes_accumulating_two_micro_batches_train_as_with_one_batch_each(tmp_path):
    """train.global_batch=16 on 2 processes at 4 per device: each accumulates 2 micro-batches, its gradients
    all-reduced once, in the second micro-batch's backward pass (DDP's no_sync on the first). The ranks stay
    equal, and the weights after the epoch's one step are those of the same 2 processes with 8 per device
    (the same images on each rank: the sampler's order does not depend on the batch size), to float32
    rounding (atol 1e-6, as tests/test_accumulation.py)."""
    roots = {}
    for name, extra in (("whole", ["train.batch_size_per_device=8"]),
                        ("accumulated", ["train.batch_size_per_device=4", "train.global_batch=16"])):
        (tmp_path / name).mkdir()
        # eps 1e-4: AdamW's first step on a gradient that is rounding noise (tests/test_accumulation.py)
        roots[name] = run_ddp(tmp_path / name, "cpu", 2, "auto", *extra, "optim.eps=1e-4")
    states = {}
    for name, root in roots.items():
        ranks = [torch.load(root / f"rank{r}.pt", weights_only=True) for r in range(2)]
        assert [r["steps"] for r in ranks] == [1, 1]
        for key, value in ranks[0]["state"].items():
            torch.testing.assert_close(ranks[1]["state"][key], value, rtol=0, atol=0)
        states[name] = ranks[0]["state"]
    for key, value in states["whole"].items():
        torch.testing.assert_close(states["accumulated"][key], value, rtol=0, atol=1e-6, msg=lambda m: f"{key}: {m}")


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
