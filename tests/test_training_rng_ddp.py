"""Exact resume under DDP: every rank's random state is in the checkpoint and each rank restores its own;
a resume at another world size is refused before anything is written; a checkpoint of the older
one-state format still loads, on a machine with fewer GPUs too."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from skipless.config import load_config
from skipless.training import callbacks
from skipless.training.callbacks import RNGState
from skipless.training.run_folder import ResumeMismatchError
from skipless.training.run_start import prepare_run

TESTS = Path(__file__).parent


def _two_process_resume(tmp_path: Path, accelerator: str) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(TESTS / "rng_resume_driver.py"), str(tmp_path), accelerator], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


def _check_each_rank_resumed_its_own_state(tmp_path: Path, accelerator: str) -> None:
    ranks = _two_process_resume(tmp_path, accelerator)
    for rank in ranks:  # what each rank draws after the resume is what it drew in the uninterrupted fit
        assert rank["resumed"] == rank["straight"]
    for generator in ("python", "numpy", "torch", "device"):  # and the ranks' states differ, so a rank
        assert ranks[0]["straight"][generator] != ranks[1]["straight"][generator]  # restoring another's is seen
    ckpt = torch.load(tmp_path / "first" / "last.ckpt", weights_only=True)
    assert ckpt["world_size"] == 2 and len(ckpt["callbacks"]["RNGState"]["ranks"]) == 2


def test_each_of_two_cpu_processes_resumes_with_its_own_random_state(tmp_path):
    _check_each_rank_resumed_its_own_state(tmp_path, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_each_of_two_gpus_resumes_with_its_own_random_state(tmp_path):
    _check_each_rank_resumed_its_own_state(tmp_path, "gpu")


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_one_process_state_round_trips():
    rng = RNGState()
    state = rng.state_dict()
    assert len(state["ranks"]) == 1 and "cuda" not in state["ranks"][0]  # a CPU run stores no CUDA state
    expected = _draws()
    rng.load_state_dict(state)
    assert _draws() == expected


def test_an_older_one_state_checkpoint_loads_and_restores_only_its_own_gpu(monkeypatch):
    """The older format held rank 0's state and the CUDA states of every GPU it saw: on a machine
    with fewer GPUs each rank takes its own GPU's state where there is one (no IndexError)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    old = {"python": random.getstate(), "torch": torch.get_rng_state(),
           "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
           "cuda": [torch.tensor([0], dtype=torch.uint8)]}  # written on a one-GPU machine
    expected = _draws()
    restored = []
    monkeypatch.setattr(callbacks.torch.cuda, "set_rng_state", lambda state, device: restored.append((state, device)))
    rng = RNGState()
    rng.device = torch.device("cuda", 1)  # resumed as rank 1 of a two-GPU run
    rng.load_state_dict(old)
    assert _draws() == expected and restored == []
    rng.device = torch.device("cuda", 0)
    rng.load_state_dict({**old, "cuda": [torch.tensor([7], dtype=torch.uint8), torch.tensor([9], dtype=torch.uint8)]})
    assert [(int(s), d) for s, d in restored] == [(7, torch.device("cuda", 0))]


def test_a_gpu_rank_stores_and_restores_the_state_of_its_own_device_only(monkeypatch):
    monkeypatch.setattr(callbacks.torch.cuda, "get_rng_state",
                        lambda device: torch.tensor([device.index], dtype=torch.uint8))
    restored = []
    monkeypatch.setattr(callbacks.torch.cuda, "set_rng_state", lambda state, device: restored.append((state, device)))
    rng = RNGState()
    rng.device = torch.device("cuda", 3)
    state = rng.state_dict()
    assert int(state["ranks"][0]["cuda"]) == 3
    rng.load_state_dict(state)
    assert [(int(s), d) for s, d in restored] == [(3, torch.device("cuda", 3))]


def _checkpoint_of_world(run_dir: Path, world: int) -> None:
    (run_dir / "checkpoints").mkdir(parents=True)
    torch.save({"state_dict": {}, "global_step": 4, "world_size": world}, run_dir / "checkpoints" / "last.ckpt")


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_resume_at_another_world_size_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    cfg = load_config("pretrain", [f"run.root={tmp_path}", "run.name=r", "run.resume=true"])
    run_dir = tmp_path / "r"
    _checkpoint_of_world(run_dir, 2)
    before = _files(run_dir)
    with pytest.raises(ResumeMismatchError, match=r"written by 2 processes and this resume would run 1 \(train\.devices=1 "
                                                  r"x train\.num_nodes=1\); expected 2 again.* GPUS= and NODES="):
        prepare_run(cfg, run_dir)
    # devices=auto resolves to the GPUs this machine shows (four, faked here)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    auto = load_config("pretrain", [f"run.root={tmp_path}", "run.name=r", "run.resume=true", "train.devices=auto"])
    with pytest.raises(ResumeMismatchError, match=r"would run 4 \(train\.devices=4 \(auto\) x train\.num_nodes=1\)"):
        prepare_run(auto, run_dir)
    assert _files(run_dir) == before
    # the same world size passes this check and reaches the next one (the run's saved config)
    two = load_config("pretrain", [f"run.root={tmp_path}", "run.name=r", "run.resume=true", "train.devices=1",
                                   "train.num_nodes=2"])
    with pytest.raises(ResumeMismatchError, match="config.yaml is missing"):
        prepare_run(two, run_dir)
