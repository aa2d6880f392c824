"""The shared trainer's choices: precision and strategy on ``auto``."""
import pytest

from skipless.config import load_config
from skipless.training import precision, trainer


@pytest.mark.parametrize("gpu,capability,native_bf16,expected", [
    (True, (9, 0), False, "bf16-mixed"),   # H100
    (True, (8, 0), True, "bf16-mixed"),    # A100
    (True, (7, 0), False, "16-mixed"),     # V100: fp16 with loss scaling
    (True, (7, 5), True, "16-mixed"),      # T4
    (False, None, False, "32-true"),       # an AVX2-only CPU
    (False, None, True, precision.cpu_precision(True)[0]),  # a CPU with AVX512-BF16 or AMX
])
def test_auto_precision_follows_the_hardware(monkeypatch, gpu, capability, native_bf16, expected):
    """``auto``'s choice on every kind of machine, with the capability checks faked."""
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(precision.torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native_bf16)
    for entry in ("pretrain", "train"):
        chosen, why = precision.choose_precision(load_config(entry))
        assert chosen == expected and why.startswith("auto: " + ("GPU" if gpu else "CPU"))
        assert precision.choose_precision(load_config(entry, ["train.precision=32-true"])) == \
            ("32-true", "set by train.precision")
        plugin, described = precision.precision_plugin(load_config(entry))
        assert described == f"{chosen} ({why})"
        assert isinstance(plugin, precision.StepOutsideAutocast) == (chosen in precision.MIXED)
        assert (getattr(plugin, "scaler", None) is not None) == (chosen == "16-mixed")


def test_the_cpu_never_gets_fp16_by_auto_nor_gpus_fp32(monkeypatch):
    """On a CPU, auto never picks 16-mixed (no fp16 kernels worth it); on a GPU it never leaves fp32."""
    for native in (False, True):
        assert precision.cpu_precision(native)[0] in ("32-true", "bf16-mixed")
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: False)
    cfg = load_config("pretrain", ["train.accelerator=gpu"])
    monkeypatch.setattr(precision.torch.cuda, "get_device_capability", lambda *a: (8, 6))
    assert precision.choose_precision(cfg)[0] == "bf16-mixed"


@pytest.mark.parametrize("devices,nodes,expected", [(1, 1, "auto"), (2, 1, "ddp"), (1, 2, "ddp")])
def test_auto_strategy_is_ddp_with_more_than_one_process(devices, nodes, expected):
    cfg = load_config("train", [f"train.devices={devices}", f"train.num_nodes={nodes}"])
    assert trainer.strategy_of(cfg) == expected
