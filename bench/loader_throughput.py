"""The ``loader`` section of ``make bench``: can the pretraining loader feed the step?

The loader of a pretraining run (``training/data.py``: the multi-crop augmentation of the images of
``data.root``, DINO's collate, pinned memory on a GPU) at the run's sizes, for a few worker counts,
in images per second after its first batch (the workers' start-up, paid once per epoch because
workers are not persistent, is reported apart). Against it, the demand: the images per second of the
fastest training step of the ``pretrain`` section when it ran in the same ``make bench``.
``loader_over_demand`` above 1: the loader keeps up. On a CPU the loader's workers share the cores
with the step, so a ratio near 1 there means it does not.

Sizes: on a GPU the paper's crops (2 x 224 + 10 x 96, 64 images per batch, ``train.num_workers`` of
the paper recipe), on a CPU the demo's (``configs/recipe/dino-demo.yaml``), both over the embedded default
images (generated on first use, as ``make pretrain`` does).
"""
from __future__ import annotations

import time

import torch

from skipless.config import load_config
from skipless.ssl import method_of
from skipless.training.data import pretrain_dataset, pretrain_loader

from .table import markdown_table

COLUMNS = ["recipe", "crops", "batch", "num_workers", "startup_s", "images_per_s", "demand_images_per_s",
           "loader_over_demand"]
# global_batch null: one loader batch is 64 images (the paper recipe's 1024 would deal 16 x 64 per step)
GPU_SIZES = ["recipe=paper", "data=default", "dino.global_crop_size=224", "dino.local_crop_size=96",
             "dino.local_crops_number=10", "train.batch_size_per_device=64", "train.global_batch=null"]


def loader_row(overrides: list[str], num_workers: int, batches: int) -> dict:
    """Images/s of the run's loader with ``num_workers`` workers over ``batches`` batches after the first."""
    cfg = load_config("pretrain", [*overrides, f"train.num_workers={num_workers}"])
    method = method_of(cfg)  # DINO's multi-crop views and collate (the sizes below are DINO's keys)
    loader = pretrain_loader(cfg, pretrain_dataset(cfg, method.transform(cfg)), method.collate)
    batch, d = int(cfg.train.batch_size_per_device), cfg.dino
    start = time.perf_counter()
    it = iter(loader)
    next(it)
    first = time.perf_counter()
    n = 0
    for _ in range(min(batches, len(loader) - 1)):
        next(it)
        n += 1
    end = time.perf_counter()
    del it
    return {"recipe": cfg.choices.recipe, "crops": f"2x{d.global_crop_size} + {d.local_crops_number}x{d.local_crop_size}",
            "batch": batch, "num_workers": num_workers, "startup_s": first - start,
            "images_per_s": n * batch / (end - first), "batches": n}


def section_loader(quick: bool = False, demand: float | None = None, *, overrides: list[str] | None = None,
                   batches: int | None = None) -> tuple[list[dict], str]:
    """Rows for 0, 1 and the configured number of workers; ``demand``: the step's images/s, if known."""
    gpu = torch.cuda.is_available()
    overrides = list(GPU_SIZES if gpu and overrides is None else overrides or [])
    batches = batches or (5 if quick else 20)
    configured = int(load_config("pretrain", overrides).train.num_workers)
    rows = [loader_row(overrides, w, batches) for w in sorted({0, 1, configured})]
    for r in rows:
        r["demand_images_per_s"] = demand
        r["loader_over_demand"] = r["images_per_s"] / demand if demand else None
    text = (f"\npretraining loader ({'GPU machine, the paper' if gpu else 'CPU, the demo'}'s crops, "
            f"{batches} batches after the first; demand: the fastest step of the pretrain section"
            f"{'' if demand else ', not run here'}):\n")
    return rows, text + markdown_table(rows, COLUMNS)
