"""``make tokencut``: TokenCut object discovery with the features of every block, scored by CorLoc.

    python -m skipless.eval.tokencut dataset=voc12 layers=all ckpt="runs/a runs/b random"

The skipless paper (Ji et al., "Cutting the Skip", Section 6.2.2, Figure 3) scores its DINO
backbones with TokenCut (Wang et al., TPAMI 2023) on VOC12 and COCO20k, comparing the blocks and
reporting the best. For each backbone (``eval.shared.backbones``) and each image (``skipless.data.DISCOVERY_DATASETS``,
kept at its size and zero-padded as the reference does, ``eval.shared.images``), one forward pass gives
the chosen features of every block; the cut itself (``eval.tokencut.ncut``) runs for all blocks in one
batched eigensolve; CorLoc (``eval.tokencut.corloc``) counts every image. A block whose graphs are mostly
complete has no defined Ncut and no CorLoc; the best block is chosen among the others
(``eval.tokencut.result``).

The evaluator's shape: settings checked once (``check_settings``, the rules in ``RULES``) and the
output folders checked (``eval.shared.output_dirs``) before any backbone is loaded or image read,
``evaluate`` computes a ``BackboneResult`` per backbone, ``eval.tokencut.outputs.write_outputs``
writes it (JSON, boxes CSV, figure, TensorBoard under ``<run>/eval/``, or ``<out>/<backbone>/``
with ``out=<folder>``), and ``run`` adds the table over backbones.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Sequence

import numpy as np
import torch
from omegaconf import DictConfig
from PIL import UnidentifiedImageError
from tqdm import tqdm

from skipless.config.rules import Rule, integer, number, one_of, optional, text
from skipless.config import ConfigError, load_config
from skipless.data import DISCOVERY_DATASETS, MalformedDatasetError, UnknownDatasetError, build_discovery
from skipless.errors import exit_on_user_error
from skipless.devices.cpu_threads import set_cpu_threads
from skipless.models import patch_features, resolve_layers
from skipless.reports.summary import describe_model

from ..shared.backbones import BackboneSpec, load_spec
from ..shared.devices import resolve_device
from ..shared.images import normalized, pad_to_multiple
from ..shared.output_dirs import backbones_to_evaluate
from ..shared.report import compare_dir, write_text
from ..shared.settings_rules import BLOCKS_OR_ALL, COMMON, check_rules, require_feature_out_for_norm
from .corloc import best_iou
from .ncut import UNIQUE_GAP, Discovery, affinity, discover, lapack_spectrum, ncut_spectrum, reference_spectrum
from .outputs import comparison, output_stem, plot_comparison, write_outputs
from .result import BackboneResult

SOLVERS = ("auto", "torch", "lapack", "scipy")
FEATURES = ("k", "q", "v", "out")
DTYPES = {"float64": torch.float64, "float32": torch.float32}


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
    start = time.perf_counter()
    feats = patch_features(model, x, blocks, cfg.feature, norm=cfg.norm)  # {block: (1, rows, cols, C)}
    grid = tuple(feats[blocks[0]].shape[1:3])
    stacked = torch.cat([feats[b].flatten(1, 2) for b in blocks])  # (blocks, N, C)
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
    print(f"tokencut {spec.name} ({describe_model(spec.args)}): {count} images of {cfg.dataset}, feature "
          f"{cfg.feature}, blocks {blocks}, tau {cfg.tau:g}, solver {cfg.solver}, {torch.get_num_threads()} CPU "
          f"thread{'s' * (torch.get_num_threads() > 1)}", flush=True)
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
            scores = result.corloc()
            block = max(scores, key=scores.get)
            bar.set_postfix_str(f"CorLoc so far {scores[block]:.1f} at block {block}")
    if not result.ious:
        raise MalformedDatasetError(f"no readable image among the {count} of the dataset")
    return result


# Every key of configs/tokencut.yaml and its rule (eval/shared/settings_rules.py); roots.<dataset> in rules_for.
RULES = {
    **COMMON,
    "dataset": text(),  # a known one: check_settings, with UnknownDatasetError
    "split": optional(text()),
    "max_images": optional(integer(1)),
    "layers": BLOCKS_OR_ALL,  # in range: per backbone
    "feature": one_of(*FEATURES),
    "tau": number(-1, 1, low_open=True),  # a cosine threshold; +-1 would cut every edge or none
    "eps": number(0, 1, low_open=True),   # the weight of a cut edge, below the weight 1 of a kept one
    "solver": one_of(*SOLVERS),
    "solver_dtype": one_of(*DTYPES),
    "num_workers": integer(0),
    "figure_images": integer(0),
}


def rules_for(dataset: str) -> dict[str, Rule]:
    """``RULES`` and the data root of ``dataset``."""
    return {**RULES, f"roots.{dataset}": text()}


def check_settings(cfg: DictConfig) -> tuple[torch.device, str]:
    """Every check of the user's input that needs no backbone; returns the device and the split."""
    if cfg.dataset not in DISCOVERY_DATASETS:
        raise UnknownDatasetError(f"unknown TokenCut dataset {cfg.dataset!r}; expected one of: "
                                  f"{', '.join(DISCOVERY_DATASETS)}")
    if cfg.dataset not in cfg.roots or cfg.roots[cfg.dataset] is None:
        raise ConfigError(f"no data root for {cfg.dataset}: set roots.{cfg.dataset}=<folder> (data/README.md)")
    check_rules(cfg, rules_for(cfg.dataset))
    require_feature_out_for_norm(cfg)
    split = DISCOVERY_DATASETS[cfg.dataset].split if cfg.split is None else str(cfg.split)
    return resolve_device(cfg.device), split


def run(cfg: DictConfig) -> list[dict[str, Any]]:
    """Evaluate every backbone of ``cfg.ckpt`` on ``cfg.dataset``; returns their summaries."""
    device, split = check_settings(cfg)
    set_cpu_threads(cfg.cpu_threads, int(cfg.num_workers))
    specs = backbones_to_evaluate(cfg)
    dataset = build_discovery(cfg.dataset, cfg.roots[cfg.dataset], split)
    count = len(dataset) if cfg.max_images is None else min(len(dataset), int(cfg.max_images))
    summaries = []
    for spec in specs:
        result = evaluate(spec, dataset, count, cfg, device)
        summary = write_outputs(result, cfg, split, device)
        summaries.append(summary)
        if result.skipped:
            print(f"warning: {len(result.skipped)} unreadable or too small images were skipped and are not "
                  f"counted (listed under 'skipped' in the JSON), e.g. {result.skipped[0]}", flush=True)
        if summary["undefined_blocks"]:
            print(f"warning: {spec.name}: blocks {summary['undefined_blocks']} have no defined CorLoc (more than half "
                  f"of their graphs are complete at tau={cfg.tau:g}); the best block is chosen among the others",
                  flush=True)
        best = ("no block has a defined CorLoc" if summary["best_block"] is None else
                f"best CorLoc {summary['best_corloc']:.1f} at block {summary['best_block']}")
        print(f"{spec.name}: {best} over {summary['images']} images, {summary['seconds_per_image']['total']:.3f} "
              f"s/image -> {spec.out_dir}/{output_stem(cfg)}.json", flush=True)
    table = comparison(summaries)
    print(f"\nTokenCut CorLoc (%) on {cfg.dataset} ({count} images, feature {cfg.feature}):\n{table}")
    if len(summaries) > 1:
        where = compare_dir(cfg.runs_root, cfg.out)
        stem = output_stem(cfg)
        write_text(where / f"{stem}.md", f"# TokenCut CorLoc (%) on {cfg.dataset}, "
                   f"{count} images, feature {cfg.feature}\n\n{table}")
        plot_comparison(summaries, where / f"{stem}.png", cfg.dataset)
        print(f"table: {where / f'{stem}.md'}")
    return summaries


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_user_error(lambda: run(load_config("tokencut", argv)))

