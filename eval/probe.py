"""Dense linear-probe segmentation: ``python -m eval.probe dataset=voc multiscale=1 [ckpt="runs/a random"]``.

The paper's first evaluation (Section 6.2.1, Table 2; SPEC section 6): frozen features of one
block (the last) or of several blocks concatenated (multiscale), a linear 1x1 head, 30 epochs, a
learning-rate sweep with the best reported, mIoU on the whole validation split. ``make probe``
calls this with DATASET / MULTISCALE / CKPT / ARGS mapped onto ``configs/probe.yaml``.

Flow per backbone (``eval/backbones.py``): features of the train and val images, computed once
(``feature_cache.py``) -> every head (each lr, single and multiscale when both are asked) trained
side by side over the cache (``linear_probe.py``) -> scored at the original label resolution
(``miou.py``) -> results under ``<run>/eval/``:

    probe-<dataset>[-ms].json        mIoU of the best lr, per-class IoU, the whole sweep, layers,
                                     resolution, checkpoint, timings, the resolved config
    probe-<dataset>[-ms].png         a few val images | ground truth | prediction
    probe-<dataset>[-ms]-head.pt     the best head (BatchNorm statistics + linear map)
    probe-<dataset>[-ms]-pred/       every val prediction as a palette PNG (save_predictions=true)
    tb/probe-<dataset>[-ms]/         TensorBoard: loss and monitor mIoU per lr, final mIoU, figure

With several backbones the mIoUs are printed as one markdown table, also written to
``<runs_root>/compare/probe-<dataset>.md``. mIoU values are in percent, as in the paper.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from skipless.config import ConfigError, load_config
from skipless.data.errors import DatasetNotFoundError, MalformedDatasetError
from skipless.models.checkpoint import BackboneLoadError

from .backbones import BackboneNotFoundError, BackboneSpec, load_spec, resolve_backbones, resolve_device
from .feature_cache import FeatureCache, build_cache, resolve_layers
from .linear_probe import LinearHeads, cache_batches, evaluate_cached, evaluate_full, train_heads, upsample_argmax
from .probe_outputs import example_figure, figure_array, save_prediction
from .report import compare_dir, markdown_table, write_text
from .seg_datasets import DATASETS, Mirrored, UnknownDatasetError, build_split

GROUPS = {"single": ("", "single"), "ms": ("-ms", "multiscale")}  # name -> (file suffix, title)


def parse_multiscale(value: Any) -> list[str]:
    """``multiscale`` -> head groups: 0 -> [single], 1 -> [ms], both -> [single, ms]."""
    text = str(value).strip().lower()
    if text in ("0", "false", "no", "single"):
        return ["single"]
    if text in ("1", "true", "yes", "ms"):
        return ["ms"]
    if text == "both":
        return ["single", "ms"]
    raise ConfigError(f"multiscale must be 0, 1 or both, got {value!r}")


def spread_layers(depth: int, count: int) -> list[int]:
    """``count`` blocks spread evenly over ``depth``, ending at the last: 12, 4 -> [2, 5, 8, 11]."""
    if count < 1:
        raise ConfigError(f"ms_blocks must be at least 1, got {count}")
    return sorted({max(0, round((k + 1) * depth / count) - 1) for k in range(count)})


def group_layers(cfg: DictConfig, groups: Sequence[str], depth: int) -> dict[str, list[int]]:
    """The blocks each head group reads, as non-negative indices."""
    try:
        layers = {"single": resolve_layers([int(cfg.layer)], depth)}
        ms = cfg.ms_layers
        layers["ms"] = (spread_layers(depth, int(cfg.ms_blocks)) if ms is None
                        else resolve_layers([int(ms)] if isinstance(ms, int) else [int(i) for i in ms], depth))
    except ValueError as err:
        raise ConfigError(f"{err} (keys layer / ms_layers)") from err
    return {g: layers[g] for g in groups}


def dataset_settings(cfg: DictConfig) -> DictConfig:
    """``datasets.<dataset>`` of the config; an unknown name lists the known ones."""
    name = str(cfg.dataset)
    if name not in DATASETS:
        raise UnknownDatasetError(f"unknown dataset {name!r}; expected one of: {', '.join(DATASETS)}")
    if name not in cfg.datasets:
        raise ConfigError(f"configs/probe.yaml has no datasets.{name} block")
    return cfg.datasets[name]


def probe_sizes(settings: DictConfig, patch: int) -> tuple[int, int]:
    """(input resolution, label resolution); the input must be a multiple of the patch size."""
    resolution = int(settings.resolution)
    if resolution <= 0 or resolution % patch:
        raise ConfigError(f"resolution {resolution} is not a positive multiple of the patch size {patch}")
    label = settings.label_size
    label = max(1, resolution // 4) if label is None else int(label)
    return resolution, label


def _ids_hash(ids: Sequence[str]) -> str:
    return hashlib.sha1("\n".join(ids).encode()).hexdigest()[:12]


def _backbone_key(spec: BackboneSpec, seed: int) -> dict[str, Any]:
    if spec.is_random:
        return {"random": True, "seed": int(seed), "args": json.loads(json.dumps(spec.args, default=str))}
    stat = Path(spec.path).stat()
    return {"path": str(Path(spec.path).resolve()), "mtime_ns": stat.st_mtime_ns, "size": stat.st_size}


def _num_workers(value: Any) -> int:
    return min(8, os.cpu_count() or 1) if value is None else int(value)


def _pct(x: float) -> float | None:
    return None if x is None or np.isnan(x) else round(100.0 * float(x), 4)


def _reset_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _cache(cfg: DictConfig, model: torch.nn.Module, spec: BackboneSpec, dataset: Any, which: str,
           layers: list[int], resolution: int, label_size: int, device: torch.device) -> FeatureCache:
    key = {"backbone": _backbone_key(spec, cfg.seed), "dataset": dataset.name,
           "split": f"{which}:{getattr(dataset, 'split', '')}",
           "ids": _ids_hash(dataset.ids), "amp": bool(cfg.amp and device.type == "cuda")}
    folder = None
    if cfg.cache == "disk":
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
        folder = spec.out_dir / "cache" / f"probe-{dataset.name}-{which}-{digest}"
    elif cfg.cache != "memory":
        raise ConfigError(f"cache must be disk or memory, got {cfg.cache!r}")
    return build_cache(model, dataset, layers, resolution=resolution, label_size=label_size,
                       feature_norm=bool(cfg.feature_norm), device=device, batch_size=int(cfg.extract_batch_size),
                       num_workers=_num_workers(cfg.num_workers), folder=folder, key=key, amp=bool(cfg.amp),
                       progress=bool(cfg.progress), desc=f"{spec.name}: {which} features")


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
    return example_figure(path, images, targets, preds, [dataset.ids[int(i)] for i in picks], heading)


def probe_backbone(cfg: DictConfig, spec: BackboneSpec, train_ds: Any, val_ds: Any,
                   device: torch.device) -> dict[str, dict[str, Any]]:
    """Probe one backbone; returns, per head group, the result written to its JSON file."""
    t_start = time.perf_counter()
    name, groups = str(cfg.dataset), parse_multiscale(cfg.multiscale)
    model = load_spec(spec, device, seed=int(cfg.seed))
    depth, patch = len(model.blocks), int(model.patch_embed.patch_size[0])
    layers = group_layers(cfg, groups, depth)
    resolution, label_size = probe_sizes(dataset_settings(cfg), patch)
    union = sorted({i for ls in layers.values() for i in ls})
    if cfg.augmentation not in ("none", "flip"):
        raise ConfigError(f"augmentation must be none or flip, got {cfg.augmentation!r}")
    caches: list[FeatureCache] = []
    try:
        caches.append(_cache(cfg, model, spec, train_ds, "train", union, resolution, label_size, device))
        caches.append(_cache(cfg, model, spec, val_ds, "val", union, resolution, label_size, device))
        if cfg.augmentation == "flip":
            caches.append(_cache(cfg, model, spec, Mirrored(train_ds), "train-mirrored", union, resolution,
                                 label_size, device))
        del model
        results = _train_and_score(cfg, spec, train_ds, val_ds, caches[0], caches[1], caches[2:], layers,
                                   resolution, label_size, device)
    finally:
        for c in caches:
            if cfg.cache == "disk" and not cfg.keep_cache and not c.reused:
                c.delete()
        with contextlib.suppress(OSError):  # the cache folder itself, once nothing is kept in it
            (Path(spec.out_dir) / "cache").rmdir()
    total = time.perf_counter() - t_start
    for g, result in results.items():
        result["timings"]["total_s"] = total
        write_text(Path(spec.out_dir) / f"probe-{name}{GROUPS[g][0]}.json", json.dumps(result, indent=1) + "\n")
    return results


def _train_and_score(cfg: DictConfig, spec: BackboneSpec, train_ds: Any, val_ds: Any, train_cache: FeatureCache,
                     val_cache: FeatureCache, views: list[FeatureCache], layers: dict[str, list[int]],
                     resolution: int, label_size: int, device: torch.device) -> dict[str, dict[str, Any]]:
    """Train every head over the caches, score them, write figures, heads and TensorBoard; the results."""
    from torch.utils.tensorboard import SummaryWriter

    name, groups = str(cfg.dataset), list(layers)
    lrs = [float(lr) for lr in cfg.lrs]
    if not lrs:
        raise ConfigError("lrs is empty; give at least one learning rate")
    torch.manual_seed(int(cfg.seed))
    heads = LinearHeads({g: train_cache.channels(layers[g]) for g in groups}, train_ds.num_classes, lrs,
                        bn=bool(cfg.bn)).to(device)
    out_dir = Path(spec.out_dir)
    writers = {g: SummaryWriter(str(_reset_dir(out_dir / "tb" / f"probe-{name}{GROUPS[g][0]}"))) for g in groups}
    epochs, val_every = int(cfg.epochs), int(cfg.val_every)

    def on_epoch(epoch: int, losses: dict) -> dict | None:
        for (g, j), loss in losses.items():
            writers[g].add_scalar(f"probe/train_loss/lr={lrs[j]:g}", loss, epoch)
        if not val_every or (epoch % val_every and epoch != epochs):
            return None
        monitor = {k: c.miou() for k, c in evaluate_cached(heads, val_cache, device).items()}
        for (g, j), miou in monitor.items():
            writers[g].add_scalar(f"probe/val_miou_at_label_size/lr={lrs[j]:g}", 100 * miou, epoch)
        return monitor

    n_train = int(train_cache.valid.sum())
    steps = -(-n_train // int(cfg.batch_size))
    batches = cache_batches(train_cache, int(cfg.batch_size), int(cfg.seed), device, views=views)
    trained = train_heads(heads, batches, steps,
                          epochs=epochs, optimizer=str(cfg.optimizer), weight_decay=float(cfg.weight_decay),
                          on_epoch=on_epoch, progress=bool(cfg.progress), desc=f"{spec.name}: heads")
    t_eval = time.perf_counter()
    conf = evaluate_full(heads, val_cache, val_ds, device, num_workers=_num_workers(cfg.num_workers),
                         progress=bool(cfg.progress), desc=f"{spec.name}: val")
    eval_s = time.perf_counter() - t_eval
    timings = {"extract_train_s": train_cache.extract_s + sum(v.extract_s for v in views),
               "extract_val_s": val_cache.extract_s,
               "cache_reused": all(c.reused for c in (train_cache, val_cache, *views)),
               "train_s": trained.train_s, "eval_s": eval_s}
    results = {}
    for g in groups:
        suffix, title = GROUPS[g]
        sweep = []
        for j, lr in enumerate(lrs):
            c = conf[(g, j)]
            sweep.append({"lr": lr, "miou": _pct(c.miou()), "pixel_accuracy": _pct(c.pixel_accuracy()),
                          "final_train_loss": trained.losses[(g, j)][-1] if trained.losses[(g, j)] else None})
        best = int(np.nanargmax([s["miou"] if s["miou"] is not None else np.nan for s in sweep]))
        best_key, best_conf = (g, best), conf[(g, best)]
        edge = sweep_edge(lrs, best)
        if edge:
            print(f"  warning: {spec.name} {title}: the best lr {lrs[best]:g} is the {edge} of the sweep {list(lrs)}; "
                  f"the optimum may lie beyond it (extend lrs=[...])", flush=True)
        stem = f"probe-{name}{suffix}"
        pred_dir = None
        if cfg.save_predictions:
            pred_dir = _reset_dir(out_dir / f"{stem}-pred")
            again = evaluate_full(heads, val_cache, val_ds, device, keys=[best_key],
                                  on_prediction=lambda i, k, p: save_prediction(pred_dir / f"{val_ds.ids[i]}.png", p),
                                  progress=bool(cfg.progress), desc=f"{spec.name}: predictions")
            assert torch.equal(again[best_key].matrix, best_conf.matrix)
        heading = (f"{spec.name}, {name}, {title} (blocks {layers[g]}), lr {lrs[best]:g}: "
                   f"mIoU {100 * best_conf.miou():.1f}")
        figure = _figure(out_dir / f"{stem}.png", heads, best_key, val_cache, val_ds, int(cfg.figure_images),
                         device, heading)
        torch.save({"lr": lrs[best], "layers": layers[g], "state": heads.head_state(best_key),
                    "num_classes": train_ds.num_classes, "class_names": list(train_ds.class_names),
                    "resolution": resolution, "feature_norm": bool(cfg.feature_norm), "bn": bool(cfg.bn),
                    "backbone": str(spec.path) if spec.path else "random"}, out_dir / f"{stem}-head.pt")
        iou = best_conf.iou()
        result = {
            "dataset": name, "probe": title, "backbone": spec.name,
            "checkpoint": str(spec.path) if spec.path else f"random (seed {int(cfg.seed)})",
            "backbone_args": json.loads(json.dumps(spec.args, default=str)),
            "miou": _pct(best_conf.miou()), "best_lr": lrs[best], "best_lr_at_edge": edge,
            "pixel_accuracy": _pct(best_conf.pixel_accuracy()),
            "per_class_iou": {cls: _pct(v) for cls, v in zip(train_ds.class_names, iou)},
            "sweep": sweep,
            "monitor_miou_at_label_size": {str(e): {f"{lrs[j]:g}": _pct(v) for (gg, j), v in m.items() if gg == g}
                                           for e, m in trained.monitor.items()},
            "layers": layers[g], "resolution": resolution, "label_size": label_size,
            "feature_grid": list(train_cache.grid), "epochs": epochs, "trained_with": groups,
            "n_train": n_train, "n_val": int(val_cache.valid.sum()),
            "skipped_images": {"train": int((~train_cache.valid).sum()), "val": int((~val_cache.valid).sum())},
            "train_ids_sha1": _ids_hash(train_ds.ids), "device": str(device),
            "timings": dict(timings),
            "figure": str(figure) if figure else None, "predictions": str(pred_dir) if pred_dir else None,
            "config": OmegaConf.to_container(cfg, resolve=True),
        }
        w = writers[g]
        for s in sweep:
            w.add_scalar(f"probe/val_miou/lr={s['lr']:g}", s["miou"] or 0.0, epochs)
        w.add_scalar("probe/val_miou/best", result["miou"] or 0.0, epochs)
        if figure:
            w.add_image("probe/examples", figure_array(figure), epochs)
        w.close()
        results[g] = result
    return results


def sweep_edge(lrs: Sequence[float], best: int) -> str | None:
    """``"highest"`` or ``"lowest"`` when the best of a sweep of several lrs is its largest or smallest
    value (the optimum may lie outside the sweep), else None."""
    if len(lrs) < 2:
        return None
    if lrs[best] == max(lrs):
        return "highest"
    if lrs[best] == min(lrs):
        return "lowest"
    return None


def comparison_table(name: str, specs: Sequence[BackboneSpec], results: dict[str, dict[str, dict]],
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


def run_probe(cfg: DictConfig) -> dict[str, dict[str, dict]]:
    """Probe every backbone of ``cfg.ckpt``; returns ``{backbone name: {group: result}}``."""
    name = str(cfg.dataset)
    settings = dataset_settings(cfg)
    groups = parse_multiscale(cfg.multiscale)
    try:
        device = resolve_device(str(cfg.device))
    except (ValueError, RuntimeError) as err:
        raise ConfigError(str(err)) from err
    if cfg.cpu_threads is not None:
        torch.set_num_threads(int(cfg.cpu_threads))
    specs = resolve_backbones(cfg.ckpt, runs_root=cfg.runs_root)
    train_ds = build_split(name, settings, "train", seed=int(cfg.seed))
    val_ds = build_split(name, settings, "val", seed=int(cfg.seed))
    print(f"probe {name}: {len(train_ds)} train / {len(val_ds)} val images, {train_ds.num_classes} classes, "
          f"{'+'.join(GROUPS[g][1] for g in groups)}, lrs {list(cfg.lrs)}, {cfg.epochs} epochs, "
          f"backbones: {', '.join(s.name for s in specs)}", flush=True)
    results = {}
    for spec in specs:
        results[spec.name] = probe_backbone(cfg, spec, train_ds, val_ds, device)
        for g, r in results[spec.name].items():
            t = r["timings"]
            print(f"  {spec.name} {GROUPS[g][1]} (blocks {r['layers']}): mIoU {r['miou']:.1f} at lr {r['best_lr']:g} "
                  f"[features {t['extract_train_s'] + t['extract_val_s']:.0f} s, heads {t['train_s']:.0f} s, "
                  f"scoring {t['eval_s']:.0f} s, total {t['total_s']:.0f} s] -> {spec.out_dir}/probe-{name}"
                  f"{GROUPS[g][0]}.json", flush=True)
    table = comparison_table(name, specs, results, groups)
    print(table, end="")
    if len(specs) > 1:
        res = dataset_settings(cfg).resolution
        caption = (f"Dense linear probe on {name}: mIoU (%) of the best of lrs {list(cfg.lrs)}, {cfg.epochs} epochs, "
                   f"{res} px, val split of {len(val_ds)} images.\n\n")
        path = write_text(compare_dir(cfg.runs_root) / f"probe-{name}.md", caption + table)
        print(f"table written to {path}")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        run_probe(load_config("probe", argv))
    except (ConfigError, UnknownDatasetError, DatasetNotFoundError, MalformedDatasetError,
            BackboneNotFoundError, BackboneLoadError) as err:
        raise SystemExit(f"error: {err}") from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
