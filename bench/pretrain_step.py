"""The ``pretrain`` and ``init`` sections of ``make bench``: a DINO training step, and conditioning at init.

``pretrain``: images/s, step time and peak memory of a full DINO training step (student on all
crops, teacher on the globals, loss, backward, clipping, optimizer, EMA) for skip vs skipless and
AdamW vs SOAP, on random crops so that data loading is not measured; achieved TFLOP/s and model
FLOP utilisation where the GPU's peak is known (``flops.py``: the FLOPs of student and teacher, heads
and attention products included, training counted as 3 x forward; the peak by the GPU's name).
``peak_memory_mb`` is the CUDA peak of the step on a GPU; on a CPU it is the process's peak resident
memory so far (rows run in order, so it only grows).
``init``: attention conditioning at initialisation (the paper's Proposition 1) on ViT-S.
"""
from __future__ import annotations

import platform
import resource
import time
from functools import partial

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, Dataset

from skipless.analysis.attention_conditioning import attention_condition_numbers, gaussian_tokens
from skipless.config import load_config
from skipless.flops import dino_step_flops, utilisation
from skipless.models import create_vit
from skipless.pretrain import backbone_factory
from skipless.ssl.dino.module import DINO
from skipless.ssl.dino.self_distillation import collate_multicrop
from skipless.training.precision import plugin_for


def device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


class RandomCrops(Dataset):
    """Random multi-crop views of the right sizes: the step is measured without data loading."""

    def __init__(self, n: int, global_size: int, local_size: int, n_local: int) -> None:
        self.n, self.g, self.l, self.k = n, global_size, local_size, n_local

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        gen = torch.Generator().manual_seed(i)
        return ([torch.randn(3, self.g, self.g, generator=gen) for _ in range(2)]
                + [torch.randn(3, self.l, self.l, generator=gen) for _ in range(self.k)])


class StepTimer(pl.Callback):
    def __init__(self, warmup: int) -> None:
        self.warmup, self.times, self._t0 = warmup, [], 0.0

    def _sync(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if batch_idx == self.warmup and torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        self._sync()
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._sync()
        if batch_idx >= self.warmup:
            self.times.append(time.perf_counter() - self._t0)


def bench_pretrain_step(model: str, optim: str, overrides: list[str], steps: int, warmup: int) -> dict:
    cfg = load_config("pretrain", [f"model={model}", f"optim={optim}", *overrides])
    d = cfg.dino
    batch = cfg.train.batch_size_per_device
    data = RandomCrops(batch * (steps + warmup), d.global_crop_size, d.local_crop_size, d.local_crops_number)
    loader = DataLoader(data, batch_size=batch, collate_fn=collate_multicrop, num_workers=2)
    module = DINO(cfg, partial(backbone_factory, cfg))
    step, fastest = step_seconds(module, loader, warmup)
    return {
        "model": model, "optim": optim, "batch": batch, "crops": f"2x{d.global_crop_size} + "
        f"{d.local_crops_number}x{d.local_crop_size}", "step_s": step, "fastest_step_s": fastest,
        "images_per_s": batch / step,
        **utilisation(dino_step_flops(cfg), batch, step), "peak_memory_mb": memory_mb(),
    }


# The DINO step's sizes: on a GPU the paper's recipe (ViT-S/16, 2x224 + 10x96 crops, 64 images per GPU), on
# a CPU the demo's of data/default.yaml at batch 16. The mae section times DINO at these too.
DINO_GPU_SIZES = ["data=imagenet", "dino.global_crop_size=224", "dino.local_crop_size=96",
                  "dino.local_crops_number=10", "dino.out_dim=65536", "train.batch_size_per_device=64"]
DINO_CPU_SIZES = ["train.batch_size_per_device=16"]


def step_counts(quick: bool) -> tuple[int, int]:
    """(measured steps, warm-up steps) of a step section on this device."""
    if torch.cuda.is_available():
        return (10, 5) if quick else (30, 10)
    return (3, 1) if quick else (6, 2)


MODEL_OPTIMS = ("skip:adamw", "skip:soap", "skipless:adamw", "skipless:soap")


def section_pretrain(quick: bool, batches: list[int] | None = None, compiles: list[str] | None = None,
                     rows: list[str] | None = None) -> list[dict]:
    """DINO's step for each ``model:optim`` of ``rows`` (default ``MODEL_OPTIMS``), at each per-device batch of
    ``batches`` (default: the sizes' 64 on a GPU, 16 on a CPU) and each ``train.compile`` setting of
    ``compiles`` (default: ``false``); dynamo starts afresh for every compiled row, whose ``wall_s``, the row's
    whole time, then includes its compilation."""
    import torch._dynamo

    overrides = DINO_GPU_SIZES if torch.cuda.is_available() else DINO_CPU_SIZES
    steps, warmup = step_counts(quick)
    out = []
    for batch in batches or [None]:
        for setting in compiles or ["false"]:
            for pair in rows or MODEL_OPTIMS:
                model, optim = pair.split(":")
                torch._dynamo.reset()
                start = time.perf_counter()
                row = bench_pretrain_step(model, optim, [*overrides, *([f"train.batch_size_per_device={batch}"]
                                                                       if batch else []),
                                                         f"train.compile={setting}"], steps, warmup)
                out.append({**row, "compile": setting, "wall_s": time.perf_counter() - start})
    return with_ratios(out)


def with_ratios(rows: list[dict]) -> list[dict]:
    """Adds each row's step-time ratios SOAP / AdamW (same model), skipless / skip (same optimizer) and
    compiled / eager (same model and optimizer), within one batch and compile setting; None where the
    other row was not measured."""
    by = {(r["batch"], r.get("compile", "false"), r["model"], r["optim"]): r for r in rows}

    def ratio(a: tuple, b: tuple) -> float | None:
        return by[a]["step_s"] / by[b]["step_s"] if a in by and b in by else None

    for r in rows:
        b, c, m, o = r["batch"], r.get("compile", "false"), r["model"], r["optim"]
        r["soap_over_adamw"] = ratio((b, c, m, "soap"), (b, c, m, "adamw"))
        r["skipless_over_skip"] = ratio((b, c, "skipless", o), (b, c, "skip", o))
        r["compiled_over_eager"] = None if c == "false" else ratio((b, c, m, o), (b, "false", m, o))
    return rows


def step_seconds(module: pl.LightningModule, loader: DataLoader, warmup: int) -> tuple[float, float]:
    """(median, fastest) seconds of ``module``'s training steps over one epoch of ``loader`` after ``warmup``
    steps (``bench_trainer``, ``StepTimer``): the one timing every step section of the bench uses. The
    median is the figure; the fastest is the step that ran alone where other jobs share the cores."""
    timer = StepTimer(warmup)
    bench_trainer(timer).fit(module, loader)
    times = sorted(timer.times)
    return times[len(times) // 2], times[0]


def cuda_peak_mb() -> float | None:
    """The CUDA peak of the measured steps (``StepTimer`` resets it after the warm-up); None on a CPU."""
    return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None


def memory_mb() -> float:
    """The CUDA peak of the measured steps on a GPU; the process's peak resident memory on a CPU."""
    peak = cuda_peak_mb()
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_trainer(timer: StepTimer) -> pl.Trainer:
    """One epoch on one device, bf16-mixed on a GPU and fp32 on a CPU, nothing written."""
    gpu = torch.cuda.is_available()
    return pl.Trainer(accelerator="gpu" if gpu else "cpu", devices=1,
                      plugins=[plugin_for("bf16-mixed", "cuda") if gpu else plugin_for("32-true", "cpu")], max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, callbacks=[timer])


def section_init() -> dict:
    out = {}
    for init in ("timm", "cutskip"):
        torch.manual_seed(0)
        r = attention_condition_numbers(create_vit("vit_small", residual="skipless", init=init, depth=1),
                                        gaussian_tokens(197, 384))
        out[init] = {"median_condition": r["median_condition"], "mean_diagonal": r["mean_diagonal"]}
    return out
