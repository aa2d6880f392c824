"""The training loops wait for the device only where Lightning logs (every ``train.log_every_n_steps``):
every other step reads nothing back to the host and copies nothing onto the device (issue 26, item 14).

Counted on the CPU with ``host_reads.HostReads``: the calls that would sync on a GPU are the same."""
import json
from pathlib import Path

import pytest
import torch

from host_reads import HostReads, LabelSteps
from skipless.config import load_config
from skipless.pretrain import pretrain
from skipless.train import train
from tiny_runs import DINO_TINY, SUP_TINY

EVERY = 4  # train.log_every_n_steps of these runs: 8 steps (32 images, 4 a batch), logged after steps 3 and 7


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


@pytest.mark.parametrize("entry,run,tiny", [
    ("pretrain", pretrain, DINO_TINY), ("train", train, SUP_TINY),
    ("pretrain", pretrain, [*DINO_TINY, "data.augment_on=device"]),  # issue 48: the colour ops on the device
    ("pretrain", pretrain, [*DINO_TINY, "data.augment_on=device_crops"]),  # and the crops: boxes read on the host
], ids=["dino", "supervised", "dino-colour-on-device", "dino-crops-on-device"])
def test_only_logging_steps_and_epoch_ends_wait_for_the_device(tmp_path, data_root, entry, run, tiny):
    cfg = load_config(entry, [*tiny, "data.n_train=32", f"train.log_every_n_steps={EVERY}",
                              f"data.root={data_root}", f"run.root={tmp_path}"])
    reads = HostReads()
    steps = LabelSteps(reads)
    with reads:
        trainer, _ = run(cfg, extra_callbacks=[steps])
    by_step = reads.by_label()
    assert len(steps.losses) == 8
    # step 0 registers Lightning's logged values (and a pretraining logs its crops once)
    quiet = [s for s in range(1, 8) if (s + 1) % EVERY]
    assert {s: by_step[s] for s in quiet if s in by_step} == {}
    assert by_step.get(EVERY - 1)  # the logging step reads: the counter does see them
    # the run summary read its final loss once, at the end, and it is the last step's
    summary = json.loads((Path(trainer.default_root_dir) / "summary.json").read_text())
    assert summary["final_loss"] == pytest.approx(float(steps.losses[-1]), rel=1e-6)
    assert summary["final_loss"] != pytest.approx(float(steps.losses[-2]), rel=1e-6)


def test_the_counter_sees_each_kind_of_sync():
    """The counter's own check: each call it must count is counted, device-side arithmetic is not."""
    x = torch.arange(6.0)
    with HostReads() as reads:
        y = (x * 2).sum() + torch.full((), 1.0)  # stays on the device
        assert reads.calls == []
        float(y), y.item(), bool(y > 0), x.tolist(), x.nonzero(), x[x > 2], torch.tensor(3.0)
    assert [name for _, name, _ in reads.calls] == ["__float__", "item", "__bool__", "tolist", "nonzero",
                                                    "__getitem__", "tensor"]
