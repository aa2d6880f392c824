"""The ``end_to_end`` section of ``make bench``: DINO pretraining as a GPU machine runs it, over ImageNet-sized
JPEGs, with the time the step waits for the loader.

Issue 48's goal is a loader that keeps the step fed: at most 10% of the step spent waiting for data at 1,000
images/s or more (ViT-S/16 DINO, one GPU of a 16-core machine). The ``loader`` section times the loader alone;
this one runs the training itself (``skipless.pretrain.pretrain``: the training loader with its workers and
pinned memory, the method's transfer hook, the step, the logging) for each worker count and each
``data.augment_on`` path, and splits every step's cycle three ways (``DataWait``):

- ``wait``: from the end of the previous step to the start of this one, less the device's augmentation: the
  main process waiting for the loader's next batch (and Lightning's bookkeeping between steps, a few ms);
- ``augment``: the method's ``on_after_batch_transfer`` (DINO's colour ops, and the crops under
  ``device_crops``, on the device; nothing under ``workers``);
- ``step``: forward, backward and the optimizer step (``on_train_batch_start`` to ``on_train_batch_end``).

On a GPU each boundary synchronises the device, so each share is the device's time as well as the host's
(the synchronisation removes the overlap of the host's next fetch with the device's last kernels, so the
``wait`` share is an upper bound). ``data_wait_share`` = wait / (wait + augment + step), ``images_per_s`` =
the batch over the mean cycle, over ``steps`` steps after ``warmup``.

The images are ``natural_images.py``'s (the ``loader`` section's), ``images`` of them, linked under as many
names as the run reads (the reader sees distinct files; the page cache holds one copy) so that no epoch
boundary (the workers' restart) falls inside the measured steps. On a GPU: the paper's crops (2 x 224 + 10 x
96), batch 64, ViT-S/16, AdamW, bf16-mixed, 8 and 15 workers (a 16-core machine less the main process); on a
CPU: the same at batch 16 with 0 and 1 workers, and ``--quick`` smaller still (a smoke run, not a measure).
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import lightning.pytorch as pl
import torch

from skipless.config import load_config
from skipless.pretrain import pretrain

from .natural_images import ensure_natural_jpegs
from .table import markdown_table

COLUMNS = ["augment_on", "num_workers", "batch", "steps", "wait_ms", "augment_ms", "step_ms", "data_wait_share",
           "images_per_s"]
PATHS = ("workers", "device", "device_crops")
GPU_SIZES = ["dino.global_crop_size=224", "dino.local_crop_size=96", "dino.local_crops_number=10",
             "dino.out_dim=65536", "train.batch_size_per_device=64", "train.precision=bf16-mixed"]
CPU_SIZES = ["train.batch_size_per_device=16"]
QUICK_SIZES = ["train.batch_size_per_device=2", "dino.global_crop_size=32", "dino.local_crop_size=16",
               "dino.local_crops_number=2", "dino.out_dim=256", "model.arch=vit_tiny", "model.depth=2"]
# The run itself: no k-NN monitor, diagnostics, exports or checkpoints inside the measured steps.
QUIET = ["train.global_batch=null", "train.knn_every_n_epochs=0",
         "diagnostics.every_n_epochs=0", "diagnostics.signals_every_n_steps=0", "train.keep_checkpoints=false"]


class DataWait(pl.Callback):
    """Each step's cycle split into the wait for the loader, the device's augmentation and the step (module
    docstring); the first ``warmup`` steps are not kept."""

    def __init__(self, warmup: int) -> None:
        self.warmup = warmup
        self.wait: list[float] = []
        self.augment: list[float] = []
        self.step: list[float] = []
        self._end: float | None = None
        self._augment = 0.0
        self._start = 0.0

    @staticmethod
    def _now() -> float:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        transfer = pl_module.on_after_batch_transfer

        def timed_transfer(batch, dataloader_idx):
            start = self._now()
            out = transfer(batch, dataloader_idx)
            self._augment = self._now() - start
            return out

        pl_module.on_after_batch_transfer = timed_transfer  # Lightning looks the hook up on the instance

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = self._now()
        if self._end is not None and batch_idx > self.warmup:
            self.wait.append(max(self._start - self._end - self._augment, 0.0))
            self.augment.append(self._augment)
        self._augment = 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._end = self._now()
        if batch_idx > self.warmup:
            self.step.append(self._end - self._start)


def linked_images(folder: Path, sources: list[Path], count: int) -> Path:
    """``count`` names in ``folder`` linked to ``sources`` in turn (a symlink each)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        link = folder / f"{i:06d}.jpg"
        if not link.exists():
            link.symlink_to(sources[i % len(sources)].resolve())
    return folder


def end_to_end_row(root: Path, images: Path, augment_on: str, workers: int, steps: int, warmup: int,
                   overrides: list[str]) -> dict:
    """One pretraining run of ``warmup + steps + 1`` steps (the first cycle has no previous end), its cycle
    split (``DataWait``)."""
    name = f"e2e-{augment_on}-w{workers}"
    cfg = load_config("pretrain", ["data=imagenet", f"data.root={images}", f"run.root={root}", f"run.name={name}",
                                   *QUIET, *overrides, f"data.augment_on={augment_on}",
                                   f"train.num_workers={workers}", f"train.max_steps={warmup + steps + 1}"])
    timer = DataWait(warmup)
    pretrain(cfg, extra_callbacks=[timer])
    batch = int(cfg.train.batch_size_per_device)
    n = len(timer.step)
    wait, augment, step = (1000 * sum(v) / max(len(v), 1) for v in (timer.wait, timer.augment, timer.step))
    cycle = wait + augment + step
    return {"augment_on": augment_on, "num_workers": workers, "batch": batch, "steps": n, "wait_ms": wait,
            "augment_ms": augment, "step_ms": step, "data_wait_share": wait / cycle if cycle else None,
            "images_per_s": 1000 * batch / cycle if cycle else None}


def section_end_to_end(quick: bool = False, *, cache: str | Path = "bench/cache", workers: list[int] | None = None,
                       paths: tuple[str, ...] = PATHS, steps: int | None = None, warmup: int | None = None,
                       overrides: list[str] | None = None, image_size: tuple[int, int] | None = None
                       ) -> tuple[dict, str]:
    """The section's rows (module docstring) and the text to print; the keyword arguments are a test's or
    the GPU check's smaller settings."""
    gpu = torch.cuda.is_available()
    workers = workers or ([8, 15] if gpu else [0, 1])
    steps = steps or (10 if quick else 40 if gpu else 6)
    warmup = warmup if warmup is not None else (2 if quick else 10 if gpu else 2)
    sizes = GPU_SIZES if gpu else QUICK_SIZES if quick else CPU_SIZES
    overrides = [*sizes, *(overrides or [])]
    batch = int(load_config("pretrain", overrides).train.batch_size_per_device)
    sources = ensure_natural_jpegs(cache, 8 if quick else 256, 0, image_size)
    rows = []
    with tempfile.TemporaryDirectory(prefix="skipless-e2e-") as tmp:
        images = linked_images(Path(tmp) / "images", sources, batch * (warmup + steps + 2))
        for path in paths:
            for w in workers:
                rows.append(end_to_end_row(Path(tmp) / "runs", images, path, w, steps, warmup, overrides))
    result = {"device": torch.cuda.get_device_name() if gpu else "cpu", "cores": len(os.sched_getaffinity(0)),
              "images": len(sources), "overrides": overrides, "rows": rows}
    return result, section_text(result)


def section_text(r: dict) -> str:
    return "\n".join([f"\nDINO pretraining end to end on {r['device']} ({r['cores']} cores; {r['images']} natural "
                      f"JPEGs, linked to fill the run; {' '.join(r['overrides'])}): the step's cycle split into the "
                      f"wait for the loader, the device's augmentation and the step",
                      markdown_table(r["rows"], COLUMNS)])
