"""The ``compile`` section of ``make bench``: a backbone's forward + backward, eager against compiled.

ViT-S/16 with drop-path 0.1 (the DINO student), 8 images at 224 px on a CPU (fp32), 64 in bf16
autocast on a GPU. Three ways: eager; each block compiled (``compile_blocks``, the evaluators' way);
the whole backbone compiled (``compile_in_place``, ``train.compile``). The first call's seconds
include the compilation; then the median of ``steps`` steps.
"""
from __future__ import annotations

import time
from contextlib import nullcontext

import torch

from skipless.models import create_vit
from skipless.models.compile import compile_blocks, compile_in_place

from .table import markdown_table

COLUMNS = ["way", "arch", "batch", "image_px", "first_call_s", "step_s", "over_eager", "graphs"]
WAYS = {"eager": lambda m: None, "blocks compiled": lambda m: compile_blocks(m, True),
        "whole backbone compiled": lambda m: compile_in_place([m], True)}


def compile_row(way: str, arch: str, batch: int, size: int, steps: int, device: torch.device,
                depth: int | None = None) -> dict:
    import torch._dynamo
    import torch._dynamo.utils

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    model = create_vit(arch, residual="skip", drop_path_rate=0.1, **({"depth": depth} if depth else {})).to(device)
    WAYS[way](model)
    x = torch.randn(batch, 3, size, size, device=device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()

    def step() -> float:
        start = time.perf_counter()
        with autocast:
            loss = model(x).float().pow(2).mean()
        loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    first = step()
    times = sorted(step() for _ in range(steps))
    return {"way": way, "arch": arch, "batch": batch, "image_px": size, "first_call_s": first,
            "step_s": times[len(times) // 2], "graphs": int(torch._dynamo.utils.counters["stats"]["unique_graphs"]),
            "times_s": times}


def section_compile(quick: bool = False, *, arch: str = "vit_small", size: int = 224, batch: int | None = None,
                    steps: int | None = None, depth: int | None = None) -> tuple[list[dict], str]:
    """Rows for the three ways, and the table (``depth``: fewer blocks, for a test)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    batch = batch or (64 if device.type == "cuda" else 8)
    steps = steps or (2 if quick else 5)
    rows = [compile_row(way, arch, batch, size, steps, device, depth) for way in WAYS]
    for r in rows:
        r["over_eager"] = r["step_s"] / rows[0]["step_s"]
    text = (f"\nbackbone forward + backward, eager against compiled ({device.type}, "
            f"{'bf16 autocast' if device.type == 'cuda' else 'fp32'}, median of {steps} steps after the first):\n")
    return rows, text + markdown_table(rows, COLUMNS)
