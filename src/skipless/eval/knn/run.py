"""Weighted k-NN classification of frozen global features: ``python -m skipless.eval.knn dataset=default ckpt="runs/a random"``.

DINO's k-NN evaluation (Caron et al. 2021, Section 4.1; facebookresearch/dino ``eval_knn.py``, after
Wu et al. 2018): every image's feature is the CLS token after the final norm (``eval/shared/global_features.py``),
L2-normalised; each validation image takes the ``k`` training images of highest cosine similarity,
and each votes for its class with weight ``exp(sim / T)``, T = 0.07. Top-1 is the class with the most
weight; top-5 counts the validation image when its class is among the five heaviest (a class with no
vote never counts: DINO's sort places zero-vote classes in any order). All ``ks`` (DINO's 10, 20, 100,
200) come from one search of the ``max(ks)`` nearest neighbours (``skipless.analysis.knn.iter_knn_votes``);
``report_k`` (20, "usually working the best" in DINO's script) is the headline number. A k above the
number of training images uses them all (said in the output and the JSON). Accuracies in percent.

Per backbone, ``<run>/eval/knn-<dataset>.json`` (``<out>/<backbone>/`` with ``out=``) and TensorBoard
scalars in ``<run>/eval/tb/knn-<dataset>/`` (``write_events``); the table
(rows backbones, columns k) is printed, and with several backbones written to
``<runs_root>/compare/knn-<dataset>.md``. The features are cached and shared with ``make linear``.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from skipless.analysis.knn import iter_knn_votes
from skipless.config import ConfigError, load_config
from skipless.config.rules import Rule, is_int, non_empty_list, number
from skipless.errors import exit_on_user_error
from skipless.devices.cpu_threads import set_cpu_threads

from ..shared.backbones import BackboneSpec
from ..shared.global_eval import (POOLED_FAMILIES, GlobalSettings, backbone_features, describe_splits, features_summary, finish_table,
                                  load_splits, loader_workers, resolve_settings, write_json)
from ..shared.output_dirs import backbones_to_evaluate
from ..shared.report import markdown_table
from ..shared.tb_events import event_writer

RULES = {
    "ks": non_empty_list(Rule(lambda v: is_int(v) and v >= 1, "k"), "integers >= 1"),
    "report_k": Rule(lambda v: is_int(v) and v >= 1, "an integer >= 1"),
    "temperature": number(0, low_open=True),
    "chunk": Rule(lambda v: is_int(v) and v >= 1, "an integer >= 1"),
}


def check_settings(cfg: DictConfig) -> tuple[GlobalSettings, list[int]]:
    """Every check that needs no backbone; returns the common settings and the sorted, unique ks."""
    settings = resolve_settings(cfg, RULES)
    ks = sorted(set(int(k) for k in cfg.ks))
    if int(cfg.report_k) not in ks:
        raise ConfigError(f"report_k must be one of ks {ks}, got {cfg.report_k}")
    return settings, ks


@torch.no_grad()
def knn_scores(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, test_y: torch.Tensor,
               ks: Sequence[int], temperature: float = 0.07, num_classes: int | None = None,
               chunk: int = 1024) -> dict[int, dict[str, float]]:
    """``{k: {"top1": %, "top5": %}}`` of the weighted k-NN vote (module docstring), every k from one search."""
    num_classes = int(num_classes if num_classes is not None else max(train_y.max(), test_y.max()) + 1)
    hits: dict[int, torch.Tensor] = {}  # per k, (top-1, top-5) counts on the device: read once, at the end
    for start, votes in iter_knn_votes(train_x, train_y, test_x, ks, temperature, num_classes, chunk):
        target = test_y[start:start + chunk].long().to(next(iter(votes.values())).device)
        for k, v in votes.items():
            mine = v.gather(1, target[:, None])
            top1, top5 = v.argmax(1) == target, (mine[:, 0] > 0) & ((v > mine).sum(1) < 5)
            chunk_hits = torch.stack((top1.sum(), top5.sum()))
            hits[k] = hits[k] + chunk_hits if k in hits else chunk_hits
    n = max(int(test_y.shape[0]), 1)
    counts = {k: hits[k].tolist() if k in hits else [0, 0] for k in ks}
    return {k: {"top1": 100.0 * one / n, "top5": 100.0 * five / n} for k, (one, five) in counts.items()}


def comparison_table(specs: Sequence[BackboneSpec], results: dict[str, dict], ks: Sequence[int], report_k: int) -> str:
    """Rows backbones; columns top-1 at every k, then top-5 at ``report_k``."""
    headers = ["backbone", "residual", "init", *[f"top-1 k={k}" for k in ks], f"top-5 k={report_k}"]
    rows = []
    for spec in specs:
        r = results[spec.name]["k"]
        rows.append([spec.name, spec.args.get("residual"), spec.args.get("init"), *[r[k]["top1"] for k in ks],
                     r[report_k]["top5"]])
    return markdown_table(headers, rows)


def evaluate_backbone(settings: GlobalSettings, spec: BackboneSpec, train: Any, val: Any, ks: list[int]) -> dict:
    """Features (cached) and k-NN scores of one backbone, as its JSON."""
    cfg = settings.cfg
    feats = backbone_features(settings, spec, train, val)
    t0 = time.perf_counter()
    device = settings.device
    scores = knn_scores(feats.train.knn().to(device), feats.train.valid_labels().to(device), feats.val.knn().to(device),
                        feats.val.valid_labels().to(device), ks, float(cfg.temperature), train.num_classes,
                        int(cfg.chunk))
    knn_s = time.perf_counter() - t0
    clamped = [k for k in ks if k > feats.train.n_valid]
    report_k = int(cfg.report_k)
    return {"evaluation": "knn", "dataset": settings.dataset, "backbone": spec.name,
            "checkpoint": str(spec.path) if spec.path else spec.kind,
            "top1": scores[report_k]["top1"], "top5": scores[report_k]["top5"], "report_k": report_k,
            "k": scores, "k_above_train_images": clamped, "temperature": float(cfg.temperature),
            "num_classes": train.num_classes, "resize": settings.resize, "crop": settings.crop,
            **features_summary(feats),
            "timings": {"features_s": feats.extract_s, "knn_s": knn_s, "total_s": feats.total_s + knn_s,
                        "cache_reused": feats.reused},
            "config": OmegaConf.to_container(cfg, resolve=True)}


def write_events(spec: BackboneSpec, result: dict) -> None:
    """TensorBoard, in the backbone's ``tb/knn-<dataset>``: top-1 and top-5 against k (step = k), and the
    reported top-1 at step 0."""
    stem = f"knn-{result['dataset']}"
    with event_writer(spec.out_dir, stem) as writer:
        for k, s in result["k"].items():
            writer.add_scalar(f"{stem}/top1_per_k", s["top1"], int(k))
            writer.add_scalar(f"{stem}/top5_per_k", s["top5"], int(k))
        writer.add_scalar(f"{stem}/top1", result["top1"], 0)


def run_knn(cfg: DictConfig) -> dict[str, dict]:
    """k-NN on every backbone of ``cfg.ckpt``; returns ``{backbone name: result}``."""
    settings, ks = check_settings(cfg)
    set_cpu_threads(cfg.cpu_threads, loader_workers(cfg))
    specs = backbones_to_evaluate(cfg, families=POOLED_FAMILIES)
    train, val = load_splits(settings)
    print(f"knn {describe_splits(settings, train, val)}, k {ks}, T {cfg.temperature:g}, "
          f"backbones: {', '.join(s.name for s in specs)}", flush=True)
    results = {}
    for spec in specs:
        r = results[spec.name] = evaluate_backbone(settings, spec, train, val, ks)
        path = write_json(spec.out_dir / f"knn-{settings.dataset}.json", r)
        write_events(spec, r)
        t = r["timings"]
        note = f" (k {r['k_above_train_images']} above the {r['train_images']} train images: all used)" \
            if r["k_above_train_images"] else ""
        print(f"  {spec.name}: {r['report_k']}-NN top-1 {r['top1']:.1f}, top-5 {r['top5']:.1f}{note} "
              f"[features {t['features_s']:.0f} s{' (cached)' if t['cache_reused'] else ''}, "
              f"k-NN {t['knn_s']:.1f} s] -> {path}", flush=True)
    caption = (f"Weighted k-NN (T={cfg.temperature:g}) on {settings.dataset}: top-1 (%) per k and top-5 (%) at "
               f"k={cfg.report_k}, CLS after the final norm, {settings.resize} -> {settings.crop} px, "
               f"{len(val)} val images.")
    finish_table(comparison_table(specs, results, ks, int(cfg.report_k)), caption, f"knn-{settings.dataset}",
                 specs, cfg)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_user_error(lambda: run_knn(load_config("knn", argv)))
    return 0

