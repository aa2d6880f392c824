"""The probe's settings, resolved once from ``configs/probe.yaml``: every check of the user's input.

``resolve_settings`` turns the config into a ``ProbeSettings`` before any backbone is loaded, data
read or file written, so a bad value stops the run at once with one ``ConfigError`` naming the key,
its value and what was expected; the rule of each key is listed once in ``RULES``. Two things
depend on the backbone and are resolved per backbone, from the same settings: the blocks
(``layers_for``: negative indices need the depth) and the input size (``sizes_for``: it must be a
multiple of the patch).

Input size. ``resolution: null`` (the default) takes the dataset's size (``datasets.<name>.resolution``)
and rounds it to the nearest multiple of the backbone's patch, so a /14 backbone runs on the default
data (160 -> 154) and on VOC (448 = 32 x 14) without a flag; the rounding is printed and recorded in
the JSON. A number given as ``resolution=...`` is used exactly and must be a multiple of the patch.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from omegaconf import DictConfig, ListConfig

from skipless.config.rules import Rule, boolean, integer, non_empty_list, number, one_of, optional, text
from skipless.config import ConfigError
from skipless.data import SEGMENTATION_DATASETS, UnknownDatasetError
from skipless.models import FeatureRequestError, resolve_layers

from ..shared.devices import resolve_device
from ..shared.settings_rules import BLOCKS, COMMON, check_rules
from .linear_probe import OPTIMIZERS

GROUPS = {"single": ("", "single"), "ms": ("-ms", "multiscale")}  # name -> (file suffix, title)
AUGMENTATIONS = ("none", "flip")
CACHES = ("disk", "memory")


@dataclass(frozen=True)
class ProbeSettings:
    """What the probe was asked to do, checked.

    Attributes:
        cfg: the resolved config (plain values such as ``epochs`` are read from it as they are).
        dataset: a key of ``SEGMENTATION_DATASETS``.
        root: its data root (``roots.<dataset>``).
        data: its ``datasets.<dataset>`` block (splits, size, subsets).
        groups: head groups, ``single`` and/or ``ms``.
        lrs: the sweep.
        device: where features and heads live.
    """

    cfg: DictConfig
    dataset: str
    root: str
    data: DictConfig
    groups: tuple[str, ...]
    lrs: tuple[float, ...]
    device: torch.device

    @property
    def table_stem(self) -> str:
        """Name of the comparison table: one per dataset *and* head groups, so that ``make probe`` and
        ``make probe MULTISCALE=1`` leave two tables, not one overwritten."""
        return f"probe-{self.dataset}" + {("single",): "", ("ms",): "-ms"}.get(self.groups, "-both")


MULTISCALE = {"0": ("single",), "1": ("ms",), "both": ("single", "ms")}  # multiscale -> head groups

# Every key of configs/probe.yaml and its rule (eval/shared/settings_rules.py); datasets.<name> in DATASET_RULES.
RULES = {
    **COMMON,
    "dataset": text(),  # a known one: resolve_settings, with UnknownDatasetError
    "multiscale": one_of(*MULTISCALE),
    "layers": BLOCKS,
    "ms_layers": optional(BLOCKS),
    "ms_blocks": integer(1),
    "resolution": optional(integer(1)),  # a multiple of the patch: sizes_for, per backbone
    "bn": boolean(),
    "augmentation": one_of(*AUGMENTATIONS),
    "lrs": non_empty_list(number(0, low_open=True), "finite numbers > 0"),
    "epochs": integer(1),
    "batch_size": integer(1),
    "optimizer": one_of(*OPTIMIZERS),
    "weight_decay": number(0),
    "val_every": integer(0),
    "amp": boolean(),
    "compile": boolean(),
    "extract_batch_size": integer(1),
    "num_workers": optional(integer(0)),
    "cache": one_of(*CACHES),
    "keep_cache": boolean(),
    "save_predictions": boolean(),
    "figure_images": integer(0),
    "progress": boolean(),
}
DATASET_RULES = {
    "train_split": text(),
    "val_split": text(),
    "resolution": integer(1),
    "label_size": optional(integer(1)),
    "train_subset": optional(integer(1)),
    "val_subset": optional(integer(1)),
}


def rules_for(dataset: str) -> dict[str, Rule]:
    """The rules of a probe on ``dataset``: ``RULES``, its data root and its ``datasets.<dataset>`` block."""
    return {**RULES, f"roots.{dataset}": text(), **{f"datasets.{dataset}.{k}": r for k, r in DATASET_RULES.items()}}


def spread_layers(depth: int, count: int) -> list[int]:
    """``count`` blocks (``ms_blocks``, >= 1 by its rule) spread evenly over ``depth``, ending at the last:
    12, 4 -> [2, 5, 8, 11]."""
    return sorted({max(0, round((k + 1) * depth / count) - 1) for k in range(count)})


def resolve_settings(cfg: DictConfig) -> ProbeSettings:
    """Check the config once (see the module docstring); raises ``ConfigError`` / ``UnknownDatasetError``."""
    name = str(cfg.dataset)
    if name not in SEGMENTATION_DATASETS:
        raise UnknownDatasetError(f"unknown dataset {name!r}; expected one of: {', '.join(SEGMENTATION_DATASETS)}")
    if name not in cfg.datasets or name not in cfg.roots:
        raise ConfigError(f"configs/probe.yaml has no datasets.{name} block or roots.{name}")
    check_rules(cfg, rules_for(name))
    if cfg.keep_cache and cfg.cache != "disk":
        raise ConfigError(f"keep_cache=true keeps disk caches only, got cache={cfg.cache!r}; "
                          "set cache=disk or keep_cache=false")
    return ProbeSettings(cfg, name, str(cfg.roots[name]), cfg.datasets[name], MULTISCALE[str(cfg.multiscale)],
                         tuple(float(lr) for lr in cfg.lrs), resolve_device(str(cfg.device)))


def layers_for(settings: ProbeSettings, depth: int) -> dict[str, list[int]]:
    """The blocks each head group reads, as non-negative indices (``layers`` / ``ms_layers``)."""
    cfg = settings.cfg
    try:
        layers = {"single": resolve_layers(cfg.layers, depth)}
        ms = cfg.ms_layers
        layers["ms"] = spread_layers(depth, int(cfg.ms_blocks)) if ms is None else resolve_layers(
            list(ms) if isinstance(ms, ListConfig) else ms, depth)
    except FeatureRequestError as err:
        raise ConfigError(f"{err} (keys layers / ms_layers)") from None
    return {g: layers[g] for g in settings.groups}


def round_to_patch(size: int, patch: int) -> int:
    """The multiple of ``patch`` nearest to ``size`` (halves round up), at least one patch."""
    return max(patch, (2 * size + patch) // (2 * patch) * patch)


def sizes_for(settings: ProbeSettings, patch: int) -> tuple[int, int, str | None]:
    """(input resolution, label resolution, a note when the dataset's size was rounded to the patch)."""
    explicit = settings.cfg.resolution
    note = None
    if explicit is not None:
        resolution = int(explicit)
        if resolution % patch:
            raise ConfigError(f"resolution {resolution} is not a multiple of the patch size {patch}; "
                              f"use {round_to_patch(resolution, patch)}, or resolution=null to round the dataset's size")
    else:
        nominal = int(settings.data.resolution)
        resolution = round_to_patch(nominal, patch)
        if resolution != nominal:
            note = (f"{settings.dataset}'s size {nominal} px rounded to {resolution} px, the nearest multiple of the "
                    f"backbone's patch {patch} (set resolution=<px> to choose)")
    label = settings.data.label_size
    label = max(1, resolution // 4) if label is None else int(label)
    return resolution, label, note
