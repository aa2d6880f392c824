"""The monitors of a run give the training's random generators back untouched, the GPU's included (issue 34).

A GPU run draws on the GPU (MAE's masks, DINO's drop-path). ``torch.manual_seed`` reseeds every CUDA
generator, so a monitor that seeded inside a CPU-only fork restarted those draws from seed 0 at every start
and every resume. These tests run on any machine: they stand a recorded generator in for the GPU's (the
functions ``torch.manual_seed`` and ``torch.random.fork_rng`` call) and check which generators the
monitor leaves changed.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from skipless.training.callbacks import KNNMonitor
from skipless.devices.world import isolated_rng


@pytest.fixture
def fake_gpu_generator(monkeypatch):
    """The state of a stand-in CUDA generator, as ``torch.manual_seed`` and ``fork_rng`` reach it."""
    gen = SimpleNamespace(state=torch.tensor([1234]), reads=0)

    def get_state(device="cuda"):
        gen.reads += 1
        return gen.state.clone()

    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: setattr(gen, "state", torch.tensor([int(seed)])))
    monkeypatch.setattr(torch.cuda, "get_rng_state", get_state)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": setattr(gen, "state", state.clone()))
    return gen


def test_a_seed_inside_the_isolation_reaches_neither_the_cpu_nor_the_gpu_generator(fake_gpu_generator):
    cpu_before = torch.get_rng_state()
    with isolated_rng(torch.device("cuda", 0)):
        torch.manual_seed(0)
        assert fake_gpu_generator.state.item() == 0  # the seed did reach the GPU's generator inside
    assert fake_gpu_generator.state.item() == 1234 and torch.equal(torch.get_rng_state(), cpu_before)


def test_on_a_cpu_device_the_gpu_generators_are_not_opened(fake_gpu_generator):
    with isolated_rng("cpu"):
        torch.rand(3)
    assert fake_gpu_generator.reads == 0  # no CUDA context opened for a CPU run


class _StaysPut(nn.Linear):
    """A random backbone whose ``.to(cuda)`` is a no-op, so the monitor's start runs on a machine without a GPU."""

    def to(self, *args, **kwargs):
        return self


def test_the_knn_monitors_start_leaves_a_gpu_runs_generators_as_they_were(fake_gpu_generator, monkeypatch):
    """The monitor seeds 0 to build the random floor at every train start (also after a resume): on a GPU run
    the GPU's generator, which draws MAE's masks, must come out as it went in."""
    monitor = KNNMonitor(lambda: [], lambda: [], random_backbone=lambda: _StaysPut(2, 2))
    monkeypatch.setattr(monitor, "_score", lambda backbone, device: 0.5)
    module = SimpleNamespace(device=torch.device("cuda", 0),
                             exported_backbone=lambda: SimpleNamespace(skipless_args={"arch": "vit_tiny"}))
    trainer = SimpleNamespace(is_global_zero=True, loggers=[], global_step=0)
    cpu_before = torch.get_rng_state()
    monitor.on_train_start(trainer, module)
    assert monitor.random_accuracy == 0.5
    assert fake_gpu_generator.state.item() == 1234, "the monitor's seed reached the GPU's generator"
    assert torch.equal(torch.get_rng_state(), cpu_before)
