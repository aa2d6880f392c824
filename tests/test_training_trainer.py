"""The shared trainer's choices: precision and strategy on ``auto``."""
import pytest

from skipless.config import load_config
from skipless.training import trainer


@pytest.mark.parametrize("gpu,native_bf16,expected", [(True, False, "bf16-mixed"), (False, True, "bf16-mixed"),
                                                      (False, False, "32-true")])
def test_auto_precision_is_bf16_only_where_it_runs_natively(monkeypatch, gpu, native_bf16, expected):
    monkeypatch.setattr(trainer.torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(trainer, "cpu_has_native_bf16", lambda: native_bf16)
    for entry in ("pretrain", "train"):
        assert trainer.precision_of(load_config(entry)) == expected
        assert trainer.precision_of(load_config(entry, ["train.precision=32-true"])) == "32-true"


@pytest.mark.parametrize("devices,nodes,expected", [(1, 1, "auto"), (2, 1, "ddp"), (1, 2, "ddp")])
def test_auto_strategy_is_ddp_with_more_than_one_process(devices, nodes, expected):
    cfg = load_config("train", [f"train.devices={devices}", f"train.num_nodes={nodes}"])
    assert trainer.strategy_of(cfg) == expected
