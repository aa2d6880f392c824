"""``make pca``: PCA images of patch features, images x blocks and images x checkpoints.

    python -m skipless.eval.pca ckpt="runs/skip-adamw-default runs/skipless-adamw-default" images=photos/

The skipless paper shows its features as PCA images (Ji et al., "Cutting the Skip", Figures 4, 7
and 8): deeper skipless blocks give whole objects one colour, and skip models look noisier. For a
handful of images (the embedded default's val images, or a folder), every backbone of ``ckpt``
gives the features of every block in one forward pass; ``eval.pca.maps`` turns each block's patch
features into an RGB map (3 principal components, min-max per channel, signs fixed along a row).
Settings (the rules in ``RULES``) and output folders are checked once, before any backbone is loaded
or image read (``check_settings``, ``eval.shared.output_dirs``); ``eval.shared.square_images`` reads the images
(unreadable ones skipped and counted), ``compute_maps`` computes a backbone's maps, and the figures
are written from them.

Writes ``<run>/eval/pca-blocks.png`` (images x blocks, Figure 8) per backbone and, with several
backbones, ``runs/compare/pca-checkpoints-block<l>.png`` (images x backbones at one block,
Figure 7), or ``<out>/<backbone>/`` and ``<out>/compare/`` with ``out=<folder>``; the same figures as
TensorBoard images under ``tb/<figure>/`` beside them. Other feature kinds and foreground masking add
``-<kind>`` and ``-masked`` to the names.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from omegaconf import DictConfig

from skipless.config.rules import integer, number, one_of, optional, text
from skipless.config import load_config
from skipless.errors import exit_on_user_error
from skipless.devices.cpu_threads import set_cpu_threads
from skipless.models import patch_features, patch_grid, resolve_layers

from ..shared.backbones import RANDOM, BackboneSpec, load_spec
from ..shared.devices import resolve_device
from ..shared.images import MEAN, STD
from ..shared.output_dirs import backbones_to_evaluate
from ..shared.report import compare_dir
from ..shared.settings_rules import BLOCK, BLOCKS_OR_ALL, COMMON, check_rules, require_feature_out_for_norm
from ..shared.square_images import load_images
from ..shared.tb_events import event_writer
from .maps import pca_rows

FEATURES = ("out", "k", "q", "v")
FEATURE_WORDS = {"out": "outputs", "k": "attention keys", "q": "attention queries", "v": "attention values"}


@torch.inference_mode()
def block_features(model: torch.nn.Module, x: torch.Tensor, blocks: list[int], cfg: DictConfig) -> dict[int, torch.Tensor]:
    """Patch features (B, N, C) of each block, from one forward pass."""
    feats = patch_features(model, x, blocks, cfg.feature, norm=cfg.norm)
    return {b: f.flatten(1, 2).float().cpu() for b, f in feats.items()}


def grid_figure(x: torch.Tensor, names: list[str], maps: list[list[np.ndarray]], titles: list[str], suptitle: str):
    """Rows = images; columns = the image, then one RGB map per title (nearest upsampling)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, cols = len(names), len(titles) + 1
    fig, axes = plt.subplots(rows, cols, figsize=(1.9 * cols, 1.9 * rows + 0.6), squeeze=False)
    size = x.shape[-1]
    for r in range(rows):
        rgb = (x[r].permute(1, 2, 0).numpy() * np.array(STD) + np.array(MEAN)).clip(0, 1)
        axes[r, 0].imshow(rgb)
        axes[r, 0].set_ylabel(names[r], fontsize=10)
        for c, m in enumerate(maps[r], start=1):
            axes[r, c].imshow(m, extent=(0, size, size, 0), interpolation="nearest")
        for c in range(cols):
            axes[r, c].set_xticks([])
            axes[r, c].set_yticks([])
            if r == 0:
                axes[r, c].set_title("image" if c == 0 else titles[c - 1], fontsize=11)
    fig.suptitle(suptitle, fontsize=13)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / fig.get_figheight()))  # room for the title
    return fig


def _save(fig, path: Path, tag: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    with event_writer(path.parent, path.stem) as writer:
        writer.add_figure(tag, fig, 0)  # closes the figure
    return path


@dataclass
class BackboneMaps:
    """What one backbone gives the figures: per image, an RGB map per block, and its compare block's features."""

    name: str
    out_dir: Path
    blocks: list[int]
    maps: list[list[np.ndarray]]  # [image][block] (rows, cols, 3)
    compare_block: int
    grid: tuple[int, int]
    compare_feats: torch.Tensor  # (images, patches, C)


# Every key of configs/pca.yaml and its rule (eval/shared/settings_rules.py).
RULES = {
    **COMMON,
    "images": optional(text()),
    "roots.default": text(),
    "num_images": integer(1),
    "image_size": integer(1),  # a multiple of the patch: per backbone
    "layers": BLOCKS_OR_ALL,
    "feature": one_of(*FEATURES),
    "compare_layer": BLOCK,
    "foreground_threshold": optional(number(0, 1)),
}


def check_settings(cfg: DictConfig) -> tuple[torch.device, float | None, str]:
    """Every check of the user's input that needs no backbone; returns the device, threshold and file stem."""
    check_rules(cfg, RULES)
    require_feature_out_for_norm(cfg)
    threshold = None if cfg.foreground_threshold is None else float(cfg.foreground_threshold)
    stem = "pca" + ("" if cfg.feature == "out" else f"-{cfg.feature}") + ("-masked" if threshold is not None else "")
    return resolve_device(cfg.device), threshold, stem


def compute_maps(spec: BackboneSpec, x: torch.Tensor, cfg: DictConfig, device: torch.device,
                 threshold: float | None) -> BackboneMaps:
    """The PCA maps of every chosen block of one backbone, from one forward pass."""
    model = load_spec(spec, device, seed=cfg.seed)
    depth = len(model.blocks)
    blocks = resolve_layers(cfg.layers, depth)
    compare = resolve_layers(cfg.compare_layer, depth)[0]
    grid = patch_grid(model, *x.shape[-2:])
    feats = block_features(model, x.to(device), sorted(set(blocks) | {compare}), cfg)
    maps = [pca_rows([feats[b][i] for b in blocks], grid, threshold) for i in range(x.shape[0])]
    return BackboneMaps(spec.name, spec.out_dir, blocks, maps, compare, grid, feats[compare])


def checkpoint_maps(results: list[BackboneMaps], threshold: float | None) -> list[list[np.ndarray]]:
    """Per image, one map per backbone at its compare block; signs aligned along the row when grids match."""
    n = results[0].compare_feats.shape[0]
    if len({r.grid for r in results}) == 1:  # same patches: signs aligned from checkpoint to checkpoint
        return [pca_rows([r.compare_feats[i] for r in results], results[0].grid, threshold) for i in range(n)]
    return [[pca_rows([r.compare_feats[i]], r.grid, threshold)[0] for r in results] for i in range(n)]  # each alone


def run(cfg: DictConfig) -> dict[str, Any]:
    """Draw the PCA grids of every backbone of ``cfg.ckpt``; returns the written paths."""
    device, threshold, stem = check_settings(cfg)
    set_cpu_threads(cfg.cpu_threads, 0)  # the images are read in this process
    specs = backbones_to_evaluate(cfg, floor=False)  # PCA's floor is a column of each grid, not a grid of its own
    images = load_images(cfg)
    names, x = images.names, images.x
    written: dict[str, Any] = {"blocks": {}, "checkpoints": None, "skipped": images.skipped}
    print(f"pca of each block's {FEATURE_WORDS[cfg.feature]}: {len(names)} images at {cfg.image_size} px, blocks "
          f"{cfg.layers}, compare block {cfg.compare_layer}"
          + (", a random-init column" if cfg.random_floor else "") + f"; backbones: {', '.join(s.name for s in specs)}",
          flush=True)
    results, floors = [], {}
    for spec in specs:
        r = compute_maps(spec, x, cfg, device, threshold)
        results.append(r)
        maps, titles = r.maps, [f"block {b}" for b in r.blocks]
        if cfg.random_floor and not spec.is_random:
            floor = floors.get(repr(spec.args))
            if floor is None:  # one random init per architecture, shared by the backbones that have it
                floor = compute_maps(BackboneSpec(RANDOM, None, spec.out_dir, dict(spec.args), RANDOM), x, cfg,
                                     device, threshold)
                floors[repr(spec.args)] = floor
            maps = [row + [pca_rows([floor.compare_feats[i]], floor.grid, threshold)[0]] for i, row in enumerate(maps)]
            titles.append(f"random init, block {floor.compare_block}")
        fig = grid_figure(x, names, maps, titles, f"{r.name}: PCA of each block's {FEATURE_WORDS[cfg.feature]}"
                          + (" (last column: the same architecture at initialisation)" if len(titles) > len(r.blocks)
                             else ""))
        written["blocks"][r.name] = _save(fig, r.out_dir / f"{stem}-blocks.png", f"{stem}/blocks")
        print(f"{r.name}: {written['blocks'][r.name]}", flush=True)
    if len(results) > 1:
        shown = sorted({r.compare_block for r in results})
        fig = grid_figure(x, names, checkpoint_maps(results, threshold), [f"{r.name} ({r.compare_block})" for r in results],
                          f"PCA of the {FEATURE_WORDS[cfg.feature]} of block {', '.join(map(str, shown))}")
        path = compare_dir(cfg.runs_root, cfg.out) / f"{stem}-checkpoints-block{'-'.join(map(str, shown))}.png"
        written["checkpoints"] = _save(fig, path, f"{stem}/checkpoints")
        print(f"checkpoints: {path}", flush=True)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_user_error(lambda: run(load_config("pca", argv)))

