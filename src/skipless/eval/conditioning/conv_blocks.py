"""``make conditioning`` on convolutional backbones: each block's Jacobian with and without its shortcut.

    make conditioning CKPT="runs/sup-resnet-decayed-... runs/sup-resnet-..." ARGS="layers=all"

For a ResNet (seeds/002 Fig. 4: decayed shortcuts) or a ConvMixer (seeds/003 App. B, Fig. 6: with and without
its skips), ``kappa`` of each block's Jacobian at one image's features, ``branch`` (the residual branch alone)
and ``block`` (with the shortcut the model has, at its gain): ``skipless.analysis.conv_block_conditioning``,
whose docstring says where each map is read and why. The ViT's other measures (the network Jacobian, the
sub-block embeddings, the class-token rank) read ViT tokens and are not taken here; ``make train
ARGS="diagnostics.rank_images=N"`` measures a CNN's effective rank.

Writes ``<run>/eval/conditioning.json`` per backbone, TensorBoard scalars against depth, and
``conditioning.md`` / ``conditioning.png`` (blocks x checkpoints) beside it, or in ``runs/compare/`` for several.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from skipless.analysis.condition_number import Condition, Solver, dense_condition, unconverged_note
from skipless.analysis.conv_block_conditioning import (MAPS, ConvBlockCondition, block_inputs, conv_block_conditions,
                                                       conv_block_jacobian_dense)
from skipless.analysis.diagnostics import DTYPES, diagnosed_blocks
from skipless.analysis.jacobians import check_dense_size
from skipless.analysis.solve_budget import SolveBudget
from skipless.analysis.tensorboard_values import drawn_value
from skipless.errors import SkiplessError
from skipless.models.timm_family import feature_blocks

from ..shared.backbones import BackboneSpec
from ..shared.report import markdown_table, shown_args, write_text
from ..shared.tb_events import event_writer
from .outputs import report_folder, save_record

MEASURED = "blocks"  # the one entry of conditioning.yaml's measures a CNN takes


class ConvConditioningError(SkiplessError, ValueError):
    """Settings the conditioning of CNN blocks cannot use."""


def check_conv_backbone(model: torch.nn.Module, spec: BackboneSpec, cfg: DictConfig) -> list[int]:
    """What depends on the backbone, before any measurement: its blocks and the dense check's size."""
    depth = len(feature_blocks(model))
    try:
        blocks = diagnosed_blocks(OmegaConf.to_container(cfg.layers) if OmegaConf.is_list(cfg.layers) else cfg.layers,
                                  depth)
    except ValueError as e:
        raise ConvConditioningError(f"{e} in {spec.name}; layers=all or layers=paper reads a CNN's blocks") from None
    if cfg.dense_check:
        size = int(cfg.image_size)
        inputs = block_inputs(model.eval(), torch.zeros(1, 3, size, size), blocks)
        for i, x in inputs.items():
            check_dense_size(x.numel(), x.numel(), int(cfg.dense_max_entries),
                             f"image_size for {spec.name}'s block {i} (dense_check=false keeps the matrix-free value)")
    return blocks


def check_conv_settings(cfg: DictConfig) -> None:
    """The settings that have no meaning for a CNN, refused before anything is loaded."""
    if MEASURED not in cfg.measures:
        raise ConvConditioningError(
            f"measures={list(cfg.measures)} has no {MEASURED!r}, the one measure of a CNN backbone (each block's "
            "Jacobian with and without its shortcut); expected measures=[blocks]")
    if cfg.spectrum:
        raise ConvConditioningError("spectrum=true draws a ViT's attention and MLP Jacobian spectra; expected "
                                    "spectrum=false for a CNN backbone")


def _skipped(cfg: DictConfig) -> str:
    others = [m for m in cfg.measures if m != MEASURED]
    return ("" if not others else f"; {', '.join(others)} read ViT tokens and are not taken for a CNN "
            "(make train ARGS=\"diagnostics.rank_images=N\" measures its effective rank)")


def write_tensorboard(result: dict[int, ConvBlockCondition], folder: Path) -> None:
    """``conditioning/kappa_branch`` and ``kappa_block`` against depth (step = block index); ∞ and Lanczos bounds
    under their own tags, as for a ViT (``skipless.analysis.tensorboard_values``)."""
    with event_writer(folder, "conditioning") as writer:
        for i, c in result.items():
            for name in MAPS:
                tag, value = drawn_value(f"conditioning/kappa_{name}", getattr(c, name))
                writer.add_scalar(tag, value, i)


def _cell(c: Condition) -> str:
    return "∞" if c.reason is not None else c.terse()


def table(results: list[tuple[str, dict[int, ConvBlockCondition]]]) -> str:
    """Rows: checkpoint x (with, without the shortcut); columns: blocks; the gains under them."""
    blocks = sorted({b for _, r in results for b in r})
    rows = []
    for name, r in results:
        for which, label in (("block", "block (g s + f)"), ("branch", "branch (f)")):
            rows.append([f"{name} {label}"] + [_cell(getattr(r[b], which)) if b in r else None for b in blocks])
        rows.append([f"{name} gain g"] + [f"{r[b].gain:.3g}" + (" (proj.)" if r[b].projection else "")
                                          if b in r else None for b in blocks])
    conditions = [getattr(c, m) for _, r in results for c in r.values() for m in MAPS]
    reasons = sorted({c.reason for c in conditions if c.reason is not None})
    return ("### kappa of each block's Jacobian at its input, with the model's shortcut (block) and without it "
            "(branch)\n\n" + markdown_table(["checkpoint"] + [f"B{b}" for b in blocks], rows)
            + "\nA ResNet block is read before its last ReLU; a ConvMixer layer's skip surrounds its depthwise "
              "convolution, GELU and BatchNorm, which are what is measured (skipless/analysis/"
              "conv_block_conditioning.py). (proj.): the shortcut is the stage's 1 x 1 projection.\n"
            + "".join(f"∞: {reason}.\n" for reason in reasons) + unconverged_note(conditions))


def figure(results: list[tuple[str, dict[int, ConvBlockCondition]]], path: Path) -> Path:
    """kappa against block, one colour per checkpoint, solid with the shortcut and dashed without (∞: a triangle
    on the top edge; a Lanczos lower bound: an open marker)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.4, 3.8))
    for name, r in results:
        xs = sorted(r)
        colour = None
        for which, style in (("block", "-"), ("branch", "--")):
            cs = [getattr(r[b], which) for b in xs]
            finite = [(x, c) for x, c in zip(xs, cs) if math.isfinite(c.value)]
            line, = ax.plot([x for x, _ in finite], [c.value for _, c in finite], style, marker="o", color=colour,
                            label=f"{name}, {which}")
            colour = line.get_color()
            bounds = [(x, c.value) for x, c in finite if not c.converged]
            if bounds:
                ax.plot(*zip(*bounds), marker="o", linestyle="none", markerfacecolor="white", color=colour)
            inf = [x for x, c in zip(xs, cs) if not math.isfinite(c.value)]
            if inf:
                ax.plot(inf, [1.0] * len(inf), marker="^", linestyle="none", color=colour,
                        transform=ax.get_xaxis_transform(), clip_on=False)
    ax.set_yscale("log")
    ax.set_xlabel("block")
    ax.set_ylabel("kappa")
    ax.set_title("block Jacobian with (solid) and without (dashed) the shortcut", fontsize=9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def run_conv(cfg: DictConfig, specs: Sequence[BackboneSpec], models: Sequence[torch.nn.Module],
             image: torch.Tensor, device: torch.device) -> dict[str, Any]:
    """Measure every CNN backbone of ``specs`` on ``image`` (1, 3, H, W) and write the report."""
    blocks = [check_conv_backbone(model, spec, cfg) for model, spec in zip(models, specs)]
    dtype = DTYPES[str(cfg.solver.dtype)]
    solver = Solver(tol=float(cfg.solver.tol), max_iter=int(cfg.solver.max_iter), seed=int(cfg.seed), dtype=dtype)
    print(f"conditioning of CNN blocks: one image at {cfg.image_size} px, blocks {cfg.layers}, Lanczos tol "
          f"{cfg.solver.tol:g} / {cfg.solver.max_iter} products{_skipped(cfg)}; backbones: "
          f"{', '.join(s.name for s in specs)}", flush=True)
    results: list[tuple[str, dict[int, ConvBlockCondition]]] = []
    written: dict[str, Any] = {"json": {}, "results": {}}
    for spec, model, wanted in zip(specs, models, blocks):
        model = model.to(device)
        start = time.perf_counter()
        budget = SolveBudget(None, {f"kappa_{m}/block{i}": 1.0 for i in wanted for m in MAPS},
                             report=lambda m, n=spec.name: print(f"{n}: {m}", flush=True))
        r = conv_block_conditions(model, image.to(device), wanted, solver, watches=budget.watch)
        record = {"backbone": spec.name, "args": shown_args(spec.args), "image_size": int(cfg.image_size),
                  "settings": OmegaConf.to_container(cfg, resolve=True),
                  "blocks": {str(i): c.to_json() for i, c in r.items()}}
        if cfg.dense_check:
            record["dense"] = {}
            for i in r:  # a dense Jacobian of a few thousand rows takes tens of seconds: one line per block
                print(f"{spec.name}: dense check of block {i} ...", flush=True)
                record["dense"][str(i)] = {w: dense_condition(conv_block_jacobian_dense(
                    model, image.to(device), i, w, max_entries=int(cfg.dense_max_entries), dtype=dtype),
                    gram=True).to_json() for w in MAPS}
        save_record(spec, record, written, start)
        write_tensorboard(r, spec.out_dir)
        results.append((spec.name, r))
    folder = report_folder(cfg, specs)
    report = table(results)
    written["table"] = write_text(folder / "conditioning.md", report)
    written["figure"] = figure(results, folder / "conditioning.png")
    print(report, flush=True)
    print(f"table: {written['table']}\nfigure: {written['figure']}", flush=True)
    return written
