"""Dense linear-probe segmentation: ``python -m skipless.eval.probe dataset=voc multiscale=1 [ckpt="runs/a random"]``.

The paper's first evaluation (Section 6.2.1, Table 2): frozen features of one
block (the last) or of several blocks concatenated (multiscale), a linear 1x1 head, 30 epochs, a
learning-rate sweep with the best reported, mIoU on the whole validation split. ``make probe``
calls this with DATASET / MULTISCALE / LAYER / CKPT / ARGS mapped onto ``configs/probe.yaml``.

The shape every evaluator has: settings resolved once (``settings``), then per backbone
(``eval/shared/backbones.py``) the compute (``compute``: features cached once, every head trained
side by side over the cache, scored at the original label resolution with ``miou``), then the
outputs (``outputs``: JSON, figure, head, predictions, TensorBoard under ``<run>/eval/``, or
``<out>/<backbone>/`` with ``out=<folder>``). Settings and output folders are checked before any
backbone is loaded or data read.

With several backbones the mIoUs are printed as one markdown table, also written to
``<runs_root>/compare/probe-<dataset>[-ms|-both].md`` (``<out>/compare/`` with ``out``; one file per
head choice, so a single-block and a multiscale run keep both tables). mIoU values are in percent, as in the paper.
"""
from __future__ import annotations

import sys
from typing import Any, Sequence

import torch
from omegaconf import DictConfig

from skipless.config import load_config
from skipless.devices.cpu_threads import loader_workers, set_cpu_threads
from skipless.data import build_split
from skipless.errors import exit_on_user_error

from ..shared.backbones import BackboneSpec
from ..shared.output_dirs import backbones_to_evaluate
from ..shared.report import compare_dir, markdown_table, write_text
from .compute import probe_backbone
from .outputs import open_writers, write_outputs
from .settings import GROUPS, ProbeSettings, resolve_settings


def comparison_table(specs: Sequence[BackboneSpec], results: dict[str, dict[str, dict]],
                     groups: Sequence[str]) -> str:
    """One markdown table: a row per backbone, an mIoU (and best lr) column per head group."""
    headers = ["backbone", "residual", "init"]
    for g in groups:
        headers += [f"{GROUPS[g][1]} mIoU", f"{GROUPS[g][1]} lr"]
    rows = []
    for spec in specs:
        row = [spec.name, spec.args.get("residual"), spec.args.get("init")]
        for g in groups:
            r = results[spec.name][g]
            row += [r["miou"], f"{r['best_lr']:g}"]
        rows.append(row)
    return markdown_table(headers, rows)


def _splits(settings: ProbeSettings) -> tuple[Any, Any]:
    data, seed = settings.data, int(settings.cfg.seed)
    return tuple(build_split(settings.dataset, settings.root, data[f"{which}_split"], data[f"{which}_subset"], seed)
                 for which in ("train", "val"))


def _report(settings: ProbeSettings, spec: BackboneSpec, results: dict[str, dict]) -> None:
    for g, r in results.items():
        t = r["timings"]
        if r["resolution_note"]:
            print(f"  {spec.name}: {r['resolution_note']}", flush=True)
        print(f"  {spec.name} {GROUPS[g][1]} (blocks {r['layers']}): mIoU {r['miou']:.1f} at lr {r['best_lr']:g} "
              f"[features {t['extract_train_s'] + t['extract_val_s']:.0f} s, heads {t['train_s']:.0f} s, "
              f"scoring {t['eval_s']:.0f} s, total {t['total_s']:.0f} s] -> {spec.out_dir}/probe-{settings.dataset}"
              f"{GROUPS[g][0]}.json", flush=True)


def run_probe(cfg: DictConfig) -> dict[str, dict[str, dict]]:
    """Probe every backbone of ``cfg.ckpt``; returns ``{backbone name: {group: result}}``."""
    settings = resolve_settings(cfg)
    set_cpu_threads(cfg.cpu_threads, loader_workers(cfg.num_workers))
    specs = backbones_to_evaluate(cfg)
    train_ds, val_ds = _splits(settings)
    print(f"probe {settings.dataset}: {len(train_ds)} train / {len(val_ds)} val images, {train_ds.num_classes} classes, "
          f"{'+'.join(GROUPS[g][1] for g in settings.groups)}, lrs {list(settings.lrs)}, {cfg.epochs} epochs, "
          f"backbones: {', '.join(s.name for s in specs)}", flush=True)
    results = {}
    for spec in specs:
        writers = open_writers(settings, spec.out_dir)
        try:
            run = probe_backbone(settings, spec, train_ds, val_ds,
                                 log=lambda g, tag, value, step: writers[g].add_scalar(tag, value, step))
        except BaseException:
            for w in writers.values():
                w.close()
            raise
        try:
            results[spec.name] = write_outputs(settings, run, train_ds, val_ds, writers)
        finally:
            run.release()
        _report(settings, spec, results[spec.name])
    table = comparison_table(specs, results, settings.groups)
    print(table, end="")
    if len(specs) > 1:
        sizes = sorted({r["resolution"] for by_group in results.values() for r in by_group.values()})
        caption = (f"Dense linear probe on {settings.dataset}: mIoU (%) of the best of lrs {list(settings.lrs)}, "
                   f"{cfg.epochs} epochs, {'/'.join(map(str, sizes))} px, val split of {len(val_ds)} images.\n\n")
        path = write_text(compare_dir(cfg.runs_root, cfg.out) / f"{settings.table_stem}.md", caption + table)
        print(f"table written to {path}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_user_error(lambda: run_probe(load_config("probe", argv)))
    return 0

