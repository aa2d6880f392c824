"""The ``variants`` section of ``make bench``: what the neighbouring architectures cost per training step.

A supervised step (``train_step.py``'s, at its sizes: ViT-Ti at 96 px on a CPU, ViT-B at 224 px on a
GPU) of the skip model with softmax attention, linear attention (seeds/003) and OSA (seeds/004), and
with SVD and DCT token graying (seeds/003, whose Table 1 reports, for ViT-B on ImageNet, 4.55 days
with SVD and 0.73 with DCT against 0.72 without: 6.3x and 1.01x); ``over_softmax`` is each step's
time over the plain softmax step. Beside it, the graying alone on one batch of images.
"""
from __future__ import annotations

import time

import torch

from skipless.config import load_config
from skipless.models.token_graying import gray_images

from .train_step import bench_train_step

VARIANTS = {
    "softmax": [],
    "linear": ["model.attention=linear"],
    "osa": ["model.attention=osa", "model.init=osa"],
    "softmax + svd graying": ["model.token_graying.method=svd"],
    "softmax + dct graying": ["model.token_graying.method=dct"],
}


def graying_alone(batch: int, size: int, patch: int, repeats: int) -> list[dict]:
    """Seconds of ``gray_images`` on one batch, each method (median of ``repeats``)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    images = torch.randn(batch, 3, size, size, device=device)
    rows = []
    for method in ("svd", "dct"):
        times = []
        for _ in range(repeats + 1):
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            gray_images(images, patch, method, 0.95)
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        rows.append({"method": method, "batch": batch, "image_px": size, "seconds": sorted(times[1:])[repeats // 2]})
    return rows


def section_variants(quick: bool, *, variants: dict[str, list[str]] = VARIANTS, overrides: list[str] | None = None,
                     steps: int | None = None, warmup: int | None = None) -> tuple[dict, str]:
    """Rows of the step table and of the graying alone, and the text to print (sizes: the arguments
    when given, else the paper's on a GPU and the CPU demo's)."""
    gpu = torch.cuda.is_available()
    if overrides is None:
        overrides = ["dataset=imagenet", "train.batch_size_per_device=64"] if gpu else []
    default_steps = ((10, 5) if quick else (30, 10)) if gpu else ((2, 1) if quick else (6, 2))
    steps, warmup = steps or default_steps[0], warmup or default_steps[1]
    rows = []
    for name, keys in variants.items():
        row = bench_train_step("skip", "adamw", [*overrides, *keys], steps, warmup)
        rows.append({"variant": name, **row})
    base = rows[0]["step_s"]  # the first variant is the plain one
    for r in rows:
        r["over_softmax"] = r["step_s"] / base
    cfg = load_config("train", overrides)
    alone = graying_alone(int(cfg.train.batch_size_per_device), int(cfg.aug.image_size), int(cfg.model.patch_size),
                          3 if quick else 10)
    from .table import markdown_table
    text = ("\nthe neighbouring architectures, one supervised step (skip model, AdamW; seeds/003 Table 1: SVD "
            "graying 6.3x, DCT 1.01x a ViT-B step):\n"
            + markdown_table(rows, ["variant", "arch", "batch", "image_px", "step_s", "images_per_s", "over_softmax",
                                    "peak_memory_mb"])
            + "\n\ntoken graying alone, one batch:\n" + markdown_table(alone, ["method", "batch", "image_px", "seconds"]))
    return {"steps": rows, "graying_alone": alone}, text
