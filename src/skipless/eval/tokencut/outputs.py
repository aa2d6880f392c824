"""What ``make tokencut`` writes, from computed ``BackboneResult``s.

Per backbone, into its ``<run>/eval/``:
    tokencut-<dataset>[-<feature>].json         CorLoc per block, undefined blocks, best defined block, ambiguous graphs,
                                    settings, seconds per image
    tokencut-<dataset>-boxes.csv    one row per image and block: predicted and true boxes, IoU
    tokencut-<dataset>.png          images with true (green) and found (red) boxes, Ncut vector, object
    tb/                             TensorBoard: CorLoc per defined block (step = block), the figure
and, over several backbones, ``runs/compare/tokencut-<dataset>.{md,png}`` (blocks x backbones), where
an undefined block (``result``) shows as ``undefined (<share of ambiguous graphs>%)``.
"""
from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from skipless.data.conventions import IMAGENET_MEAN as MEAN
from skipless.data.conventions import IMAGENET_STD as STD

from ..shared.report import markdown_table, result_json, shown_args, write_text
from ..shared.tb_events import event_writer
from .corloc import THRESHOLD, best_iou
from .result import UNDEFINED_SHARE, BackboneResult

UNDEFINED_NOTE = (f"undefined: more than {UNDEFINED_SHARE:.0f}% of the block's graphs have no unique Ncut vector "
                  "(every similarity above tau), so its boxes are the eigensolver's tie-breaks; in brackets that share")


def settings_of(cfg: DictConfig) -> dict[str, Any]:
    keys = ("dataset", "max_images", "layers", "feature", "norm", "tau", "eps", "solver", "solver_dtype")
    return {k: OmegaConf.to_container(cfg[k]) if isinstance(cfg[k], ListConfig) else cfg[k] for k in keys}


def output_stem(cfg: DictConfig) -> str:
    """``tokencut-<dataset>``, plus ``-<feature>`` for features other than TokenCut's keys, so that runs on
    different features keep their own files and tables (as PCA's names do)."""
    return f"tokencut-{cfg.dataset}" + ("" if cfg.feature == "k" else f"-{cfg.feature}")


def write_boxes_csv(result: BackboneResult, path: Path) -> None:
    """One row per (image, block): the box, its best IoU and the true boxes, to score again later."""
    def text(boxes: np.ndarray) -> str:
        return ";".join(" ".join(f"{v:g}" for v in box) for box in boxes)

    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["image", "height", "width", "block", "x0", "y0", "x1", "y1", "iou", "hit", "gt_boxes"])
        for image_id, size, gt, boxes, ious in zip(result.image_ids, result.sizes, result.gt_boxes,
                                                   result.boxes, result.ious):
            for block, box, iou in zip(result.blocks, boxes, ious):
                out.writerow([image_id, size[0], size[1], block, *(f"{v:g}" for v in box), f"{iou:.4f}",
                              int(iou >= THRESHOLD), text(gt)])


# Box colours a reader tells apart on any object (each over a black halo) and without colour vision: the
# truth solid cyan, the found box dashed magenta.
TRUTH, FOUND = "#00e5ff", "#ff2bd6"


def draw_examples(result: BackboneResult, block: int, title: str):
    """Figure: per example image, the boxes (with hit or miss at IoU ``THRESHOLD``), the Ncut vector with
    its colour bar and seed, and the found object of ``block``; one legend for the figure."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import patheffects
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    halo = [patheffects.withStroke(linewidth=4.5, foreground="black")]
    j = result.blocks.index(block)
    rows = len(result.examples)
    fig, axes = plt.subplots(rows, 3, figsize=(10, 3 * rows + 0.6), squeeze=False)
    for row, (image, gt, found) in enumerate(result.examples):
        d = found[j]
        rgb = (image.permute(1, 2, 0).numpy() * np.array(STD) + np.array(MEAN)).clip(0, 1)
        h, w = rgb.shape[:2]
        patch = result.patch
        extent = (0, d.vector.shape[1] * patch, d.vector.shape[0] * patch, 0)
        ax = axes[row]
        ax[0].imshow(rgb)
        for box in gt:
            ax[0].add_patch(Rectangle(box[:2], box[2] - box[0], box[3] - box[1], fill=False, ec=TRUTH, lw=2,
                                      path_effects=halo))
        ax[0].add_patch(Rectangle(d.box[:2], d.box[2] - d.box[0], d.box[3] - d.box[1], fill=False, ec=FOUND, lw=2,
                                  ls="--", path_effects=halo))
        iou = best_iou(d.box, gt)
        hit = iou >= THRESHOLD
        ax[0].set_title(f"IoU {iou:.2f}: {'hit' if hit else 'miss'}", fontsize=10, fontweight="bold",
                        color="#1a7f37" if hit else "#cf222e")
        vector = ax[1].imshow(d.vector, cmap="viridis", extent=extent, interpolation="nearest")
        fig.colorbar(vector, ax=ax[1], fraction=0.046, pad=0.03).ax.tick_params(labelsize=8)
        ax[1].plot((d.seed[1] + 0.5) * patch, (d.seed[0] + 0.5) * patch, marker="*", color="white", ms=13,
                   mec="black", mew=1.2, ls="none")
        ax[1].set_title("second eigenvector (Ncut), seed", fontsize=10)
        overlay = np.zeros((*d.vector.shape, 4))
        overlay[d.foreground] = (1, 1, 0, 0.35)
        overlay[d.component] = (1, 0, 0, 0.55)
        ax[2].imshow(rgb)
        ax[2].imshow(overlay, extent=extent, interpolation="nearest")
        ax[2].set_title("foreground, the seed's component", fontsize=10)
        for a in ax:
            a.set_xlim(0, w)
            a.set_ylim(h, 0)
            a.axis("off")
    handles = [Line2D([], [], color=TRUTH, lw=2, path_effects=halo, label="true box"),
               Line2D([], [], color=FOUND, lw=2, ls="--", path_effects=halo, label="found box"),
               Line2D([], [], marker="*", color="white", mec="black", ms=11, ls="none", label="seed patch"),
               Patch(color=(1, 1, 0, 0.35), label="foreground (the vector's side of the seed)"),
               Patch(color=(1, 0, 0, 0.55), label="the seed's connected component: the box")]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=9, frameon=False)
    fig.suptitle(f"{title}; hit: IoU >= {THRESHOLD:g} with a true box", fontsize=11)
    fig.tight_layout(rect=(0, 0.6 / fig.get_figheight(), 1, 1 - 0.4 / fig.get_figheight()))
    return fig


def write_outputs(result: BackboneResult, cfg: DictConfig, split: str, device: torch.device) -> dict[str, Any]:
    """JSON, CSV, figure and TensorBoard events of one backbone, in its ``out_dir``."""
    out = result.spec.out_dir
    out.mkdir(parents=True, exist_ok=True)
    stem = output_stem(cfg)
    scores, ambiguous = result.corloc(), result.ambiguous()
    undefined = result.undefined_blocks()
    best = result.best_block()
    n = len(result.ious)
    summary = {
        "dataset": cfg.dataset, "split": split, "images": n, "skipped": result.skipped,
        "backbone": {"name": result.spec.name, "path": str(result.spec.path) if result.spec.path else None,
                     "args": shown_args(result.spec.args)},
        "settings": settings_of(cfg), "device": str(device),
        "solver_used": cfg.solver if cfg.solver != "auto" else ("lapack" if device.type == "cpu" else "torch"),
        # measured CorLoc of every block; those in undefined_blocks are not scores of the features
        "corloc": {str(b): v for b, v in scores.items()},
        "undefined_blocks": undefined, "undefined_rule": f"ambiguous_percent > {UNDEFINED_SHARE:g}",
        "best_block": best, "best_corloc": None if best is None else scores[best],  # among defined blocks
        # % of images whose graph had no unique Ncut vector (lambda_3 - lambda_2 < UNIQUE_GAP): their
        # boxes are arbitrary (a complete graph: every similarity above tau, e.g. collapsed tokens)
        "ambiguous_percent": {str(b): v for b, v in ambiguous.items()},
        "seconds_per_image": {"total": (result.seconds_features + result.seconds_ncut) / n,
                              "features": result.seconds_features / n, "ncut": result.seconds_ncut / n},
        "boxes": f"{stem}-boxes.csv", "figure": f"{stem}.png" if result.examples else None,
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    write_text(out / f"{stem}.json", result_json(summary))
    write_boxes_csv(result, out / f"{stem}-boxes.csv")
    fig = None
    if result.examples:  # figure_images=0: no figure
        shown = best if best is not None else result.blocks[-1]
        score = (f"CorLoc {scores[shown]:.1f}" if best is not None
                 else f"undefined ({ambiguous[shown]:.0f}% ambiguous graphs)")
        fig = draw_examples(result, shown, f"{result.spec.name}, {cfg.dataset}, block {shown} ({cfg.feature}): {score}")
        fig.savefig(out / f"{stem}.png", dpi=80)
    # Its own folder, emptied first: a second run replaces these instead of adding points at the same steps. Per
    # block, a figure and a table, not a time series whose steps would be blocks (and smoothed across them).
    with event_writer(out, stem) as writer:
        if best is not None:
            writer.add_scalar(f"{stem}/best_corloc", scores[best], 0)
        writer.add_scalar(f"{stem}/seconds_per_image", summary["seconds_per_image"]["total"], 0)
        writer.add_figure(f"{stem}/corloc_per_block", comparison_figure([summary], cfg.dataset), 0)
        writer.add_text(f"{stem}/corloc_per_block", comparison([summary]), 0)
        if fig is not None:
            writer.add_figure(f"{stem}/boxes", fig, 0)  # closes the figure
    return summary


def corloc_cell(summary: dict[str, Any], block: int) -> float | str | None:
    """A block's CorLoc, or ``undefined (<share>%)`` for an undefined block, or None when not run."""
    if block in summary["undefined_blocks"]:
        return f"undefined ({summary['ambiguous_percent'][str(block)]:.0f}%)"
    return summary["corloc"].get(str(block))


def comparison(summaries: list[dict[str, Any]]) -> str:
    """Markdown table: one row per block (and the best defined one), one column per backbone."""
    blocks = sorted({int(b) for s in summaries for b in s["corloc"]})
    rows = [[f"block {b}", *(corloc_cell(s, b) for s in summaries)] for b in blocks]
    rows.append(["best (block)", *("none defined" if s["best_block"] is None else
                                   f"{s['best_corloc']:.1f} ({s['best_block']})" for s in summaries)])
    rows.append(["s / image", *(f"{s['seconds_per_image']['total']:.3f}" for s in summaries)])
    table = markdown_table(["CorLoc", *(s["backbone"]["name"] for s in summaries)], rows)
    if any(s["undefined_blocks"] for s in summaries):
        table += f"\n{UNDEFINED_NOTE}.\n"
    return table


def plot_comparison(summaries: list[dict[str, Any]], path: Path, dataset: str) -> None:
    """``comparison_figure`` written to ``path``."""
    import matplotlib.pyplot as plt

    fig = comparison_figure(summaries, dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def comparison_figure(summaries: list[dict[str, Any]], dataset: str):
    """CorLoc per block, a line per backbone; an undefined block a grey x with its share of ambiguous graphs."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for s in summaries:
        blocks = sorted(int(b) for b in s["corloc"])
        # undefined blocks break the line (nan) and show as a grey x with the share of ambiguous graphs
        line = ax.plot(blocks, [np.nan if b in s["undefined_blocks"] else s["corloc"][str(b)] for b in blocks], "o-",
                       label=s["backbone"]["name"])[0]
        for b in s["undefined_blocks"]:
            ax.plot([b], [s["corloc"][str(b)]], "x", color="grey", ms=8)
            ax.annotate(f"{s['ambiguous_percent'][str(b)]:.0f}%", (b, s["corloc"][str(b)]), fontsize=6,
                        color=line.get_color(), textcoords="offset points", xytext=(3, 3))
    if any(s["undefined_blocks"] for s in summaries):
        ax.plot([], [], "x", color="grey", label="undefined (% ambiguous graphs)")
    ax.set_xlabel("block")
    ax.set_ylabel("CorLoc (%)")
    ax.set_title(f"TokenCut on {dataset}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


