"""Python numbers logged every step (the schedules' lr, weight decay, ...) made device scalars without
a host-device sync.

Lightning turns a number given to ``self.log`` into ``torch.tensor(value, device=module.device)``: a
blocking copy from host memory, which on a GPU first waits for every kernel queued before it
(pytorch/pytorch#120996), once per value and step. ``torch.full`` writes the value with a kernel
instead, queued behind the others like any of them.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch


def device_scalars(values: Mapping[str, float], device: torch.device) -> dict[str, torch.Tensor]:
    """``values`` as float32 0-d tensors on ``device`` (Lightning logs float32 too)."""
    return {name: torch.full((), float(v), dtype=torch.float32, device=device) for name, v in values.items()}
