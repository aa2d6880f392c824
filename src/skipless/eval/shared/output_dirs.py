"""Can an evaluator write where it means to? Checked once, before any backbone is loaded.

Every evaluator writes per backbone into ``BackboneSpec.out_dir`` (``<run>/eval/``, or
``<out>/<name>/`` with ``out=<folder>``) and, over several backbones, into the compare folder.
``check_writable`` looks at each of those folders before the expensive work and writes nothing:
the folder, or the nearest of its parents that exists, must be a folder this process may write.
When it is not (a read-only run folder, a file where the folder should be), the run stops with one
sentence that names the folder and the ``out=`` key as the way around.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Sequence

from skipless.errors import SkiplessError

from .backbones import BackboneSpec, resolve_backbones
from .report import compare_dir


class OutputNotWritableError(SkiplessError, PermissionError):
    """An output folder the evaluator cannot create or write; the message names ``out=``."""


def unwritable_reason(folder: Path) -> str | None:
    """Why ``folder`` cannot be created or written (None when it can), without writing anything."""
    existing = folder
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def check_writable(folders: Iterable[Path], out: str | None) -> None:
    """Raise ``OutputNotWritableError`` for the first folder that cannot be written (module docstring)."""
    for folder in folders:
        reason = unwritable_reason(Path(folder))
        if reason is not None:
            fix = ("choose another out=<folder>" if out is not None
                   else "pass out=<folder> to write the results elsewhere")
            raise OutputNotWritableError(f"cannot write results to {folder} ({reason}); {fix}")


def check_outputs(specs: Sequence[BackboneSpec], runs_root: str, out: str | None) -> None:
    """``check_writable`` on every backbone's ``out_dir`` and, with several backbones, the compare folder."""
    folders = [s.out_dir for s in specs] + ([compare_dir(runs_root, out)] if len(specs) > 1 else [])
    check_writable(folders, out)


def backbones_to_evaluate(cfg, floor: bool | None = None, families: Sequence[str] = ("vit",)) -> list[BackboneSpec]:
    """The backbones an evaluator's ``ckpt`` / ``runs_root`` / ``out`` keys name, with the random floor after a
    single trained one when ``random_floor`` (or ``floor``) says so, and every output folder checked writable
    before any feature is computed (``resolve_backbones``, then ``check_outputs``); ``families``: the model
    families the evaluator reads (ViT tokens only, unless it reads pooled features: k-NN, linear, t-SNE)."""
    floor = bool(cfg.random_floor) if floor is None else floor
    specs = resolve_backbones(cfg.ckpt, runs_root=cfg.runs_root, out=cfg.out, floor=floor, families=families)
    check_outputs(specs, cfg.runs_root, cfg.out)
    return specs
