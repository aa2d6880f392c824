"""Comparison tables of the evaluators: one markdown table per command, printed and saved.

``CKPT="runs/a runs/b random"`` gives one row or column per backbone; the probe, TokenCut and
PCA write their tables with ``markdown_table`` (``skipless/reports/tables.py``, which ``make bench`` and ``make paper``
use too) so they read the same, and ``compare_dir`` says
where a table over several backbones goes (``runs/compare/`` or ``<out>/compare/``).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Sequence

from skipless.atomic import atomic_write
from skipless.reports.tables import markdown_table  # noqa: F401  (the suite's one table writer, used from here)
from skipless.models import applicable_args


def compare_dir(runs_root: str | os.PathLike = "runs", out: str | os.PathLike | None = None) -> Path:
    """Where tables over several backbones are written: ``<runs_root>/compare``, or ``<out>/compare``
    when the evaluator's ``out`` names an output folder."""
    return Path(runs_root if out is None else out) / "compare"


SIGNIFICANT = 6  # the digits a result's float keeps in JSON: 57.5, not 57.49999999999999


def rounded(obj: Any) -> Any:
    """``obj`` with every float kept to ``SIGNIFICANT`` significant digits (nested dicts, lists, tuples)."""
    if isinstance(obj, float):
        return float(f"{obj:.{SIGNIFICANT}g}") if math.isfinite(obj) else obj
    if isinstance(obj, Mapping):
        return {k: rounded(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [rounded(v) for v in obj]
    return obj


def result_json(obj: Any) -> str:
    """The text of a result file: floats rounded (``rounded``), one key a line, anything else as ``str``."""
    return json.dumps(rounded(obj), indent=1, default=str) + "\n"


def shown_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """A backbone's arguments as its results describe it: those its model reads (``applicable_args``), JSON-safe."""
    return json.loads(json.dumps(applicable_args(args), default=str))


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` atomically (a reader never sees half a table) and return the path."""
    return atomic_write(Path(path), lambda tmp: Path(tmp).write_text(text))
