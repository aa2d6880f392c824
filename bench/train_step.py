"""The ``train`` section of ``make bench``: a supervised training step (forward, cross-entropy,
backward, optimizer) for skip vs skipless and AdamW vs SOAP, the same table as DINO's step.

Random images and labels, so data loading is not measured. On a GPU the paper's Section 6.1 sizes
(ViT-B/16, 224 px, 64 images per GPU, bf16-mixed); on a CPU the demo's (``recipe/supervised-demo.yaml``:
ViT-Ti, 96 px, batch 64, fp32). Mixup/cutmix are off in both: they cost nothing on the model.
"""
from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset

from skipless.config import load_config
from skipless.supervised.classifier import Supervised

from skipless.flops import supervised_step_flops, utilisation
from .pretrain_step import memory_mb, step_seconds, with_ratios

NUM_CLASSES = 1000


class RandomLabelled(Dataset):
    """``(image, label)`` pairs drawn from a per-index seed."""

    def __init__(self, n: int, size: int) -> None:
        self.n, self.size = n, size

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        gen = torch.Generator().manual_seed(i)
        return torch.randn(3, self.size, self.size, generator=gen), int(torch.randint(NUM_CLASSES, (1,), generator=gen))


def bench_train_step(model: str, optim: str, overrides: list[str], steps: int, warmup: int) -> dict:
    cfg = load_config("train", [f"model={model}", f"optim={optim}", "aug.mixup=0", "aug.cutmix=0", *overrides])
    batch, size = int(cfg.train.batch_size_per_device), int(cfg.aug.image_size)
    loader = DataLoader(RandomLabelled(batch * (steps + warmup), size), batch_size=batch, num_workers=2)
    step, fastest = step_seconds(Supervised(cfg, NUM_CLASSES), loader, warmup)
    return {"model": model, "optim": optim, "arch": cfg.model.arch, "batch": batch, "image_px": size,
            "step_s": step, "fastest_step_s": fastest, "images_per_s": batch / step,
            **utilisation(supervised_step_flops(cfg, NUM_CLASSES), batch, step), "peak_memory_mb": memory_mb()}


def section_train(quick: bool) -> list[dict]:
    if torch.cuda.is_available():  # the paper's supervised sizes (Section 6.1)
        overrides = ["dataset=imagenet", "train.batch_size_per_device=64"]
        steps, warmup = (10, 5) if quick else (30, 10)
    else:  # the CPU demo's sizes
        overrides = []
        steps, warmup = (3, 1) if quick else (8, 2)
    return with_ratios([bench_train_step(m, o, overrides, steps, warmup)
                        for m in ("skip", "skipless") for o in ("adamw", "soap")])
