"""The ``mae`` section of ``make bench``: MAE's training step (``skipless.ssl.mae``) on the DINO step's machinery.

Why: MAE is the suite's second pretraining method, and the seed's claims (Zhang et al., seeds/002) are
about a decayed encoder with U-Net skips. What that costs next to the plain encoder, the plain decoder
and DINO decides which runs fit a GPU budget. Each step is timed as the ``pretrain`` section times
DINO's (``pretrain_step.step_seconds``: one Lightning epoch on random images, so data loading is not
measured, bf16-mixed on a GPU and fp32 on a CPU, the median after the warm-up, and the fastest step),
its FLOPs counted as there (``flops.mae_step_flops``: 3 x forward), its rows printed by the suite's one
table writer. The ratios are of medians; where other jobs share the cores, the fastest steps (the ones
that ran alone) are the figures to compare.

Per encoder size, four steps, AdamW (the seed's optimizer):

- MAE, skip encoder, with the U-Net skips (the recipe's decoder);
- MAE, decayed encoder, with the U-Net skips (the seed's model): ``decayed_over_skip``, its step time
  over the skip encoder's (the decay is one scalar per shortcut: it should cost nothing);
- MAE, decayed encoder, without the U-Net skips: ``skips_over_none``, the step with the skips over
  the step without (what the skips cost);
- DINO, skip encoder of the same arch, its global crops at MAE's input size (its own recipe's crops,
  head and batch otherwise): ``mae_over_dino``, MAE's images/s over DINO's (both skip encoders).

Each ratio stands on the rows it compares (None on the others). Sizes: on a GPU the seed's (``mae-paper``: ViT-B/16 and
ViT-S/16, 224 px, 128 images per device, decoder 8 x 512 with the skips) and DINO at the ``pretrain``
section's GPU sizes (2x224 + 10x96, head 65,536, 64 per device); on a CPU the demos' (``mae-demo``:
ViT-Ti/16, 96 px, 64 images, decoder 4 x 128; DINO's demo, 2x96 + 4x48, 16 images). ``peak_memory_mb``
is the CUDA peak of the measured steps, None on a CPU (the process's resident peak says nothing of a
step); ``mfu`` None where no GPU peak is known (``flops.mfu_note``).
"""
from __future__ import annotations

from functools import partial

import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader, Dataset

from skipless.config import load_config
from skipless.pretrain import backbone_factory
from skipless.ssl import METHODS

from skipless.flops import mae_step_flops, mfu_note, utilisation
from .pretrain_step import (DINO_CPU_SIZES, DINO_GPU_SIZES, bench_pretrain_step, cuda_peak_mb, device_name,
                            step_counts, step_seconds)
from .table import markdown_table

# The MAE step's sizes: the seed's recipe on a GPU, one entry per encoder (overrides of load_config); the demo on a CPU.
MAE_GPU_SIZES = [["data=imagenet", "model.arch=vit_base"], ["data=imagenet", "model.arch=vit_small"]]
MAE_CPU_SIZES: list[list[str]] = [[]]
RATIOS = ("decayed_over_skip", "skips_over_none", "mae_over_dino")
COLUMNS = ["method", "model", "arch", "decoder", "unet_skips", "batch", "views", "step_s", "fastest_step_s",
           "images_per_s", *RATIOS, "gflop_per_image", "model_tflops_per_s", "mfu", "peak_memory_mb"]


class RandomImages(Dataset):
    """``n`` images of ``size`` px drawn from a per-index seed: the step without data loading."""

    def __init__(self, n: int, size: int) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randn(3, self.size, self.size, generator=torch.Generator().manual_seed(i))


def mae_config(model: str, overrides: list[str]) -> DictConfig:
    """The pretraining config of an MAE step (``ssl=mae``, AdamW); the recipe follows the data choice."""
    return load_config("pretrain", ["ssl=mae", f"model={model}", "optim=adamw", *overrides])


def dino_overrides(cfg: DictConfig, sizes: list[str]) -> list[str]:
    """DINO's ``sizes`` with the encoder arch of the MAE config ``cfg`` and its global crops at MAE's input size."""
    return [*sizes, f"model.arch={cfg.model.arch}", f"dino.global_crop_size={int(cfg.mae.input_size)}"]


def bench_mae_step(model: str, overrides: list[str], steps: int, warmup: int) -> dict:
    """One row: the median MAE step of ``model`` (an encoder group) at the sizes of ``overrides``."""
    cfg = mae_config(model, overrides)
    m, method = cfg.mae, METHODS["mae"]
    batch, size = int(cfg.train.batch_size_per_device), int(m.input_size)
    loader = DataLoader(RandomImages(batch * (steps + warmup), size), batch_size=batch, collate_fn=method.collate,
                        num_workers=2)
    step, fastest = step_seconds(method.module(cfg, partial(backbone_factory, cfg)), loader, warmup)
    return {"method": "mae", "model": model, "arch": str(cfg.model.arch),
            "decoder": f"{m.decoder.depth}x{m.decoder.dim}", "unet_skips": bool(m.unet_skips), "batch": batch,
            "views": f"1x{size}, mask {m.mask_ratio:g}", "step_s": step, "fastest_step_s": fastest,
            "images_per_s": batch / step, **utilisation(mae_step_flops(cfg), batch, step),
            "peak_memory_mb": cuda_peak_mb()}


def bench_dino_row(cfg: DictConfig, sizes: list[str], steps: int, warmup: int) -> dict:
    """DINO's step (skip, AdamW; ``pretrain_step.bench_pretrain_step``) at the encoder of the MAE config
    ``cfg``, as a row of this table (CUDA peak only)."""
    row = bench_pretrain_step("skip", "adamw", dino_overrides(cfg, sizes), steps, warmup)
    return {**row, "method": "dino", "arch": str(cfg.model.arch), "decoder": None, "unet_skips": None,
            "views": row["crops"], "peak_memory_mb": cuda_peak_mb()}


def encoder_rows(overrides: list[str], dino_sizes: list[str], steps: int, warmup: int) -> list[dict]:
    """The four steps of one encoder size (module docstring), each ratio on the rows it compares."""
    skip = bench_mae_step("skip", overrides, steps, warmup)
    decayed = bench_mae_step("decayed", [*overrides, "mae.unet_skips=true"], steps, warmup)
    bare = bench_mae_step("decayed", [*overrides, "mae.unet_skips=false"], steps, warmup)
    dino = bench_dino_row(mae_config("skip", overrides), dino_sizes, steps, warmup)
    for row in (skip, decayed, bare, dino):
        row.update(dict.fromkeys(RATIOS))  # None on the rows a ratio does not compare
    skip["decayed_over_skip"] = decayed["decayed_over_skip"] = decayed["step_s"] / skip["step_s"]
    decayed["skips_over_none"] = bare["skips_over_none"] = decayed["step_s"] / bare["step_s"]
    skip["mae_over_dino"] = dino["mae_over_dino"] = skip["images_per_s"] / dino["images_per_s"]
    return [skip, decayed, bare, dino]


def section_mae(quick: bool, *, sizes: list[list[str]] | None = None, dino_sizes: list[str] | None = None,
                steps: int | None = None, warmup: int | None = None) -> tuple[list[dict], str]:
    """The rows of every encoder size and the text to print; sizes and step counts are this device's
    (module docstring) unless given."""
    gpu = torch.cuda.is_available()
    sizes = sizes if sizes is not None else (MAE_GPU_SIZES if gpu else MAE_CPU_SIZES)
    dino_sizes = dino_sizes if dino_sizes is not None else (DINO_GPU_SIZES if gpu else DINO_CPU_SIZES)
    default_steps, default_warmup = step_counts(quick)
    steps, warmup = steps or default_steps, warmup or default_warmup
    rows = [row for overrides in sizes for row in encoder_rows(overrides, dino_sizes, steps, warmup)]
    text = (f"\nMAE training step on {device_name()} (AdamW; median of {steps} steps after {warmup}): "
            "decayed_over_skip and skips_over_none are step-time ratios, mae_over_dino an images/s ratio:\n"
            + markdown_table(rows, COLUMNS) + "\n" + mfu_note()
            + ("" if gpu else "\npeak_memory_mb: CUDA only, none on a CPU."))
    return rows, text
