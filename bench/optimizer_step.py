"""The ``optim`` section of ``make bench``: one optimizer step alone, per ``optim.implementation``.

The parameters are those of our DINO student at the issue's sizes (ViT-S/16 and DINO's head to
65,536 dimensions, in DINO's two param groups), with fixed random gradients; the step is timed after
``warmup`` steps (SOAP's first step only builds its factors and bases; its refreshes every
``precondition_frequency`` steps are inside the timed window, in proportion). Same numbers either way
(tests); this says which is faster on the machine, and how much of a training step the optimizer is.
"""
from __future__ import annotations

import time

import torch

from skipless.config import load_config
from skipless.optim import IMPLEMENTATIONS, optimizer_from_config
from skipless.optim.param_groups import param_groups
from skipless.pretrain import backbone_factory
from skipless.ssl.dino.module import DINO

from .table import markdown_table

COLUMNS = ["optim", "implementation", "params_m", "step_ms", "over_fastest_adamw"]


def _student(arch: str, out_dim: int, device: torch.device, overrides: list[str]) -> torch.nn.Module:
    cfg = load_config("pretrain", ["recipe=paper", f"model.arch={arch}", f"dino.out_dim={out_dim}", *overrides])
    return DINO(cfg, lambda rate: backbone_factory(cfg, rate)).student.to(device)


def step_time(optim: str, implementation: str, arch: str, out_dim: int, steps: int, warmup: int,
              device: torch.device, overrides: list[str] = ()) -> dict:
    """Median seconds of ``optimizer.step()`` over ``steps`` steps after ``warmup``."""
    torch.manual_seed(0)
    student = _student(arch, out_dim, device, list(overrides))
    cfg = load_config("pretrain", [f"optim={optim}", f"optim.implementation={implementation}"])
    opt = optimizer_from_config(cfg.optim, param_groups(student), lr=1e-4)
    gen = torch.Generator(device=device).manual_seed(1)
    for p in student.parameters():
        if p.requires_grad:
            p.grad = torch.randn(p.shape, generator=gen, device=device) * 1e-3
    times = []
    for i in range(warmup + steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    n = sum(p.numel() for p in student.parameters() if p.requires_grad)
    return {"optim": optim, "implementation": implementation, "arch": arch, "out_dim": out_dim,
            "params_m": n / 1e6, "step_ms": 1e3 * sorted(times)[len(times) // 2], "times_s": times}


def section_optim(quick: bool = False, *, arch: str = "vit_small", out_dim: int = 65536,
                  steps: int | None = None, overrides: list[str] = ()) -> tuple[list[dict], str]:
    """Rows for every optimizer x implementation, and the table to print (``overrides``: more config
    keys of the student, e.g. a smaller head for a test)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    steps = steps or (3 if quick else 10)
    rows = [step_time(o, impl, arch, out_dim, steps, warmup=2, device=device, overrides=overrides)
            for o, impls in IMPLEMENTATIONS.items() for impl in impls]
    fastest = min(r["step_ms"] for r in rows if r["optim"] == "adamw")
    for r in rows:
        r["over_fastest_adamw"] = r["step_ms"] / fastest
    text = (f"\noptimizer step alone ({arch} + DINO head to {out_dim}, {rows[0]['params_m']:.1f} M trained "
            f"parameters, median of {steps} steps):\n")
    return rows, text + markdown_table(rows, COLUMNS)
