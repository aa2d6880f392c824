"""Which device an evaluator runs on: ``device: auto | cpu | cuda | cuda:1`` of every evaluator config."""
from __future__ import annotations

import torch

from skipless.config import ConfigError


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> CUDA when present, else the CPU; anything else is passed to ``torch.device``.

    Raises:
        ConfigError: a name torch does not know, CUDA asked for on a machine without it, or a GPU index
            this process does not see (``cuda:3`` with two visible GPUs would fail later with a raw CUDA error).
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ConfigError(f"device {name!r} is not a device name; expected auto, cpu, cuda or cuda:<n> ({err})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} was asked for but CUDA is not available; use device=cpu or auto")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        valid = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
        raise ConfigError(f"device {name!r} was asked for but this process sees {count} GPU{'s' * (count != 1)} "
                          f"(numbered from 0 within CUDA_VISIBLE_DEVICES); expected {valid}, cuda or auto")
    return device
