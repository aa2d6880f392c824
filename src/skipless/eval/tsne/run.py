"""t-SNE of class-token features: ``python -m skipless.eval.tsne dataset=default ckpt="runs/a runs/b"`` (``make tsne``).

Seed 002 (Zhang et al., Figure 3) shows the class tokens of an MAE with standard residual connections
beside those of its decayed shortcuts, embedded by t-SNE: test images of 10 random ImageNet-100
classes, where the baseline's harder classes collapse together and the decayed shortcuts form clusters.
For any backbone of ``ckpt`` (``eval/shared/backbones.py``):

1. the classes and images (``eval/tsne/points.py``): ``num_classes`` classes of the ``split`` drawn with
   ``seed`` (all of them when the split has fewer), every image of each or a seeded ``max_per_class``;
2. the feature of each image (``feature``): the CLS token of the last block after the final norm, from
   the global features of ``make knn`` / ``make linear`` (``eval/shared/global_features.py``): sliced
   from their cache of the whole split when an earlier run left it, else extracted for the chosen
   images alone (and cached for the next run);
3. scikit-learn's ``TSNE`` to 2-D (``eval/tsne/embed.py``; ``perplexity``, ``max_iter``, ``init``,
   ``learning_rate``, ``metric``, ``random_state=seed``);
4. a scatter plot coloured by class with a legend (``eval/tsne/figures.py``).

Settings are checked before any backbone is resolved or file written, the perplexity against the
number of points once they are chosen (labels only, no image read). Per backbone,
``<run>/eval/<stem>.png``, ``<stem>.json`` (settings, classes, every point with its class and image) and
a TensorBoard image in ``<run>/eval/tb/<stem>/``; with several backbones, the panels side by side in
``<runs_root>/compare/<stem>.png`` (and its TensorBoard image in ``compare/tb/``). ``<stem>`` is
``tsne-<dataset>``, with ``-pooled`` after ``tsne`` for ``feature=pooled`` and ``-train`` at the end for
``split=train``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from skipless.config import ConfigError, load_config
from skipless.config.rules import Rule, either, integer, is_int, is_real, number, one_of, optional
from skipless.data.classification.registry import classification_split
from skipless.errors import exit_on_user_error
from skipless.devices.cpu_threads import set_cpu_threads

from ..shared.backbones import BackboneSpec
from ..shared.global_eval import (POOLED_FAMILIES, refuse_cls_without_token, GlobalSettings, Subset, cached_features, loader_workers, resolve_settings,
                                  split_features, write_json)
from ..shared.global_features import describe
from ..shared.output_dirs import backbones_to_evaluate
from ..shared.report import compare_dir
from ..shared.tb_events import event_writer
from .embed import tsne_2d
from .figures import scatter_figure
from .points import choose_points

RULES = {
    "split": one_of("val", "train"),
    "num_classes": integer(1),
    "max_per_class": optional(integer(1)),
    "feature": one_of("cls", "pooled"),
    "perplexity": number(0, low_open=True),
    "max_iter": Rule(lambda v: is_int(v) and v > 250,
                     "an integer > 250 (scikit-learn spends its first 250 iterations in early exaggeration)"),
    "init": one_of("pca", "random"),
    "learning_rate": either(one_of("auto"), Rule(lambda v: is_real(v) and v > 0, "a number > 0")),
    "metric": one_of("euclidean", "cosine"),
}

FEATURE_WORDS = {"cls": "CLS tokens", "pooled": "pooled features"}


def result_stem(cfg: DictConfig, dataset: str) -> str:
    """``tsne[-pooled]-<dataset>[-train]`` (module docstring)."""
    return (f"tsne{'' if cfg.feature == 'cls' else '-' + str(cfg.feature)}-{dataset}"
            f"{'' if cfg.split == 'val' else '-' + str(cfg.split)}")


def check_perplexity(cfg: DictConfig, n_points: int) -> None:
    """t-SNE's perplexity (about the number of neighbours each point weighs) must stay below the points."""
    if float(cfg.perplexity) >= n_points:
        raise ConfigError(f"perplexity must be less than the number of points shown ({n_points} images of the "
                          f"{cfg.split} split), got {cfg.perplexity}; lower it or show more (num_classes, max_per_class)")


def point_features(settings: GlobalSettings, spec: BackboneSpec, dataset: Any,
                   indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """``(features (n, D), labels (n,), dataset indices (n,), how they were had)`` of the chosen images that
    could be read: sliced from the whole split's cache when there is one, else extracted for them alone."""
    cfg = settings.cfg
    full = cached_features(settings, spec, dataset, str(cfg.split))
    if full is not None:
        rows = indices[full.valid[indices]]
        x = full.cls[rows, -1] if cfg.feature == "cls" else full.pooled[rows]
        return x, full.labels[rows], rows, {"reused": True, "extract_s": 0.0, "folder": str(full.folder),
                                            "skipped": [s for s in full.skipped], "model": None}
    feats, info, extract_s, _ = split_features(settings, spec, {str(cfg.split): Subset(dataset, indices)})
    f = feats[str(cfg.split)]
    x = f.cls[f.valid, -1] if cfg.feature == "cls" else f.pooled[f.valid]
    return x, f.labels[f.valid], indices[f.valid], {"reused": f.reused, "extract_s": extract_s,
                                                     "folder": str(f.folder) if f.folder else None,
                                                     "skipped": f.skipped, "model": info}


def save_figure(fig, png: Path, tb_dir: Path, tb_name: str | None) -> Path:
    """The PNG, then the same figure as a TensorBoard image (which closes it)."""
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    with event_writer(tb_dir, tb_name) as writer:
        writer.add_figure(png.stem, fig, 0)
    return png


def evaluate_backbone(settings: GlobalSettings, spec: BackboneSpec, dataset: Any, classes: list[int],
                      indices: np.ndarray, stem: str) -> tuple[dict, np.ndarray, np.ndarray]:
    """Features, embedding, figure and JSON of one backbone; returns the JSON, the points and their labels."""
    cfg = settings.cfg
    t0 = time.perf_counter()
    x, labels, rows, got = point_features(settings, spec, dataset, indices)
    check_perplexity(cfg, len(rows))  # again: unreadable images may have left fewer points
    t1 = time.perf_counter()
    points, report = tsne_2d(x, perplexity=cfg.perplexity, max_iter=cfg.max_iter, init=str(cfg.init),
                             learning_rate=cfg.learning_rate, metric=str(cfg.metric), seed=int(cfg.seed))
    tsne_s = time.perf_counter() - t1
    names, config = dataset.class_names, OmegaConf.to_container(cfg, resolve=True)
    title = f"{spec.name}: t-SNE of {FEATURE_WORDS[str(cfg.feature)]}, {settings.dataset} {cfg.split}"
    fig = scatter_figure([(spec.name, points, labels)], classes, names, title)
    png = save_figure(fig, spec.out_dir / f"{stem}.png", spec.out_dir, stem)
    result = {
        "evaluation": "tsne", "dataset": settings.dataset, "split": str(cfg.split), "backbone": spec.name,
        "checkpoint": str(spec.path) if spec.path else spec.kind, "feature": str(cfg.feature),
        "settings": {k: config[k] for k in ("num_classes", "max_per_class", "perplexity", "max_iter", "init",
                                             "learning_rate", "metric", "seed")},
        "classes": [{"label": c, "name": names[c], "points": int((labels == c).sum())} for c in classes],
        "num_points": int(len(rows)), **report, "figure": str(png),
        "points": [{"x": float(p[0]), "y": float(p[1]), "label": int(lab), "class": names[int(lab)],
                    "image": describe(dataset, int(i))} for p, lab, i in zip(points, labels, rows)],
        "skipped": got["skipped"], "model": got["model"], "resize": settings.resize, "crop": settings.crop,
        "timings": {"features_s": got["extract_s"], "tsne_s": tsne_s, "total_s": time.perf_counter() - t0,
                    "cache_reused": got["reused"]},
        "cache": got["folder"], "config": config}
    write_json(spec.out_dir / f"{stem}.json", result)
    return result, points, labels


def run_tsne(cfg: DictConfig) -> dict[str, dict]:
    """The t-SNE of every backbone of ``cfg.ckpt``; returns ``{backbone name: result}``."""
    settings = resolve_settings(cfg, RULES)
    set_cpu_threads(cfg.cpu_threads, loader_workers(cfg))
    specs = backbones_to_evaluate(cfg, families=POOLED_FAMILIES)
    if cfg.feature == "cls":
        refuse_cls_without_token(specs, "feature=cls", "feature=pooled")
    dataset = classification_split(settings.dataset, settings.root, str(cfg.split))
    classes, indices = choose_points(dataset.labels, int(cfg.num_classes),
                                     None if cfg.max_per_class is None else int(cfg.max_per_class), int(cfg.seed))
    check_perplexity(cfg, len(indices))
    stem = result_stem(cfg, settings.dataset)
    names = dataset.class_names
    print(f"tsne {settings.dataset} {cfg.split}: {len(indices)} images of {len(classes)} classes "
          f"({', '.join(names[c] for c in classes)}), {FEATURE_WORDS[str(cfg.feature)]}, perplexity {cfg.perplexity}, "
          f"backbones: {', '.join(s.name for s in specs)}", flush=True)
    results, panels = {}, []
    for spec in specs:
        r, points, labels = evaluate_backbone(settings, spec, dataset, classes, indices, stem)
        results[spec.name] = r
        panels.append((spec.name, points, labels))
        t = r["timings"]
        print(f"  {spec.name}: {r['num_points']} points, KL {r['kl_divergence']:.2f} [features {t['features_s']:.0f} s"
              f"{' (cached)' if t['cache_reused'] else ''}, t-SNE {t['tsne_s']:.0f} s] -> {r['figure']}", flush=True)
    if len(specs) > 1:
        folder = compare_dir(cfg.runs_root, cfg.out)
        fig = scatter_figure(panels, classes, names, f"t-SNE of {FEATURE_WORDS[str(cfg.feature)]}, {settings.dataset} {cfg.split}")
        path = save_figure(fig, folder / f"{stem}.png", folder, stem)
        print(f"side by side: {path}", flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_user_error(lambda: run_tsne(load_config("tsne", argv)))
    return 0
