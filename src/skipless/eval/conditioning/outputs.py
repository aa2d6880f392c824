"""Where ``make conditioning`` writes, for ViT and CNN backbones alike: each backbone's ``conditioning.json`` in its
own ``eval/`` folder, and the report beside it (one backbone) or in ``runs/compare/`` (several)."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig

from ..shared.backbones import BackboneSpec
from ..shared.report import compare_dir, result_json, write_text


def save_record(spec: BackboneSpec, record: dict[str, Any], written: dict[str, Any], start: float) -> Path:
    """Write ``record`` to ``<spec.out_dir>/conditioning.json``, note it in ``written`` and print the time since
    ``start`` (``time.perf_counter``)."""
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    path = written["json"][spec.name] = write_text(spec.out_dir / "conditioning.json", result_json(record))
    written["results"][spec.name] = record
    print(f"{spec.name}: done in {time.perf_counter() - start:.0f} s -> {path}", flush=True)
    return path


def report_folder(cfg: DictConfig, specs: Sequence[BackboneSpec]) -> Path:
    """The folder of ``conditioning.md`` and its figures."""
    return compare_dir(cfg.runs_root, cfg.out) if len(specs) > 1 else specs[0].out_dir
