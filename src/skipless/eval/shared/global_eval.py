"""What ``make knn``, ``make linear`` and ``make tsne`` share: their common settings, the labelled splits,
and the cached global features of each backbone (``eval/shared/global_features.py``).

Settings are checked once, before any backbone is resolved, data read or file written
(``resolve_settings``); a bad value stops the run with one sentence naming the key. The dataset is
any name of the classification registry (``skipless.data.classification.registry.READERS``: ``default`` and
whatever readers register there), read from ``root`` (null: ``data/default`` for the default, else
``$DATA_ROOT`` or ``data/<dataset>``). ``train_subset`` / ``val_subset`` draw a seeded random subset.
What needs the backbone (the crop a multiple of its patch, ``n_last_blocks`` within its depth) is
checked per backbone, still before its features are computed.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from omegaconf import DictConfig

from skipless.config import ConfigError
from skipless.config.rules import Rule, boolean, integer, one_of, optional, text
from skipless.devices.cpu_threads import loader_workers as loader_workers_for
from skipless.data.classification.registry import READERS, classification_split
from skipless.data.errors import UnknownDatasetError
from skipless.models import FeatureRequestError
from skipless.models.timm_family import family_of, model_name

from .backbones import BackboneSpec, backbone_key, load_spec
from .devices import resolve_device
from .global_features import (GlobalFeatures, RandomView, build_global_features, cache_key, is_pooled_only,
                              last_blocks, open_features)
from .report import compare_dir, result_json, write_text
from .settings_rules import COMMON, check_rules

POOLED_FAMILIES = ("vit", "timm")  # what k-NN, linear and t-SNE read: a timm model's pooled feature too
DINO_SIZES = (256, 224)  # resize, crop of DINO's eval_knn.py / eval_linear.py
CACHES = ("disk", "memory")

# The keys of knn.yaml and linear.yaml that mean the same in both (the evaluator adds its own).
RULES: dict[str, Rule] = {
    **{k: r for k, r in COMMON.items() if k != "norm"},  # the final norm is always applied, as DINO does
    "dataset": text(),  # a registered one: resolve_settings, with UnknownDatasetError
    "root": optional(text()),
    "train_subset": optional(integer(1)),
    "val_subset": optional(integer(1)),
    "progress": boolean(),
    "features.resize": optional(integer(1)),
    "features.crop": optional(integer(1)),
    "features.n_last_blocks": integer(1),
    "features.batch_size": integer(1),
    "features.num_workers": optional(integer(0)),
    "features.cache": one_of(*CACHES),
    "features.amp": boolean(),
    "features.compile": boolean(),
}
SIZE = Rule(lambda v: isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and x >= 1 for x in v),
            "a list [resize, crop] of two integers >= 1")


@dataclass(frozen=True)
class GlobalSettings:
    """The checked common settings: the config, the dataset and its root, sizes and device."""

    cfg: DictConfig
    dataset: str
    root: str
    resize: int
    crop: int
    device: torch.device


def loader_workers(cfg: DictConfig) -> int:
    """The image-decoding processes of the feature extraction: ``features.num_workers``, null: min(8, cores)."""
    return loader_workers_for(cfg.features.num_workers)


def data_root(cfg: DictConfig) -> str:
    """``root``, or by default ``data/default`` for the default and ``$DATA_ROOT`` or ``data/<dataset>`` else."""
    if cfg.root is not None:
        return str(cfg.root)
    if cfg.dataset == "default":
        return "data/default"
    return os.environ.get("DATA_ROOT") or f"data/{cfg.dataset}"


def image_sizes(cfg: DictConfig) -> tuple[int, int]:
    """``(resize, crop)``: the keys when set, else ``features.sizes.<dataset>``, else DINO's 256 / 224."""
    listed = cfg.features.sizes.get(cfg.dataset)
    resize, crop = (int(v) for v in listed) if listed is not None else DINO_SIZES
    resize = resize if cfg.features.resize is None else int(cfg.features.resize)
    crop = crop if cfg.features.crop is None else int(cfg.features.crop)
    if crop > resize:
        raise ConfigError(f"features.crop ({crop}) must be at most features.resize ({resize}): the crop is taken "
                          "from the resized image")
    return resize, crop


def resolve_settings(cfg: DictConfig, rules: Mapping[str, Rule]) -> GlobalSettings:
    """Check every key of ``RULES`` and ``rules`` (the evaluator's own) before anything else happens."""
    name = str(cfg.dataset)
    if name not in READERS:
        raise UnknownDatasetError(f"unknown classification dataset {name!r}; expected one of: {', '.join(READERS)}")
    check_rules(cfg, {**RULES, **rules, **{f"features.sizes.{k}": SIZE for k in cfg.features.sizes}})
    resize, crop = image_sizes(cfg)
    return GlobalSettings(cfg, name, data_root(cfg), resize, crop, resolve_device(str(cfg.device)))


class Subset:
    """Some samples of a ``LabelledImages``, with the same reading API (``read``, ``labels``, ``name`` ...)."""

    def __init__(self, dataset: Any, indices: np.ndarray) -> None:
        self.dataset, self.indices = dataset, np.asarray(indices, dtype=np.int64)
        self.name = f"{dataset.name} ({len(self.indices)} of {len(dataset)})"
        self.class_names = dataset.class_names
        items = getattr(dataset, "items", None)
        self.items = [items[i] for i in self.indices] if items is not None else None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def labels(self) -> np.ndarray:
        return self.dataset.labels[self.indices]

    def __len__(self) -> int:
        return len(self.indices)

    def read(self, index: int) -> tuple[Any, int]:
        return self.dataset.read(int(self.indices[index]))


def subset(dataset: Any, size: int | None, seed: int) -> Any:
    """A seeded random ``size`` of ``dataset`` in its own order, or the whole of it (None or size >= len)."""
    if size is None or size >= len(dataset):
        return dataset
    return Subset(dataset, np.sort(np.random.default_rng(seed).choice(len(dataset), size, replace=False)))


def load_splits(settings: GlobalSettings) -> tuple[Any, Any]:
    """The train and val splits, subsets drawn; raises when they disagree on the classes."""
    cfg = settings.cfg
    train, val = (subset(classification_split(settings.dataset, settings.root, split), cfg[f"{split}_subset"],
                         int(cfg.seed)) for split in ("train", "val"))
    if tuple(train.class_names) != tuple(val.class_names):
        raise ConfigError(f"the train and val splits of {settings.dataset} name different classes")
    return train, val


def _digest(obj: Any, n: int = 12) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def split_key(settings: GlobalSettings, dataset: Any, split: str) -> dict[str, Any]:
    """What identifies a split's images: dataset, root, split, which samples and their labels."""
    indices = getattr(dataset, "indices", None)
    return {"dataset": settings.dataset, "root": str(Path(settings.root).resolve()), "split": split,
            "samples": _digest(indices.tolist()) if indices is not None else "all",
            "labels": _digest(np.asarray(dataset.labels).tolist())}


@dataclass
class BackboneFeatures:
    """The cached features of one backbone on both splits, and what describes the backbone.
    ``train_views``: the random-augmentation views of the train split (``make linear views=``), after its
    centre crop ``train``; none by default."""

    train: GlobalFeatures
    val: GlobalFeatures
    model: dict[str, Any]  # arch, depth, width, patch, blocks read
    extract_s: float
    total_s: float
    train_views: list[GlobalFeatures] = field(default_factory=list)

    @property
    def reused(self) -> bool:
        return self.train.reused and self.val.reused and all(f.reused for f in self.train_views)


def backbone_features(settings: GlobalSettings, spec: BackboneSpec, train: Any, val: Any,
                      views: int = 1) -> BackboneFeatures:
    """Load ``spec``, check it can give the asked features, and extract (or reuse) them on both splits: the
    centre crop of each, then ``views - 1`` random-augmentation views of the train split (``RandomView``s
    seeded by ``seed``, each its own cache, memory-mapped when on disk)."""
    t0 = time.perf_counter()
    model, info = _loaded(settings, spec)
    out = {split: _features(settings, spec, model, dataset, split) for split, dataset in (("train", train), ("val", val))}
    randoms = [_features(settings, spec, model, train, "train", RandomView(i, views, int(settings.cfg.seed), settings.crop))
               for i in range(1, int(views))]
    del model
    extract_s = sum(f.extract_s for f in (*out.values(), *randoms))
    return BackboneFeatures(out["train"], out["val"], info, extract_s, time.perf_counter() - t0, randoms)


def _cache_place(settings: GlobalSettings, spec: BackboneSpec, dataset: Any, split: str,
                 view: RandomView | None = None) -> tuple[Path | None, dict]:
    """The cache folder of a split's features (None in memory) and what identifies them; a random view's
    folder names it (``-view<i>of<n>-``) and its key holds ``view.key()``."""
    cfg, feats = settings.cfg, settings.cfg.features
    key = {"backbone": backbone_key(spec, int(cfg.seed)), **split_key(settings, dataset, split),
           "amp": bool(feats.amp and settings.device.type == "cuda")}
    name = split
    if view is not None:
        key.update(view.key())
        name = f"{split}-view{view.index}of{view.views}"
    folder = None
    if feats.cache == "disk":
        folder = spec.out_dir / "cache" / f"global-{settings.dataset}-{name}-{_digest(key, 10)}"
    return folder, key


def cls_blocks(settings: GlobalSettings, spec: BackboneSpec) -> int:
    """How many last blocks give a CLS token: ``features.n_last_blocks``, none for a timm-family backbone."""
    return 0 if family_of(spec.args) != "vit" else int(settings.cfg.features.n_last_blocks)


def refuse_cls_without_token(specs: Sequence[BackboneSpec], what: str, fix: str) -> None:
    """One sentence, before any feature is computed, for a backbone without a CLS token (a timm-family one)
    given to a setting that reads CLS tokens (``what``; ``fix``: the setting that reads its pooled feature)."""
    for spec in specs:
        if family_of(spec.args) != "vit":
            raise ConfigError(f"{spec.name} is a {model_name(spec.args)} (model.family={family_of(spec.args)}) "
                              f"without a CLS token, and {what} reads CLS tokens; expected {fix}, its pooled feature")


def cached_features(settings: GlobalSettings, spec: BackboneSpec, dataset: Any, split: str) -> GlobalFeatures | None:
    """The complete disk cache of ``dataset``'s features when an earlier run left one (``make knn``,
    ``make linear``), without loading the backbone; else None."""
    folder, key = _cache_place(settings, spec, dataset, split)
    if folder is None:
        return None
    return open_features(folder, cache_key(key, n_last=cls_blocks(settings, spec),
                                           resize=settings.resize, crop=settings.crop, n=len(dataset)))


def _pooled_only_info(settings: GlobalSettings, spec: BackboneSpec, model: torch.nn.Module) -> dict[str, Any]:
    """What describes a timm-family backbone; one sentence when it cannot take the crop (Swin fixes its size)."""
    probe = torch.zeros(1, 3, settings.crop, settings.crop, device=settings.device,
                        dtype=next(model.parameters()).dtype)
    try:
        with torch.inference_mode():
            model(probe)
    except (RuntimeError, AssertionError, ValueError) as err:
        size = spec.args.get("img_size")
        raise ConfigError(f"{spec.name} ({model_name(spec.args)}) cannot read {settings.crop} px crops ({err}); "
                          f"expected features.crop={size}, the size it was trained at") from None
    return {"arch": model_name(spec.args), "residual": spec.args.get("residual"), "family": family_of(spec.args),
            "width": int(model.num_features), "cls_blocks": []}


def split_features(settings: GlobalSettings, spec: BackboneSpec,
                   splits: Mapping[str, Any]) -> tuple[dict[str, GlobalFeatures], dict[str, Any], float, float]:
    """Load ``spec``, check it can give the asked features, and extract (or reuse) them on each of
    ``splits`` (name -> dataset); returns the features per split, what describes the backbone, the
    seconds of backbone passes and the seconds in all."""
    t0 = time.perf_counter()
    model, info = _loaded(settings, spec)
    out = {split: _features(settings, spec, model, dataset, split) for split, dataset in splits.items()}
    del model
    return out, info, sum(f.extract_s for f in out.values()), time.perf_counter() - t0


def _loaded(settings: GlobalSettings, spec: BackboneSpec) -> tuple[torch.nn.Module, dict[str, Any]]:
    """The frozen backbone of ``spec`` on the device, once checked against the features asked of it, and
    what describes it."""
    cfg = settings.cfg
    model = load_spec(spec, settings.device, seed=int(cfg.seed), compile=bool(cfg.features.compile))
    info = _pooled_only_info(settings, spec, model) if is_pooled_only(model) else _vit_info(settings, spec, model)
    return model, info


def _features(settings: GlobalSettings, spec: BackboneSpec, model: torch.nn.Module, dataset: Any, split: str,
              view: RandomView | None = None) -> GlobalFeatures:
    """One split's features (its centre crop, or a random ``view``), from the cache or extracted into it."""
    cfg, feats = settings.cfg, settings.cfg.features
    folder, key = _cache_place(settings, spec, dataset, split, view)
    what = split if view is None else f"{split} view {view.index} of {view.views}"
    return build_global_features(
        model, dataset, n_last=cls_blocks(settings, spec), resize=settings.resize, crop=settings.crop,
        device=settings.device, batch_size=int(feats.batch_size), num_workers=loader_workers(cfg), folder=folder,
        key=key, amp=bool(feats.amp), progress=bool(cfg.progress), desc=f"{spec.name}: {what} features", view=view,
        mmap=view is not None)


def _vit_info(settings: GlobalSettings, spec: BackboneSpec, model: torch.nn.Module) -> dict[str, Any]:
    """What describes a ViT backbone, once the crop and ``n_last_blocks`` are checked against it."""
    feats = settings.cfg.features
    depth, patch = len(model.blocks), model.patch_embed.patch_size[0]
    if settings.crop % patch:
        raise ConfigError(f"features.crop {settings.crop} is not a multiple of {spec.name}'s patch size {patch}; "
                          f"use {max(patch, round(settings.crop / patch) * patch)}")
    try:
        blocks = last_blocks(depth, int(feats.n_last_blocks))
    except FeatureRequestError:
        raise ConfigError(f"features.n_last_blocks must be at most the depth of {spec.name} ({depth} blocks), "
                          f"got {feats.n_last_blocks}") from None
    return {"arch": spec.args.get("arch"), "residual": spec.args.get("residual"), "init": spec.args.get("init"),
            "depth": depth, "width": int(model.embed_dim), "patch": int(patch), "cls_blocks": blocks}


def describe_splits(settings: GlobalSettings, train: Any, val: Any) -> str:
    """``default: 2000 train / 1000 val images, 10 classes, 183 -> 160 px`` for the run's first line."""
    return (f"{settings.dataset}: {len(train)} train / {len(val)} val images, {train.num_classes} classes, "
            f"resize {settings.resize} -> crop {settings.crop} px")


def features_summary(f: BackboneFeatures) -> dict[str, Any]:
    """The JSON's account of the features: sizes, blocks, images used and left out, cache, timings."""
    return {"model": f.model, "train_images": f.train.n_valid, "val_images": f.val.n_valid,
            "skipped": {"train": f.train.skipped, "val": f.val.skipped},
            "cache": {"reused": f.reused, "folders": [str(x.folder) for x in (f.train, f.val, *f.train_views)
                                                      if x.folder]}}


def write_json(path: Path, obj: Any) -> Path:
    """Write a result JSON atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_text(path, result_json(obj))


def finish_table(table: str, caption: str, stem: str, specs: Sequence[BackboneSpec], cfg: DictConfig) -> Path | None:
    """Print the comparison table; with several backbones also write it to the compare folder."""
    print(table, end="", flush=True)
    if len(specs) < 2:
        return None
    path = write_text(compare_dir(cfg.runs_root, cfg.out) / f"{stem}.md", caption + "\n\n" + table)
    print(f"table written to {path}", flush=True)
    return path
