"""The ``profile`` section of ``make bench``: where the time of our DINO step goes, by torch.profiler.

Our step (``skipless.ssl.dino.module.DINO`` under ``Trainer.fit``, fp32 on the CPU) at the sizes of the
``official`` section, profiled on the CPU; its parts are the ``record_function`` ranges the module
opens (``dino_module.RANGES``), the optimizer's own ``Optimizer.step#...`` range inside ours, and the
DataLoader's ``enumerate(DataLoader)...`` range. A step is the time from one ``on_train_batch_end``
to the next (Lightning's loop, hooks and the next batch's fetch included, as in the official
section); what no range covers is Lightning's overhead. The profiler slows small operators, so the
shares matter here, not the absolute times (``official`` times the step without it).
"""
from __future__ import annotations

from functools import partial

import lightning.pytorch as pl
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from skipless.pretrain import backbone_factory
from skipless.ssl.dino.module import DINO, RANGES

from .side_by_side import cpu_trainer, loaders, our_config, sizes
from .table import markdown_table

MARK = "bench.batch_end"
# The table's rows, in the order of a step; "Lightning overhead" is the rest of the step.
CATEGORIES = ("data loading", "teacher backbone forward", "teacher head forward", "student backbone forward",
              "student head forward", "loss", "backward", "gradient clipping", "optimizer step", "center update",
              "EMA update", "logging (self.log)", "Lightning overhead")


class Marks(pl.Callback):
    """A zero-length profiler range at the end of every batch: the step boundaries on the profiler's clock."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        with record_function(MARK):
            pass


def _inside(inner: tuple[float, float], outers: list[tuple[float, float]]) -> bool:
    return any(a <= inner[0] and inner[1] <= b for a, b in outers)


def _total(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def breakdown(events, steps: int, warmup: int) -> dict:
    """Seconds per step of each category, over the ``steps`` steps after ``warmup`` (profiler events)."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for e in events:
        name = e.name
        key = ("data" if name.startswith("enumerate(DataLoader)") else "optimizer_step"
               if name.startswith("Optimizer.step#") else name)
        spans.setdefault(key, []).append((e.time_range.start, e.time_range.end))
    marks = sorted(a for a, _ in spans.get(MARK, []))
    if len(marks) < warmup + steps:
        raise RuntimeError(f"{len(marks)} steps profiled, {warmup + steps} needed")
    windows = list(zip(marks[warmup - 1:warmup + steps - 1], marks[warmup:warmup + steps]))

    def within(key: str) -> list[tuple[float, float]]:
        return [s for s in spans.get(key, []) if _inside(s, windows)]

    def nested(key: str, parent: str) -> list[tuple[float, float]]:
        return [s for s in within(key) if _inside(s, within(parent))]

    r = RANGES
    optimizer = nested("optimizer_step", r["optimizer"]) or within(r["optimizer"])
    us = {"data loading": _total(within("data")),
          "teacher backbone forward": _total(nested(r["backbone"], r["teacher"])),
          "teacher head forward": _total(nested(r["head"], r["teacher"])),
          "student backbone forward": _total(nested(r["backbone"], r["student"])),
          "student head forward": _total(nested(r["head"], r["student"])),
          "loss": _total(within(r["loss"])), "backward": _total(within(r["backward"])),
          "gradient clipping": _total(within(r["clip"])), "optimizer step": _total(optimizer),
          "center update": _total(within(r["center"])), "EMA update": _total(within(r["ema"])),
          "logging (self.log)": _total(within(r["log"]))}
    step_us = _total(windows)
    us["Lightning overhead"] = step_us - sum(us.values())
    return {"step_s": step_us / steps / 1e6, "seconds": {k: us[k] / steps / 1e6 for k in CATEGORIES},
            "share": {k: us[k] / step_us for k in CATEGORIES}}


def profile_ours(model: str = "skip", optim: str = "adamw", size: dict | None = None, steps: int = 3,
                 warmup: int = 1) -> dict:
    """Profile ``warmup`` + ``steps`` of our steps; the breakdown of the last ``steps``."""
    if warmup < 1:
        raise ValueError("warmup must be at least 1: a step starts at the end of the one before")
    size = size or sizes()
    cfg = our_config(model, optim, size)
    ours_loader, _ = loaders(size, warmup + steps)
    torch.manual_seed(0)
    module = DINO(cfg, partial(backbone_factory, cfg))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        cpu_trainer([Marks()]).fit(module, ours_loader)
    r = breakdown(prof.events(), steps, warmup)
    return {"model": model, "optim": optim, "batch": size["batch"], "steps": steps,
            "crops": f"2x{size['global_size']} + {size['n_local']}x{size['local_size']}", **r}


def section_profile(quick: bool = False, size: dict | None = None, steps: int | None = None,
                    warmup: int | None = None) -> tuple[dict, str]:
    """The breakdown of our skip + AdamW step (the configuration the official code trains) and its table."""
    r = profile_ours(size=size, steps=steps or (2 if quick else 3), warmup=warmup or 1)
    rows = [{"part": k, "seconds_per_step": r["seconds"][k], "share_percent": 100 * r["share"][k]}
            for k in CATEGORIES]
    text = (f"\nwhere our DINO step goes ({r['model']} + {r['optim']}, batch {r['batch']}, {r['crops']}, fp32 "
            f"on the CPU, {torch.get_num_threads()} threads, torch.profiler; {r['step_s']:.3g} s per step "
            f"under the profiler, mean of {r['steps']}):\n")
    return r, text + markdown_table(rows, ["part", "seconds_per_step", "share_percent"])
