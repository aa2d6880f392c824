"""A training step that does not fit the GPU's memory, said in one sentence with the batches that would fit.

The per-device batch is the micro-batch (``train.batch_size_per_device``); ``train.global_batch``, where set,
stays what it is through accumulation (``devices/world.py``), so a smaller micro-batch changes the speed, not
the run. What a card holds, measured (``docs/results.md``, the GPU checks; bf16-mixed, AdamW): DINO ViT-S/16 at
2 x 224 + 10 x 96 crops peaks at 9.8 GB with 64 images, 18.8 GB with 128, 36.7 GB with 256 (SOAP: 10.6 GB
with 64); MAE's ViT-B/16 with 128 images at 8.5 GB. ``OutOfDeviceMemory`` turns torch's out-of-memory
error into that sentence: the batch it happened at, the card's memory and the peak reached, the smaller
micro-batches that keep the global batch on this many devices, and gradient checkpointing.
"""
from __future__ import annotations

from typing import Mapping

import torch

from ..errors import SkiplessError
from .world import world_size


class OutOfDeviceMemory(SkiplessError, RuntimeError):
    """A training step needed more GPU memory than the device has; the message says what would fit."""


def smaller_batches(per_device: int, global_batch: int | None, world: int, count: int = 2) -> list[int]:
    """Up to ``count`` micro-batches below ``per_device``, largest first: those dividing the images per device
    of ``global_batch``, or without one the halves (``per_device // 2``, ``// 4`` ...)."""
    if not global_batch:
        return [b for b in (per_device >> i for i in range(1, count + 1)) if b >= 1]
    share = global_batch // world
    return [b for b in range(min(per_device - 1, share), 0, -1) if share % b == 0][:count]


def device_words(device: torch.device | None = None) -> str:
    """``cuda:0 (NVIDIA H100 80GB HBM3, 79.1 GB; the step's peak 76.5 GB)``, or less where CUDA cannot say."""
    if not torch.cuda.is_available():
        return "the device"
    index = torch.cuda.current_device() if device is None or device.index is None else device.index
    total = torch.cuda.get_device_properties(index).total_memory / 1e9
    peak = torch.cuda.max_memory_allocated(index) / 1e9
    return f"cuda:{index} ({torch.cuda.get_device_name(index)}, {total:.1f} GB; the step's peak {peak:.1f} GB)"


def out_of_memory(cfg: Mapping, world: int | None = None, device: torch.device | None = None) -> OutOfDeviceMemory:
    """The one sentence for a step that ran out of GPU memory under ``cfg`` (module docstring)."""
    train = cfg["train"]
    per_device = int(train["batch_size_per_device"])
    global_batch = None if train["global_batch"] is None else int(train["global_batch"])
    world = world or world_size(cfg)
    fits = smaller_batches(per_device, global_batch, world)
    keeps = (f" (train.global_batch={global_batch} stays, through accumulation on {world} device"
             f"{'s' if world > 1 else ''})" if global_batch else "")
    smaller = (f"train.batch_size_per_device={' or '.join(map(str, fits))}{keeps}, or " if fits else "")
    return OutOfDeviceMemory(
        f"the training step ran out of GPU memory at train.batch_size_per_device={per_device} on "
        f"{device_words(device)}; expected a smaller micro-batch: {smaller}model.grad_checkpointing=true (about "
        f"a third more compute)")
