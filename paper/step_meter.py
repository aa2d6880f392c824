"""A training job of the pre-flight, measured: ``python paper/step_meter.py <entry> <meter.json> key=value ...``
(by its path: the pre-flight runs it in its own folder, where the checkout is not on the path; it imports only
``skipless``).

It runs the entry point's own ``main`` (``skipless.pretrain``, ``skipless.train`` or ``skipless.lm``) with the same
overrides, adding one callback, ``StepMeter``, which writes ``meter.json``: each optimizer step's
seconds and images, and the memory each step added.

What is measured, per step: the time from Lightning's ``on_train_batch_start`` to its
``on_train_batch_end`` (forward, loss, backward, the optimizer step and what the method does in its
training step, DINO's teacher update included; not the wait for the next batch), the device synchronised
at both ends; and the memory: on a GPU ``torch.cuda.max_memory_allocated`` during the step minus
``memory_allocated`` at its start (the peak statistic reset there), on a CPU the process's resident set
likewise (Linux: its high-water mark reset through ``/proc/self/clear_refs`` at the step's start, read
from ``/proc/self/status`` at its end). The difference is what the step needed beyond what it started
with. From the second step on, the weights, the optimizer state and the previous step's gradients (freed
by Lightning's ``zero_grad`` only after the forward pass) are already there when it starts, so the
difference is the activations, the part that grows with the batch; the first step's also holds the
optimizer state and gradients it creates. On a CPU the allocator must give freed memory back to the
system for the start to be low: the pre-flight runs its jobs with a fixed ``MALLOC_MMAP_THRESHOLD_``
(``preflight.py``).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import lightning.pytorch as pl
import torch

from skipless import lm, pretrain, train
from skipless.training.micro_batches import MicroBatches

ENTRIES = {"pretrain": pretrain.main, "train": train.main, "lm": lm.main}
PROC = Path("/proc/self")


def batch_images(batch: Any) -> int:
    """The images of a batch: the first dimension of its first tensor (DINO: a list of crops, each
    ``(B, 3, H, W)``; supervised: ``(images, labels)``; MAE: images; the language model: ``(B, context + 1)``
    token windows, so its "images" are sequences), summed over the micro-batches of an accumulated step
    (``MicroBatches``)."""
    if isinstance(batch, MicroBatches):
        return sum(batch_images(part) for part in batch)
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, (list, tuple)) and batch:
        return batch_images(batch[0])
    if isinstance(batch, dict) and batch:
        return batch_images(next(iter(batch.values())))
    return 0


def _status_kb(field: str) -> int | None:
    """A ``VmRSS`` / ``VmHWM`` line of ``/proc/self/status`` in kB; None where there is none (not Linux)."""
    try:
        for line in (PROC / "status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class StepMeter(pl.Callback):
    """Times every optimizer step and the memory it added (module docstring); writes ``path`` at the end
    of the fit, also when it fails."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.steps: list[dict[str, Any]] = []
        self._start = 0.0
        self._base = 0

    def _cuda(self, pl_module: pl.LightningModule) -> bool:
        return pl_module.device.type == "cuda"

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self._cuda(pl_module):
            torch.cuda.synchronize(pl_module.device)
            torch.cuda.reset_peak_memory_stats(pl_module.device)
            self._base = torch.cuda.memory_allocated(pl_module.device)
        else:
            try:
                (PROC / "clear_refs").write_text("5")  # resets VmHWM to the current VmRSS (Linux 4.0+)
            except OSError:
                pass
            self._base = (_status_kb("VmRSS") or 0) * 1024
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._cuda(pl_module):
            torch.cuda.synchronize(pl_module.device)
            peak = torch.cuda.max_memory_allocated(pl_module.device)
        else:
            peak = (_status_kb("VmHWM") or 0) * 1024
        seconds = time.perf_counter() - self._start
        self.steps.append({"step": trainer.global_step, "seconds": seconds, "images": batch_images(batch),
                           "memory_start_bytes": self._base, "memory_peak_bytes": peak,
                           "memory_added_bytes": max(0, peak - self._base)})

    def _write(self, trainer: pl.Trainer) -> None:
        if not trainer.is_global_zero:
            return
        device = "cuda" if torch.cuda.is_available() and trainer.strategy.root_device.type == "cuda" else "cpu"
        memory = "torch.cuda.max_memory_allocated" if device == "cuda" else "resident set (VmHWM - VmRSS)"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"device": device, "memory": memory, "steps": self.steps}, indent=1) + "\n")

    def on_fit_end(self, trainer, pl_module) -> None:
        self._write(trainer)

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._write(trainer)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 2 or argv[0] not in ENTRIES:
        print(f"error: usage: python paper/step_meter.py {'|'.join(ENTRIES)} <meter.json> key=value ...",
              file=sys.stderr)
        return 2
    entry, path, overrides = argv[0], argv[1], argv[2:]
    return ENTRIES[entry](overrides, extra_callbacks=[StepMeter(path)])


if __name__ == "__main__":
    sys.exit(main())
