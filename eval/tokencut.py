"""``make tokencut``: TokenCut object discovery with the features of every block, scored by CorLoc.

    python -m eval.tokencut dataset=voc12 layers=all ckpt="runs/a runs/b random"

The skipless paper (Ji et al., "Cutting the Skip", Section 6.2.2, Figure 3) scores its DINO
backbones with TokenCut (Wang et al., TPAMI 2023) on VOC12 and COCO20k, comparing the blocks and
reporting the best. For each backbone (``eval.backbones``) and each image (``eval.tokencut_data``,
kept at its size and zero-padded as the reference does, ``eval.images``), one forward pass gives
the chosen features of every block; the cut itself (``eval.ncut``) runs for all blocks in one
batched eigensolve; CorLoc (``eval.corloc``) counts every image.

Writes, for each backbone, into its ``<run>/eval/``:
    tokencut-<dataset>.json         CorLoc per block, best block, ambiguous graphs, settings, seconds per image
    tokencut-<dataset>-boxes.csv    one row per image and block: predicted and true boxes, IoU
    tokencut-<dataset>.png          images with true (green) and found (red) boxes, Ncut vector, object
    tb/                             TensorBoard: CorLoc per block (step = block), the figure
and, with several backbones, ``runs/compare/tokencut-<dataset>.{md,png}`` (blocks x backbones).
"""
from __future__ import annotations

import csv
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from omegaconf import DictConfig, ListConfig, OmegaConf
from PIL import UnidentifiedImageError
from tqdm import tqdm

from eval.backbones import BackboneNotFoundError, BackboneSpec, load_spec, resolve_backbones, resolve_device
from eval.corloc import THRESHOLD, best_iou
from eval.images import normalized, pad_to_multiple
from eval.ncut import UNIQUE_GAP, Discovery, affinity, discover, lapack_spectrum, ncut_spectrum, reference_spectrum
from eval.report import compare_dir, markdown_table, write_text
from eval.tokencut_data import DATASETS, build_dataset
from skipless.config import ConfigError, load_config
from skipless.data import DatasetNotFoundError, MalformedDatasetError
from skipless.models import BackboneLoadError, extract_features, patch_grid

SOLVERS = ("auto", "torch", "lapack", "scipy")
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def resolve_layers(layers: Any, depth: int) -> list[int]:
    """``all`` | an index | a list of indices (negative from the end) -> sorted block indices."""
    if isinstance(layers, str) and layers.strip() == "all":
        return list(range(depth))
    items = list(layers) if isinstance(layers, (list, tuple, ListConfig)) else [layers]
    out = set()
    for item in items:
        try:
            index = int(item)
        except (TypeError, ValueError):
            raise ValueError(f"layers must be 'all', a block index or a list of them, got {layers!r}") from None
        if not -depth <= index < depth:
            raise ValueError(f"block {index} does not exist in a backbone of {depth} blocks (0..{depth - 1})")
        out.add(index % depth)
    return sorted(out)


class _Images:
    """Dataset items as padded tensors, decoded in worker processes; unreadable images -> None."""

    def __init__(self, dataset: Any, count: int) -> None:
        self.dataset, self.count = dataset, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int):
        try:
            image, boxes = self.dataset[index]
        except (OSError, UnidentifiedImageError):
            return index, None, None
        return index, normalized(image), np.asarray(boxes, dtype=np.float64).reshape(-1, 4)


def _as_is(item: Any) -> Any:
    """The loader's per-item conversion: none (boxes stay numpy, unreadable images stay None)."""
    return item


@dataclass
class BackboneResult:
    """What one backbone found on the dataset."""

    spec: BackboneSpec
    blocks: list[int]
    patch: int
    image_ids: list[str] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)  # (height, width)
    gt_boxes: list[np.ndarray] = field(default_factory=list)
    boxes: list[np.ndarray] = field(default_factory=list)  # per image (blocks, 4)
    ious: list[np.ndarray] = field(default_factory=list)  # per image (blocks,)
    unique: list[np.ndarray] = field(default_factory=list)  # per image (blocks,): a unique Ncut vector
    examples: list[tuple[torch.Tensor, np.ndarray, list[Discovery]]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds_features: float = 0.0
    seconds_ncut: float = 0.0

    def corloc(self) -> dict[int, float]:
        hits = np.stack(self.ious) >= THRESHOLD  # (images, blocks)
        return {b: 100.0 * float(hits[:, j].mean()) for j, b in enumerate(self.blocks)}

    def ambiguous(self) -> dict[int, float]:
        """Per block, the % of images whose graph has no unique Ncut vector (e.g. complete graphs)."""
        unique = np.stack(self.unique)
        return {b: 100.0 * float(1 - unique[:, j].mean()) for j, b in enumerate(self.blocks)}

    def best_block(self) -> int:
        scores = self.corloc()
        return max(self.blocks, key=lambda b: (scores[b], b))  # ties: the deeper block


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ncut_vectors(feats: torch.Tensor, cfg: DictConfig) -> tuple[np.ndarray, np.ndarray]:
    """Ncut vectors (blocks, N) and eigengaps (blocks,) of patch features (blocks, N, C)."""
    graphs = affinity(feats.float(), cfg.tau, cfg.eps)
    solver = cfg.solver
    if solver == "auto":
        solver = "lapack" if graphs.device.type == "cpu" else "torch"
    if solver in ("lapack", "scipy"):
        solve = lapack_spectrum if solver == "lapack" else reference_spectrum
        solved = [solve(g) for g in graphs.double().cpu().numpy()]
        return np.stack([v for v, _ in solved]), np.array([gap for _, gap in solved])
    vectors, gaps = ncut_spectrum(graphs, DTYPES[cfg.solver_dtype])
    return vectors.cpu().numpy(), gaps.cpu().numpy()


def discover_blocks(model: torch.nn.Module, x: torch.Tensor, size: tuple[int, int], blocks: list[int],
                    cfg: DictConfig) -> tuple[list[Discovery], np.ndarray, float, float]:
    """TokenCut on one padded image (1, 3, H', W') for each block.

    Returns:
        The discoveries, the eigengaps, and the seconds spent on features and on the cut.
    """
    device = x.device
    patch = model.patch_embed.patch_size[0]
    grid = patch_grid(model, *x.shape[-2:])
    start = time.perf_counter()
    feats = extract_features(model, x, layers=blocks, kinds=(cfg.feature,), norm=cfg.norm)
    prefix = model.num_prefix_tokens
    stacked = torch.cat([feats[(cfg.feature, b)][:, prefix:] for b in blocks])  # (blocks, N, C)
    _sync(device)
    middle = time.perf_counter()
    vectors, gaps = ncut_vectors(stacked, cfg)
    found = [discover(v, grid, patch, size) for v in vectors]
    return found, gaps, middle - start, time.perf_counter() - middle


@torch.inference_mode()
def evaluate(spec: BackboneSpec, dataset: Any, count: int, cfg: DictConfig, device: torch.device) -> BackboneResult:
    """Run TokenCut over the first ``count`` images of ``dataset`` with the backbone of ``spec``."""
    model = load_spec(spec, device, seed=cfg.seed)
    blocks = resolve_layers(cfg.layers, len(model.blocks))
    patch = model.patch_embed.patch_size[0]
    result = BackboneResult(spec, blocks, patch)
    loader = torch.utils.data.DataLoader(_Images(dataset, count), batch_size=None, shuffle=False,
                                         num_workers=cfg.num_workers, collate_fn=_as_is)
    bar = tqdm(loader, total=count, desc=f"tokencut {spec.name}", unit="img", dynamic_ncols=True, file=sys.stdout)
    for index, image, gt in bar:
        image_id = str(dataset.ids[index])
        if image is None:
            result.skipped.append(image_id)
            continue
        size = tuple(image.shape[-2:])
        x = pad_to_multiple(image, patch)[None].to(device)
        if x.shape[-2] * x.shape[-1] < 3 * patch * patch:  # the cut needs 3 patches at least
            result.skipped.append(image_id)
            continue
        found, gaps, t_feat, t_cut = discover_blocks(model, x, size, blocks, cfg)
        result.seconds_features += t_feat
        result.seconds_ncut += t_cut
        boxes = np.stack([f.box for f in found])
        result.image_ids.append(image_id)
        result.sizes.append(size)
        result.gt_boxes.append(gt)
        result.boxes.append(boxes)
        result.ious.append(np.array([best_iou(b, gt) for b in boxes]))
        result.unique.append(gaps >= UNIQUE_GAP)
        if len(result.examples) < cfg.figure_images:
            result.examples.append((image, gt, found))
        if len(result.ious) % 50 == 0:
            bar.set_postfix(best=f"{max(result.corloc().values()):.1f}")
    if not result.ious:
        raise MalformedDatasetError(f"no readable image among the {count} of the dataset")
    return result


def settings_of(cfg: DictConfig) -> dict[str, Any]:
    keys = ("dataset", "max_images", "layers", "feature", "norm", "tau", "eps", "solver", "solver_dtype")
    return {k: OmegaConf.to_container(cfg[k]) if isinstance(cfg[k], ListConfig) else cfg[k] for k in keys}


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


def draw_examples(result: BackboneResult, block: int, title: str):
    """Figure: per example image, the boxes, the Ncut vector and the found object of ``block``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from eval.images import MEAN, STD

    j = result.blocks.index(block)
    rows = len(result.examples)
    fig, axes = plt.subplots(rows, 3, figsize=(9, 3 * rows), squeeze=False)
    for row, (image, gt, found) in enumerate(result.examples):
        d = found[j]
        rgb = (image.permute(1, 2, 0).numpy() * np.array(STD) + np.array(MEAN)).clip(0, 1)
        h, w = rgb.shape[:2]
        patch = result.patch
        extent = (0, d.vector.shape[1] * patch, d.vector.shape[0] * patch, 0)
        ax = axes[row]
        ax[0].imshow(rgb)
        for box in gt:
            ax[0].add_patch(Rectangle(box[:2], box[2] - box[0], box[3] - box[1], fill=False, ec="lime", lw=2))
        ax[0].add_patch(Rectangle(d.box[:2], d.box[2] - d.box[0], d.box[3] - d.box[1], fill=False, ec="red", lw=2))
        ax[0].set_title(f"IoU {best_iou(d.box, gt):.2f}", fontsize=9)
        ax[1].imshow(d.vector, cmap="viridis", extent=extent, interpolation="nearest")
        ax[1].plot((d.seed[1] + 0.5) * patch, (d.seed[0] + 0.5) * patch, "r*", ms=10)
        ax[1].set_title("Ncut vector, seed", fontsize=9)
        overlay = np.zeros((*d.vector.shape, 4))
        overlay[d.foreground] = (1, 1, 0, 0.35)
        overlay[d.component] = (1, 0, 0, 0.55)
        ax[2].imshow(rgb)
        ax[2].imshow(overlay, extent=extent, interpolation="nearest")
        ax[2].set_title("foreground (yellow), seed's component (red)", fontsize=8)
        for a in ax:
            a.set_xlim(0, w)
            a.set_ylim(h, 0)
            a.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / fig.get_figheight()))  # room for the title
    return fig


def write_outputs(result: BackboneResult, cfg: DictConfig, split: str, device: torch.device) -> dict[str, Any]:
    """JSON, CSV, figure and TensorBoard events of one backbone, in its ``out_dir``."""
    from torch.utils.tensorboard import SummaryWriter

    out = result.spec.out_dir
    out.mkdir(parents=True, exist_ok=True)
    stem = f"tokencut-{cfg.dataset}"
    scores = result.corloc()
    best = result.best_block()
    n = len(result.ious)
    summary = {
        "dataset": cfg.dataset, "split": split, "images": n, "skipped": result.skipped,
        "backbone": {"name": result.spec.name, "path": str(result.spec.path) if result.spec.path else None,
                     "args": result.spec.args},
        "settings": settings_of(cfg), "device": str(device),
        "solver_used": cfg.solver if cfg.solver != "auto" else ("lapack" if device.type == "cpu" else "torch"),
        "corloc": {str(b): v for b, v in scores.items()}, "best_block": best, "best_corloc": scores[best],
        # % of images whose graph had no unique Ncut vector (lambda_3 - lambda_2 < UNIQUE_GAP): their
        # boxes are arbitrary (a complete graph: every similarity above tau, e.g. collapsed tokens)
        "ambiguous_percent": {str(b): v for b, v in result.ambiguous().items()},
        "seconds_per_image": {"total": (result.seconds_features + result.seconds_ncut) / n,
                              "features": result.seconds_features / n, "ncut": result.seconds_ncut / n},
        "boxes": f"{stem}-boxes.csv", "figure": f"{stem}.png", "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    write_text(out / f"{stem}.json", json.dumps(summary, indent=1) + "\n")
    write_boxes_csv(result, out / f"{stem}-boxes.csv")
    fig = draw_examples(result, best, f"{result.spec.name}, {cfg.dataset}, block {best} ({cfg.feature}): "
                                      f"CorLoc {scores[best]:.1f}")
    fig.savefig(out / f"{stem}.png", dpi=80)
    with SummaryWriter(str(out / "tb")) as writer:
        for b, v in scores.items():
            writer.add_scalar(f"{stem}/corloc_per_block", v, b)
        writer.add_scalar(f"{stem}/best_corloc", scores[best], 0)
        writer.add_scalar(f"{stem}/seconds_per_image", summary["seconds_per_image"]["total"], 0)
        writer.add_figure(f"{stem}/boxes", fig, 0)  # closes the figure
    return summary


def comparison(summaries: list[dict[str, Any]]) -> str:
    """Markdown table: one row per block (and the best), one column per backbone."""
    blocks = sorted({int(b) for s in summaries for b in s["corloc"]})
    rows = [[f"block {b}", *(s["corloc"].get(str(b)) for s in summaries)] for b in blocks]
    rows.append(["best (block)", *(f"{s['best_corloc']:.1f} ({s['best_block']})" for s in summaries)])
    rows.append(["s / image", *(f"{s['seconds_per_image']['total']:.3f}" for s in summaries)])
    return markdown_table(["CorLoc", *(s["backbone"]["name"] for s in summaries)], rows)


def plot_comparison(summaries: list[dict[str, Any]], path: Path, dataset: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for s in summaries:
        blocks = sorted(int(b) for b in s["corloc"])
        ax.plot(blocks, [s["corloc"][str(b)] for b in blocks], "o-", label=s["backbone"]["name"])
    ax.set_xlabel("block")
    ax.set_ylabel("CorLoc (%)")
    ax.set_title(f"TokenCut on {dataset}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run(cfg: DictConfig) -> list[dict[str, Any]]:
    """Evaluate every backbone of ``cfg.ckpt`` on ``cfg.dataset``; returns their summaries."""
    if cfg.solver not in SOLVERS:
        raise ValueError(f"unknown solver {cfg.solver!r}; expected one of: {', '.join(SOLVERS)}")
    if cfg.solver_dtype not in DTYPES:
        raise ValueError(f"unknown solver_dtype {cfg.solver_dtype!r}; expected one of: {', '.join(DTYPES)}")
    if cfg.dataset not in DATASETS:
        raise ValueError(f"unknown TokenCut dataset {cfg.dataset!r}; expected one of: {', '.join(DATASETS)}")
    if cfg.roots.get(cfg.dataset) is None:
        raise ValueError(f"no data root for {cfg.dataset}: set roots.{cfg.dataset}=<folder> (data/README.md)")
    if cfg.max_images is not None and int(cfg.max_images) < 1:
        raise ValueError(f"max_images must be a positive number of images or null, got {cfg.max_images}")
    device = resolve_device(cfg.device)
    specs = resolve_backbones(cfg.ckpt, cfg.runs_root)
    split = DATASETS[cfg.dataset].split if cfg.split is None else str(cfg.split)
    dataset = build_dataset(cfg.dataset, cfg.roots[cfg.dataset], split)
    count = len(dataset) if cfg.max_images is None else min(len(dataset), int(cfg.max_images))
    summaries = []
    for spec in specs:
        result = evaluate(spec, dataset, count, cfg, device)
        summary = write_outputs(result, cfg, split, device)
        summaries.append(summary)
        if result.skipped:
            print(f"warning: {len(result.skipped)} unreadable or too small images were skipped and are not "
                  f"counted (listed under 'skipped' in the JSON), e.g. {result.skipped[0]}", flush=True)
        print(f"{spec.name}: best CorLoc {summary['best_corloc']:.1f} at block {summary['best_block']} "
              f"over {summary['images']} images, {summary['seconds_per_image']['total']:.3f} s/image -> "
              f"{spec.out_dir}/tokencut-{cfg.dataset}.json", flush=True)
    table = comparison(summaries)
    print(f"\nTokenCut CorLoc (%) on {cfg.dataset} ({count} images, feature {cfg.feature}):\n{table}")
    if len(summaries) > 1:
        where = compare_dir(cfg.runs_root)
        write_text(where / f"tokencut-{cfg.dataset}.md", f"# TokenCut CorLoc (%) on {cfg.dataset}, "
                   f"{count} images, feature {cfg.feature}\n\n{table}")
        plot_comparison(summaries, where / f"tokencut-{cfg.dataset}.png", cfg.dataset)
        print(f"table: {where / f'tokencut-{cfg.dataset}.md'}")
    return summaries


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = load_config("tokencut", argv)
        run(cfg)
    except (ConfigError, DatasetNotFoundError, MalformedDatasetError, BackboneNotFoundError, BackboneLoadError,
            ValueError) as err:
        raise SystemExit(f"error: {err}") from None


if __name__ == "__main__":
    main()
