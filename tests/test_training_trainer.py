"""The shared trainer's choices: precision, devices and strategy on ``auto``, SyncBatchNorm under DDP."""
import math

import pytest
import torch

from skipless.config import load_config
from skipless.reports.summary import peak_lr
from skipless.training import precision, run_plan, trainer
from skipless.devices.world import world_size


@pytest.mark.parametrize("gpu,capability,native_bf16,expected", [
    (True, (9, 0), False, "bf16-mixed"),   # H100
    (True, (8, 0), True, "bf16-mixed"),    # A100
    (True, (7, 0), False, "16-mixed"),     # V100: fp16 with loss scaling
    (True, (7, 5), True, "16-mixed"),      # T4
    (False, None, False, "32-true"),       # an AVX2-only CPU
    (False, None, True, "32-true"),       # a CPU with AVX512-BF16 or AMX: fp32 on every CPU kind
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
    """On a CPU, auto picks fp32 whatever the CPU kind (one result everywhere); on a GPU it never stays in fp32."""
    for native in (False, True):
        assert precision.cpu_precision(native)[0] == "32-true"
    monkeypatch.setattr(precision.torch.cuda, "is_available", lambda: False)
    cfg = load_config("pretrain", ["train.accelerator=cuda"])
    monkeypatch.setattr(precision.torch.cuda, "get_device_capability", lambda *a: (8, 6))
    assert precision.choose_precision(cfg)[0] == "bf16-mixed"


@pytest.mark.parametrize("devices,nodes,expected", [(1, 1, "auto"), (2, 1, "ddp"), (1, 2, "ddp")])
def test_auto_strategy_is_ddp_with_more_than_one_process(devices, nodes, expected):
    cfg = load_config("train", [f"train.devices={devices}", f"train.num_nodes={nodes}"])
    assert run_plan.strategy_of(cfg) == expected


def _gpus(monkeypatch, count: int) -> None:
    """This process sees ``count`` CUDA devices (none: no CUDA)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))  # for auto's precision


@pytest.mark.parametrize("gpus,accelerator,world", [(4, "auto", 4), (4, "gpu", 4), (4, "cpu", 1), (0, "auto", 1)])
def test_auto_devices_are_every_visible_gpu_of_a_gpu_run_else_one(monkeypatch, gpus, accelerator, world):
    _gpus(monkeypatch, gpus)
    for entry in ("pretrain", "train"):
        cfg = load_config(entry, ["train.devices=auto", f"train.accelerator={accelerator}", "train.num_nodes=2"])
        assert world_size(cfg) == 2 * world
        assert run_plan.strategy_of(cfg) == "ddp"
        assert math.isclose(peak_lr(cfg), peak_lr(cfg, 2 * world))


def _trainer_args(monkeypatch, tmp_path, *overrides: str) -> dict:
    """The arguments ``build_trainer`` gives Lightning's Trainer for a pretraining config."""
    monkeypatch.setattr(trainer.pl, "Trainer", lambda **args: args)
    return trainer.build_trainer(run_plan.plan_run(load_config("pretrain", list(overrides)), tmp_path))


@pytest.mark.parametrize("gpus,overrides,devices,strategy,sync", [
    (4, ["train.devices=auto"], 4, "ddp", True),
    (2, ["train.devices=2"], 2, "ddp", True),
    (2, ["train.devices=1", "train.num_nodes=2"], 1, "ddp", True),
    (2, ["train.devices=1"], 1, "auto", False),
    (0, ["train.devices=auto"], 1, "auto", False),
    (0, ["train.devices=2", "train.accelerator=cpu"], 2, "ddp", False),  # torch's SyncBatchNorm is GPU-only
])
def test_the_trainer_gets_the_resolved_devices_and_sync_batchnorm_under_gpu_ddp(monkeypatch, tmp_path, gpus,
                                                                                   overrides, devices, strategy, sync):
    _gpus(monkeypatch, gpus)
    args = _trainer_args(monkeypatch, tmp_path, *overrides)
    chosen = args["strategy"] if isinstance(args["strategy"], str) else type(args["strategy"]).__name__
    assert (args["devices"], chosen, args["sync_batchnorm"]) == (devices, {"ddp": "DDPStrategy"}.get(strategy, strategy),
                                                                 sync)
    if chosen == "DDPStrategy":  # with the key's timeout (tests/test_cluster_runs.py)
        assert args["strategy"]._timeout.total_seconds() == 30 * 60


def test_devices_auto_trains_on_the_cpu(tmp_path):
    """It used to pass the schema and then stop on int('auto')."""
    from skipless.pretrain import pretrain, run_dir_of
    from tiny_runs import DINO_TINY

    cfg = load_config("pretrain", [*DINO_TINY, f"data.root={tmp_path / 'data'}", f"run.root={tmp_path / 'runs'}",
                                   "train.devices=auto", "train.accelerator=cpu"])
    done, _ = pretrain(cfg)
    assert done.world_size == 1 and done.global_step == 2
    assert (run_dir_of(cfg) / "checkpoints" / "last.ckpt").is_file()


def test_a_batchnorm_head_under_cpu_ddp_is_refused_in_one_sentence(monkeypatch, tmp_path):
    from skipless.config import ConfigError
    from skipless.pretrain import check_config

    _gpus(monkeypatch, 0)
    bn = ["dino.use_bn_in_head=true", f"run.root={tmp_path}", "train.accelerator=cpu"]
    with pytest.raises(ConfigError, match=r"^dino\.use_bn_in_head=true with 2 CPU processes .* SyncBatchNorm runs on "
                                          r"GPUs only; expected one process on the CPU .* or dino\.use_bn_in_head=false$"):
        check_config(load_config("pretrain", [*bn, "train.devices=2"]))
    check_config(load_config("pretrain", [*bn, "train.devices=1"]))  # one process: nothing to synchronise
    check_config(load_config("pretrain", [f"run.root={tmp_path}", "train.devices=2", "train.accelerator=cpu"]))
    _gpus(monkeypatch, 2)
    check_config(load_config("pretrain", [*bn[:-1], "train.devices=2"]))  # GPUs: SyncBatchNorm


@pytest.mark.parametrize("entry", ["pretrain", "train"])
def test_gpus_the_machine_does_not_show_are_one_sentence_and_cpu_ddp_is_asked_for_by_name(monkeypatch, tmp_path,
                                                                                         capsys, entry):
    """GPUS=2 without two visible GPUs used to train two CPU processes with the lr of their global batch."""
    import importlib

    main = importlib.import_module(f"skipless.{entry}").main
    check_config = importlib.import_module(f"skipless.{entry}").check_config
    runs = tmp_path / "runs"
    for gpus, shown in ((0, "none; run it where GPUs are visible"), (1, "only 1; expected GPUS= at most 1")):
        _gpus(monkeypatch, gpus)
        assert main([f"run.root={runs}", "train.devices=2"]) == 1
        err = capsys.readouterr().err.strip()
        assert err == (f"error: GPUS=2 (train.devices=2, train.accelerator=auto) asks for 2 GPUs and this machine "
                       f"shows {shown}" + err.split(shown, 1)[1])
        assert err.endswith('or ask for processes on the CPU by name with ARGS="train.accelerator=cpu '
                            'train.devices=2" (nothing was written)') and len(err.splitlines()) == 1
        assert not runs.exists()
    _gpus(monkeypatch, 0)
    assert main([f"run.root={runs}", "train.devices=1", "train.accelerator=gpu"]) == 1
    assert "asks for 1 GPU and this machine shows none" in capsys.readouterr().err
    for allowed in (["train.devices=2", "train.accelerator=cpu"], ["train.devices=1"], ["train.devices=auto"]):
        check_config(load_config(entry, [f"run.root={runs}", *allowed]))  # CPU DDP by name; one process on auto
    _gpus(monkeypatch, 2)
    check_config(load_config(entry, [f"run.root={runs}", "train.devices=2"]))


def test_the_layer_sync_lightning_applies_keeps_the_dino_module_as_it_was():
    """What ``sync_batchnorm`` does to a BatchNorm head (Lightning's ``TorchSyncBatchNorm``, run by DDP's
    setup): every BatchNorm becomes a SyncBatchNorm holding the same parameters (the EMA teacher update
    still pairs them) under the same state-dict names, with the same outputs in one process."""
    from functools import partial

    from lightning.pytorch.plugins.layer_sync import TorchSyncBatchNorm

    from skipless.pretrain import backbone_factory
    from skipless.ssl.dino.module import DINO
    from tiny_runs import DINO_TINY

    cfg = load_config("pretrain", [*DINO_TINY, "dino.use_bn_in_head=true"])
    module = DINO(cfg, partial(backbone_factory, cfg))
    crops = [torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    params, keys = list(module.parameters()), list(module.state_dict())
    with torch.no_grad():
        before = module.student(crops), module.teacher(crops)
    TorchSyncBatchNorm().apply(module)
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert len(norms) == 4 and all(isinstance(m, torch.nn.SyncBatchNorm) for m in norms)  # 2 per head
    assert all(a is b for a, b in zip(params, module.parameters(), strict=True)) and list(module.state_dict()) == keys
    with torch.no_grad():
        torch.testing.assert_close((module.student(crops), module.teacher(crops)), before, rtol=0, atol=0)
