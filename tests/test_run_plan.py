"""The run resolved once (``training/run_plan.py``): the plan's facts are the world's and the precision's,
it cannot be changed, and each entry point checks its config and makes its plan once per run."""
import dataclasses

import pytest
import torch

from skipless.config import load_config
from skipless.training import precision
from skipless.training.run_plan import RunPlan, plan_run, strategy_of, sync_batchnorm_of
from skipless.devices.world import devices_of, training_threads


@pytest.mark.parametrize("entry, overrides", [
    ("pretrain", []), ("pretrain", ["train.accelerator=cpu", "train.devices=2", "train.global_batch=256"]),
    ("train", ["train.num_nodes=2", "train.cpu_threads=3"])])
def test_the_plan_holds_what_the_world_and_the_precision_say(tmp_path, entry, overrides):
    cfg = load_config(entry, overrides)
    plan = plan_run(cfg, tmp_path / "run")
    assert (plan.devices, plan.nodes) == (devices_of(cfg), int(cfg.train.num_nodes))
    assert (plan.strategy, plan.sync_batchnorm, plan.threads) == (strategy_of(cfg), sync_batchnorm_of(cfg),
                                                                  training_threads(cfg))
    assert plan.described_precision == precision.describe_precision(cfg)
    assert plan.run_dir == tmp_path / "run" and not plan.run_dir.exists()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.devices = 8


@pytest.mark.parametrize("module_name, entry", [("skipless.pretrain", "pretrain"), ("skipless.train", "train")])
def test_an_entry_point_checks_its_config_and_plans_the_run_once(monkeypatch, tmp_path, module_name, entry):
    import importlib
    module = importlib.import_module(module_name)
    planned = []
    real = module.plan_run

    def counted(cfg, run_dir):
        planned.append(run_dir)
        return real(cfg, run_dir)

    class Started(Exception):
        pass

    def started(plan, *args):
        assert isinstance(plan if isinstance(plan, RunPlan) else args[0], RunPlan)
        raise Started

    monkeypatch.setattr(module, "plan_run", counted)
    monkeypatch.setattr(module, "run_pretraining" if entry == "pretrain" else "run_training", started)
    with pytest.raises(Started):
        module.main([f"run.root={tmp_path}"])
    assert len(planned) == 1
