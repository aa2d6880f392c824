"""How many processes a training run has, and whether they run on CUDA GPUs: the one reading of
``train.accelerator``, ``train.devices`` and ``train.num_nodes`` that the header, the lr rule, the
trainer and the resume check share.

``train.devices=auto`` means what it means to Lightning (``CUDAAccelerator.auto_device_count`` and
``CPUAccelerator.auto_device_count``): every GPU this process sees when the run goes on CUDA, one
process otherwise. It is resolved here, once, rather than refused, because a user who writes it
expects "all the GPUs of this machine", and the global batch, the peak lr and the schedules all
depend on the number it resolves to, so each reader must get the same number.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch


def runs_on_cuda(cfg: Mapping) -> bool:
    """The run trains on CUDA GPUs: ``accelerator`` cuda, or gpu / auto on a machine where CUDA is
    available (Lightning picks CUDA first for both)."""
    accelerator = cfg["train"]["accelerator"]
    return accelerator == "cuda" or (accelerator in ("gpu", "auto") and torch.cuda.is_available())


def devices_of(cfg: Mapping) -> int:
    """Processes per node: ``train.devices``, or on ``auto`` the visible GPUs of a CUDA run (else 1)."""
    devices = cfg["train"]["devices"]
    if devices != "auto":
        return int(devices)
    return max(1, torch.cuda.device_count()) if runs_on_cuda(cfg) else 1


def world_size(cfg: Mapping) -> int:
    """Processes the run trains with: devices per node x ``train.num_nodes``."""
    return devices_of(cfg) * int(cfg["train"]["num_nodes"])
