"""What the probe writes for one backbone, from a computed ``ProbeRun``, into ``<run>/eval/``.

    probe-<dataset>[-ms].json        mIoU of the best lr, per-class IoU, the whole sweep, layers,
                                     resolution (and how it was chosen), checkpoint, timings, config
    probe-<dataset>[-ms].png         a few val images | ground truth | prediction
    probe-<dataset>[-ms]-head.pt     the best head (BatchNorm statistics + linear map)
    probe-<dataset>[-ms]-pred/       every val prediction as a palette PNG (save_predictions=true)
    tb/probe-<dataset>[-ms]/         TensorBoard: loss and monitor mIoU per lr, final mIoU, figure

mIoU values are in percent, as in the paper.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf

from ..shared.lr_sweep import sweep_edge
from ..shared.report import result_json, shown_args, write_text
from ..shared.tb_events import SweepWriter
from .compute import ProbeRun, best_index, ids_hash
from .feature_cache import FeatureCache
from .figures import example_figure, figure_array, save_prediction
from .linear_probe import LinearHeads, evaluate_full, upsample_argmax
from .settings import GROUPS, ProbeSettings

# The mIoU (a fraction) by which a best lr at the sweep's edge must beat every other lr before the probe says
# "extend lrs": half a point, a choice and not a measured noise level (the papers give mIoU to 0.1; a gain below
# 0.5 at the edge is not read as a trend worth widening the sweep for).
EDGE_MARGIN = 0.005


def pct(x: float | None) -> float | None:
    return None if x is None or np.isnan(x) else round(100.0 * float(x), 4)


def reset_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    return path


def open_writers(settings: ProbeSettings, out_dir: Path) -> dict[str, Any]:
    """One fresh TensorBoard folder per head group, ``tb/probe-<dataset>[-ms]``."""
    return {g: SweepWriter(out_dir, f"probe-{settings.dataset}{GROUPS[g][0]}") for g in settings.groups}


def _figure(path: Path, heads: LinearHeads, key: tuple[str, int], cache: FeatureCache, dataset: Any, count: int,
            device: torch.device, heading: str) -> Path | None:
    valid = np.flatnonzero(cache.valid)
    if count <= 0 or not len(valid):
        return None
    picks = valid[np.unique(np.linspace(0, len(valid) - 1, min(count, len(valid))).round().astype(int))]
    images, targets, preds = [], [], []
    with torch.no_grad():
        for i in picks:
            feats, _ = cache.batch(np.array([i]), device)
            target = dataset.mask(int(i))
            images.append(dataset.image(int(i)))
            targets.append(target)
            logits = heads.group_logits(key[0], feats)
            preds.append(upsample_argmax(logits, target.shape, heads.num_classes)[key[1]].cpu().numpy())
    return example_figure(path, images, targets, preds, [dataset.ids[int(i)] for i in picks], heading,
                          dataset.class_names)


def _save_predictions(settings: ProbeSettings, run: ProbeRun, val_ds: Any, key: tuple[str, int], folder: Path) -> Path:
    """Every val prediction of head ``key`` as a palette PNG; their score must be the reported one."""
    folder = reset_dir(folder)
    again = evaluate_full(run.heads, run.val_cache, val_ds, settings.device, keys=[key],
                          on_prediction=lambda i, k, p: save_prediction(folder / f"{val_ds.ids[i]}.png", p),
                          progress=bool(settings.cfg.progress), desc=f"{run.spec.name}: predictions")
    if not torch.equal(again[key].matrix, run.conf[key].matrix):
        raise RuntimeError(f"the saved predictions of {run.spec.name} do not reproduce the scored ones (a bug)")
    return folder


def group_result(settings: ProbeSettings, run: ProbeRun, group: str, train_ds: Any, val_ds: Any,
                 writer: Any) -> dict[str, Any]:
    """Write the files of one head group (module docstring) and return its JSON content."""
    cfg, spec, lrs = settings.cfg, run.spec, list(settings.lrs)
    suffix, title = GROUPS[group]
    out_dir, stem, epochs = Path(spec.out_dir), f"probe-{settings.dataset}{suffix}", int(cfg.epochs)
    sweep = [{"lr": lr, "miou": pct(run.conf[(group, j)].miou()),
              "pixel_accuracy": pct(run.conf[(group, j)].pixel_accuracy()),
              "final_train_loss": (run.trained.losses[(group, j)] or [None])[-1]} for j, lr in enumerate(lrs)]
    best = best_index(run, group)
    key, conf = (group, best), run.conf[(group, best)]
    edge = sweep_edge(lrs, [run.conf[(group, j)].miou() for j in range(len(lrs))], margin=EDGE_MARGIN)
    if edge:
        print(f"  warning: {spec.name} {title}: the best lr {lrs[best]:g} is the {edge} of the sweep {lrs}; "
              f"the optimum may lie beyond it (extend lrs=[...])", flush=True)
    pred_dir = _save_predictions(settings, run, val_ds, key, out_dir / f"{stem}-pred") if cfg.save_predictions else None
    heading = (f"{spec.name}, {settings.dataset}, {title} (blocks {run.layers[group]}), lr {lrs[best]:g}: "
               f"mIoU {100 * conf.miou():.1f}")
    figure = _figure(out_dir / f"{stem}.png", run.heads, key, run.val_cache, val_ds, int(cfg.figure_images),
                     settings.device, heading)
    torch.save({"lr": lrs[best], "layers": run.layers[group], "state": run.heads.head_state(key),
                "num_classes": train_ds.num_classes, "class_names": list(train_ds.class_names),
                "resolution": run.resolution, "norm": bool(cfg.norm), "bn": bool(cfg.bn),
                "backbone": str(spec.path) if spec.path else "random"}, out_dir / f"{stem}-head.pt")
    train_cache, val_cache = run.train_cache, run.val_cache
    result = {
        "dataset": settings.dataset, "probe": title, "backbone": spec.name,
        "checkpoint": str(spec.path) if spec.path else f"random (seed {int(cfg.seed)})",
        "backbone_args": shown_args(spec.args),
        "miou": pct(conf.miou()), "best_lr": lrs[best], "best_lr_at_edge": edge,
        "pixel_accuracy": pct(conf.pixel_accuracy()),
        "per_class_iou": {cls: pct(v) for cls, v in zip(train_ds.class_names, conf.iou())},
        "sweep": sweep,
        "monitor_miou_at_label_size": {str(e): {f"{lrs[j]:g}": pct(v) for (g, j), v in m.items() if g == group}
                                       for e, m in run.trained.monitor.items()},
        "layers": run.layers[group], "resolution": run.resolution, "resolution_note": run.resolution_note,
        "label_size": run.label_size, "feature_grid": list(train_cache.grid), "epochs": epochs,
        "trained_with": list(settings.groups), "n_train": int(train_cache.valid.sum()),
        "n_val": int(val_cache.valid.sum()),
        "skipped_images": {"train": int((~train_cache.valid).sum()), "val": int((~val_cache.valid).sum())},
        "train_ids_sha1": ids_hash(train_ds.ids), "device": str(settings.device),
        "timings": dict(run.timings),
        "figure": str(figure) if figure else None, "predictions": str(pred_dir) if pred_dir else None,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    for s in sweep:
        writer.add_scalar(f"probe/val_miou/lr={s['lr']:g}", s["miou"] or 0.0, epochs)
    writer.add_scalar("probe/val_miou", result["miou"] or 0.0, epochs)  # the best lr's, on the sweep's chart
    if figure:
        writer.add_image("probe/examples", figure_array(figure), epochs)
    writer.close()
    result["timings"]["total_s"] = time.perf_counter() - run.started
    write_text(out_dir / f"{stem}.json", result_json(result))
    return result


def write_outputs(settings: ProbeSettings, run: ProbeRun, train_ds: Any, val_ds: Any,
                  writers: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every head group's files (module docstring); returns ``{group: JSON content}``."""
    return {g: group_result(settings, run, g, train_ds, val_ds, writers[g]) for g in settings.groups}
