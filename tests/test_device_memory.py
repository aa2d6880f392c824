"""A training step that runs out of GPU memory: one sentence naming the micro-batch and the smaller ones that keep
the global batch (``skipless/devices/device_memory.py``)."""
import json

import pytest
import torch

from skipless.devices.device_memory import smaller_batches
from skipless.pretrain import main
from skipless.ssl.dino.module import DINO
from tiny_runs import DINO_TINY


@pytest.mark.parametrize("per_device,global_batch,world,expected", [
    (128, 1024, 8, [64, 32]),      # 128 per device on 8 devices: 1024 / 8 = 128, its divisors below 128
    (64, 1024, 16, [32, 16]),
    (128, 1024, 1, [64, 32]),      # on one device the micro-batches of 1024 (accumulation)
    (48, 96, 1, [32, 24]),         # divisors of 96 below 48
    (64, None, 4, [32, 16]),       # no global batch: the halves
    (1, None, 1, []),
])
def test_smaller_micro_batches_keep_the_global_batch(per_device, global_batch, world, expected):
    found = smaller_batches(per_device, global_batch, world)
    assert found == expected
    assert all(global_batch is None or (global_batch // world) % b == 0 for b in found)


def test_an_out_of_memory_step_is_one_sentence_naming_the_micro_batch_and_those_that_would_fit(
        tmp_path, capsys, monkeypatch):
    def no_memory(self, batch, batch_idx):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(DINO, "training_step", no_memory)
    run = tmp_path / "runs" / "r"
    assert main([*DINO_TINY, f"data.root={tmp_path / 'data'}", f"run.root={tmp_path / 'runs'}", "run.name=r",
                 "train.global_batch=8"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "Traceback" not in "\n".join(err) and len([line for line in err if line.startswith("error:")]) == 1
    assert err[-1] == ("error: the training step ran out of GPU memory at train.batch_size_per_device=4 on the "
                       "device; expected a smaller micro-batch: train.batch_size_per_device=2 or 1 "
                       "(train.global_batch=8 stays, through accumulation on 1 device), or "
                       "model.grad_checkpointing=true (about a third more compute)")
    assert json.loads((run / "summary.json").read_text())["status"] == "failed"
    assert not (run / "run.lock").exists()
