"""The evaluators' ``device`` setting: a name torch knows, on hardware this process sees, or one sentence."""
import pytest
import torch

from skipless.eval.shared import devices
from skipless.eval.shared.devices import resolve_device
from skipless.config import ConfigError


def _gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(devices.torch.cuda, "device_count", lambda: count)


def test_a_visible_gpu_resolves(monkeypatch):
    _gpus(monkeypatch, 2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda")
    assert resolve_device("auto") == torch.device("cuda")


@pytest.mark.parametrize("count,name,expected", [(2, "cuda:3", r"sees 2 GPUs .*expected cuda:0 to cuda:1, cuda or auto$"),
                                                 (2, "cuda:2", r"sees 2 GPUs"),
                                                 (1, "cuda:1", r"sees 1 GPU .*expected cuda:0, cuda or auto$")])
def test_a_gpu_index_beyond_the_visible_ones_is_refused_in_one_sentence(monkeypatch, count, name, expected):
    _gpus(monkeypatch, count)
    with pytest.raises(ConfigError, match=rf"^device '{name}' was asked for but this process {expected}"):
        resolve_device(name)


def test_cuda_without_cuda_and_unknown_names_are_refused(monkeypatch):
    _gpus(monkeypatch, 0)
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        resolve_device("cuda:0")
    with pytest.raises(ConfigError, match="is not a device name"):
        resolve_device("gpu0")
