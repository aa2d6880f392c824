"""Rows of dicts as the suite's one table writer prints them (``skipless.reports.tables.markdown_table``)."""
from __future__ import annotations

from typing import Any, Sequence

from skipless.reports.tables import markdown_table as _markdown_table


def markdown_table(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> str:
    """One row per dict, one column per key (missing values as ``-``, floats to 3 significant digits)."""
    return _markdown_table(keys, [[r.get(k) for k in keys] for r in rows], float_format=".3g").rstrip("\n")
