"""The probe's settings, resolved once from ``configs/probe.yaml``: every check of the user's input.

``resolve_settings`` turns the config into a ``ProbeSettings`` before any backbone is loaded, so a
bad value stops the run at once with one ``ConfigError``. Two things depend on the backbone and are
resolved per backbone, from the same settings: the blocks (``layers_for``: negative indices need
the depth) and the input size (``sizes_for``: it must be a multiple of the patch).

Input size. ``resolution: null`` (the default) takes the dataset's size (``datasets.<name>.resolution``)
and rounds it to the nearest multiple of the backbone's patch, so a /14 backbone runs on the default
data (160 -> 154) and on VOC (448 = 32 x 14) without a flag; the rounding is printed and recorded in
the JSON. A number given as ``resolution=...`` is used exactly and must be a multiple of the patch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig

from skipless.config import ConfigError
from skipless.data import SEGMENTATION_DATASETS, UnknownDatasetError
from skipless.models import FeatureRequestError, resolve_layers

from .devices import resolve_device
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


def parse_multiscale(value: Any) -> tuple[str, ...]:
    """``multiscale`` -> head groups: 0 -> (single,), 1 -> (ms,), both -> (single, ms)."""
    text = str(value).strip().lower()
    if text in ("0", "false", "no", "single"):
        return ("single",)
    if text in ("1", "true", "yes", "ms"):
        return ("ms",)
    if text == "both":
        return ("single", "ms")
    raise ConfigError(f"multiscale must be 0, 1 or both, got {value!r}")


def spread_layers(depth: int, count: int) -> list[int]:
    """``count`` blocks spread evenly over ``depth``, ending at the last: 12, 4 -> [2, 5, 8, 11]."""
    if count < 1:
        raise ConfigError(f"ms_blocks must be at least 1, got {count}")
    return sorted({max(0, round((k + 1) * depth / count) - 1) for k in range(count)})


def _choice(cfg: DictConfig, key: str, allowed: tuple[str, ...]) -> str:
    value = str(cfg[key])
    if value not in allowed:
        raise ConfigError(f"{key} must be {' or '.join(allowed)}, got {value!r}")
    return value


def resolve_settings(cfg: DictConfig) -> ProbeSettings:
    """Check the config once (see the module docstring); raises ``ConfigError`` / ``UnknownDatasetError``."""
    name = str(cfg.dataset)
    if name not in SEGMENTATION_DATASETS:
        raise UnknownDatasetError(f"unknown dataset {name!r}; expected one of: {', '.join(SEGMENTATION_DATASETS)}")
    if name not in cfg.datasets or cfg.roots.get(name) is None:
        raise ConfigError(f"configs/probe.yaml has no datasets.{name} block or roots.{name}")
    lrs = tuple(float(lr) for lr in cfg.lrs)
    if not lrs or min(lrs) <= 0:
        raise ConfigError(f"lrs must be a non-empty list of positive learning rates, got {list(lrs)}")
    _choice(cfg, "augmentation", AUGMENTATIONS)
    _choice(cfg, "cache", CACHES)
    _choice(cfg, "optimizer", OPTIMIZERS)
    if cfg.resolution is not None and int(cfg.resolution) <= 0:
        raise ConfigError(f"resolution must be a positive number of pixels or null, got {cfg.resolution}")
    for key in ("epochs", "batch_size", "ms_blocks"):
        if int(cfg[key]) < 1:
            raise ConfigError(f"{key} must be at least 1, got {cfg[key]}")
    return ProbeSettings(cfg, name, str(cfg.roots[name]), cfg.datasets[name], parse_multiscale(cfg.multiscale),
                         lrs, resolve_device(str(cfg.device)))


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
