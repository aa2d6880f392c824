"""The one table writer of the benchmarks: rows of dicts -> a GitHub markdown table, printed by every section."""
from __future__ import annotations

from typing import Any, Sequence


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> str:
    """One row per dict, one column per key (missing values as ``-``, floats to 3 significant digits)."""
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(r.get(k)) for k in keys) + " |" for r in rows]
    return "\n".join(lines)
