"""Counts the calls that on a GPU make the host wait for the device (a host-device sync), so that a
CPU test can prove a loop makes none: nothing waits on the CPU, but the same calls are made.

Counted: a tensor's value read as a Python number or list (``item``, ``float()``, ``bool()``,
``int()``, ``tolist``) or moved to the host (``cpu``, ``numpy``); an op whose output size depends
on the values (``nonzero``, ``unique``, ``masked_select``, ``bincount``, indexing with a boolean
mask); a tensor made from Python data (``torch.tensor``, ``torch.as_tensor``: a blocking copy onto
the device, pytorch/pytorch#120996). Left out: calls made while a DataLoader fetches a batch (real
runs fetch in worker processes, on host data) and inside ``torch.optim`` (its optimizers keep their
step counts on the host unless ``capturable``, and read them there).
"""
from __future__ import annotations

import traceback
from collections import defaultdict
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch.overrides import TorchFunctionMode

READS = {"item", "__float__", "__bool__", "__int__", "__index__", "tolist", "cpu", "numpy",
         "nonzero", "argwhere", "unique", "_unique", "_unique2", "unique_consecutive", "masked_select", "bincount"}
FROM_HOST = {"tensor", "as_tensor"}


def _is_sync(name: str, args: tuple) -> bool:
    if name in READS:
        return True
    if name in FROM_HOST:
        return bool(args) and not isinstance(args[0], torch.Tensor)
    if name == "__getitem__" and len(args) > 1:
        index = args[1] if isinstance(args[1], tuple) else (args[1],)
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in index)
    return False


class HostReads(TorchFunctionMode):
    """``with HostReads() as reads:`` ... then ``reads.calls``: ``(label, what, where)`` of each counted
    call, ``label`` being ``reads.label`` when it was made (set it to bucket the calls, e.g. by step)."""

    def __init__(self) -> None:
        super().__init__()
        self.label = None
        self.calls: list[tuple[object, str, str]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if _is_sync(name, args):
            stack = traceback.extract_stack()[:-1]
            if not any("torch/utils/data" in f.filename or "torch/optim" in f.filename for f in stack):
                mine = [f for f in stack if "/torch/" not in f.filename and f.filename != __file__]
                self.calls.append((self.label, name, " < ".join(f"{Path(f.filename).name}:{f.lineno}"
                                                                for f in mine[-3:][::-1])))
        return func(*args, **(kwargs or {}))

    def by_label(self) -> dict[object, list[tuple[str, str]]]:
        out = defaultdict(list)
        for label, name, where in self.calls:
            out[label].append((name, where))
        return dict(out)


class LabelSteps(pl.Callback):
    """Labels the counted calls with the global step of the batch being trained, and keeps each step's
    returned loss tensor (unread)."""

    def __init__(self, reads: HostReads) -> None:
        self.reads, self.losses = reads, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.reads.label = trainer.global_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(outputs["loss"] if isinstance(outputs, dict) else outputs)
