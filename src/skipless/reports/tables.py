"""The suite's one table writer: a GitHub markdown table, the same for the evaluators' comparisons
(``eval/shared/report.py``), ``make bench`` (``bench/table.py``) and ``make paper``'s reports (``paper/``).
A leaf of the package: it imports nothing of the suite, so every room may use it."""
from __future__ import annotations

from typing import Any, Sequence


def _cell(value: Any, float_format: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return format(value, float_format)
    return str(value).replace("|", "\\|")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], float_format: str = ".1f") -> str:
    """A GitHub markdown table, floats printed with ``float_format`` (one decimal by default, as the papers print
    mIoU and CorLoc), None as ``-``; rows of another length than ``headers`` are refused (``ValueError``)."""
    widths = len(headers)
    bad = [i for i, row in enumerate(rows) if len(row) != widths]
    if bad:
        raise ValueError(f"rows {bad} do not have {widths} cells like the header {list(headers)}")
    lines = ["| " + " | ".join(_cell(h, float_format) for h in headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_cell(v, float_format) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
