"""A run's wall time in ``summary.json`` (training/run_summary.py): summed over resumes through the checkpoint,
with the hardware it ran on; seeds/003's Table 1 reads its days (configs/experiments/graying-eps.yaml)."""
import json
from types import SimpleNamespace

import torch

from skipless.training import run_summary
from skipless.training.run_summary import RunSummary


def _trainer(world: int = 1) -> SimpleNamespace:
    strategy = SimpleNamespace(root_device=torch.device("cpu"), reduce=lambda t, reduce_op: t)
    return SimpleNamespace(train_dataloader=None, strategy=strategy, is_global_zero=True, loggers=[], current_epoch=0,
                           global_step=5, max_epochs=2, callbacks=[], lightning_module=None, world_size=world)


def test_the_wall_time_is_summed_over_a_resume_up_to_each_checkpoint(tmp_path, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(run_summary, "monotonic", lambda: now[0])
    first = RunSummary(tmp_path)
    first.on_train_start(_trainer(), None)
    now[0] += 3600.0
    state = first.state_dict()  # a checkpoint after an hour; the run is stopped half an hour later
    now[0] += 1800.0
    resumed = RunSummary(tmp_path)
    resumed.load_state_dict(state)
    resumed.on_train_start(_trainer(world=8), None)
    now[0] += 7200.0
    resumed.on_train_end(_trainer(world=8), None)
    wall = json.loads((tmp_path / "summary.json").read_text())["wall"]
    assert wall == {"seconds": 10800.0, "hours": 3.0, "days": 0.125, "hardware": "8 x CPU"}


def test_a_checkpoint_without_the_wall_time_resumes_from_zero(tmp_path, monkeypatch):
    monkeypatch.setattr(run_summary, "monotonic", lambda: 50.0)
    summary = RunSummary(tmp_path)
    summary.load_state_dict({"skipped": [], "small": [], "small_reason": ""})
    summary.on_train_start(_trainer(), None)
    assert summary.wall_seconds() == 0.0 and summary.state_dict()["wall_seconds"] == 0.0
