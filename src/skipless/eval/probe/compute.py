"""The probe's compute step for one backbone: cache features, train every head, score them.

``probe_backbone`` returns a ``ProbeRun`` (the trained heads, their confusion matrices at the
original label resolution, the caches they read, timings); ``outputs.write_outputs`` turns it
into files; ``ProbeRun.release`` then deletes the caches that were built for this run only. Nothing
here writes results, and nothing here reads the config except through ``ProbeSettings``.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch

from skipless.devices.cpu_threads import loader_workers

from skipless.data.segmentation.seg_views import Mirrored

from ..shared.backbones import RANDOM, BackboneSpec, backbone_key, load_spec
from .feature_cache import FeatureCache, build_cache
from .linear_probe import LinearHeads, TrainResult, cache_batches, evaluate_cached, evaluate_full, train_heads
from .miou import ConfusionMatrix
from .settings import ProbeSettings, layers_for, sizes_for


@dataclass
class ProbeRun:
    """What probing one backbone computed (see the module docstring).

    Attributes:
        layers: per head group, the blocks it read.
        resolution, label_size: the input and training-label sizes used.
        resolution_note: how ``resolution`` was chosen when it differs from the dataset's size.
        caches: train, val, then any augmented train views.
        conf: per ``(group, lr index)``, the confusion matrix of the whole val split.
        monitor: per epoch, per head, the val mIoU at the label resolution (fractions).
    """

    spec: BackboneSpec
    layers: dict[str, list[int]]
    resolution: int
    label_size: int
    resolution_note: str | None
    heads: LinearHeads
    trained: TrainResult
    conf: dict[tuple[str, int], ConfusionMatrix]
    caches: list[FeatureCache]
    timings: dict[str, Any] = field(default_factory=dict)
    keep_cache: bool = False
    started: float = field(default_factory=time.perf_counter)  # when probing this backbone began

    @property
    def train_cache(self) -> FeatureCache:
        return self.caches[0]

    @property
    def val_cache(self) -> FeatureCache:
        return self.caches[1]

    def release(self) -> None:
        """Delete the disk caches built for this run (reused or kept ones stay), and their empty folder."""
        release_caches(self.caches, self.keep_cache, self.spec.out_dir)


def release_caches(caches: Sequence[FeatureCache], keep: bool, out_dir: Path) -> None:
    """Delete the caches built now (not reused ones) unless ``keep``; then ``<out_dir>/cache`` if empty."""
    for c in caches:
        if not keep and not c.reused:
            c.delete()
    try:
        (Path(out_dir) / "cache").rmdir()
    except OSError:  # not empty (kept caches) or never made (memory caches)
        pass


def ids_hash(ids: Sequence[str]) -> str:
    return hashlib.sha1("\n".join(ids).encode()).hexdigest()[:12]


def _cache(settings: ProbeSettings, model: torch.nn.Module, spec: BackboneSpec, dataset: Any, which: str,
           layers: list[int], resolution: int, label_size: int) -> FeatureCache:
    cfg, device = settings.cfg, settings.device
    key = {"backbone": backbone_key(spec, cfg.seed), "dataset": dataset.name,
           "split": f"{which}:{getattr(dataset, 'split', '')}",
           "ids": ids_hash(dataset.ids), "amp": bool(cfg.amp and device.type == "cuda")}
    folder = None
    if cfg.cache == "disk":
        digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
        folder = spec.out_dir / "cache" / f"probe-{dataset.name}-{which}-{digest}"
    return build_cache(model, dataset, layers, resolution=resolution, label_size=label_size, norm=bool(cfg.norm),
                       device=device, batch_size=int(cfg.extract_batch_size), num_workers=loader_workers(cfg.num_workers),
                       folder=folder, key=key, amp=bool(cfg.amp), progress=bool(cfg.progress),
                       desc=f"{spec.name}: {which} features")


def _monitor(heads: LinearHeads, val_cache: FeatureCache, device: torch.device, epochs: int, val_every: int,
             log: Callable[[str, str, float, int], None]) -> Callable[[int, dict], dict | None]:
    """The ``on_epoch`` hook of training: losses every epoch, a monitor mIoU every ``val_every``."""
    lrs = heads.lrs

    def on_epoch(epoch: int, losses: dict) -> dict | None:
        for (g, j), loss in losses.items():
            log(g, f"probe/head_loss/lr={lrs[j]:g}", loss, epoch)
        if not val_every or (epoch % val_every and epoch != epochs):
            return None
        monitor = {k: c.miou() for k, c in evaluate_cached(heads, val_cache, device).items()}
        for (g, j), miou in monitor.items():
            log(g, f"probe/val_miou_at_label_size/lr={lrs[j]:g}", 100 * miou, epoch)
        return monitor

    return on_epoch


def probe_backbone(settings: ProbeSettings, spec: BackboneSpec, train_ds: Any, val_ds: Any,
                   log: Callable[[str, str, float, int], None]) -> ProbeRun:
    """Cache the features of ``spec``'s backbone, train every head, score them on the val split.

    ``log(group, tag, value, step)`` receives the training curves (TensorBoard in ``eval.probe``).
    On an error the caches built so far are deleted; on success the caller releases them once the
    outputs are written.
    """
    cfg, device = settings.cfg, settings.device
    started = time.perf_counter()
    model = load_spec(spec, device, seed=int(cfg.seed), compile=bool(cfg.compile))
    layers = layers_for(settings, len(model.blocks))
    resolution, label_size, note = sizes_for(settings, int(model.patch_embed.patch_size[0]))
    union = sorted({i for ls in layers.values() for i in ls})
    # The random floor's features are kept: the same for every backbone of its architecture and seed, so that
    # each later probe of such a backbone reads them instead of extracting them again.
    keep = cfg.cache != "disk" or bool(cfg.keep_cache) or spec.kind == RANDOM
    caches: list[FeatureCache] = []
    try:
        caches.append(_cache(settings, model, spec, train_ds, "train", union, resolution, label_size))
        caches.append(_cache(settings, model, spec, val_ds, "val", union, resolution, label_size))
        if cfg.augmentation == "flip":
            caches.append(_cache(settings, model, spec, Mirrored(train_ds), "train-mirrored", union, resolution,
                                 label_size))
        del model
        train_cache, val_cache = caches[0], caches[1]
        heads = LinearHeads({g: train_cache.channels(layers[g]) for g in settings.groups},
                            train_ds.num_classes, settings.lrs, bn=bool(cfg.bn), seed=int(cfg.seed)).to(device)
        epochs = int(cfg.epochs)
        n_train = int(train_cache.valid.sum())
        batches = cache_batches(train_cache, int(cfg.batch_size), int(cfg.seed), device, views=caches[2:])
        trained = train_heads(heads, batches, -(-n_train // int(cfg.batch_size)), epochs=epochs,
                              optimizer=str(cfg.optimizer), weight_decay=float(cfg.weight_decay),
                              on_epoch=_monitor(heads, val_cache, device, epochs, int(cfg.val_every), log),
                              progress=bool(cfg.progress), desc=f"{spec.name}: heads")
        t_eval = time.perf_counter()
        conf = evaluate_full(heads, val_cache, val_ds, device, num_workers=loader_workers(cfg.num_workers),
                             progress=bool(cfg.progress), desc=f"{spec.name}: val")
    except BaseException:
        release_caches(caches, keep, spec.out_dir)
        raise
    timings = {"extract_train_s": sum(c.extract_s for c in caches if c is not val_cache),
               "extract_val_s": val_cache.extract_s, "cache_reused": all(c.reused for c in caches),
               "train_s": trained.train_s, "eval_s": time.perf_counter() - t_eval}
    return ProbeRun(spec, layers, resolution, label_size, note, heads, trained, conf, caches, timings, keep, started)


def best_index(run: ProbeRun, group: str) -> int:
    """Index of the lr whose head scored the best val mIoU in ``group`` (nan scores never win)."""
    scores = [run.conf[(group, j)].miou() for j in range(len(run.heads.lrs))]
    return int(np.nanargmax([np.nan if s is None else s for s in scores]))
