"""The ``series`` report item: a value that each training run writes, epoch after epoch, to a JSON-lines
file of its folder; one line per run in a figure, and a table at chosen epochs.

Made for seed 002's Figure 5a (Zhang et al., Sec. 5, Eq. 6): the effective rank rho of the last-layer
class tokens over training, beside the probe accuracy of the same checkpoints (Figure 5b, a ``table``
item over the evaluated epochs). Every pretraining run writes it to ``rank.jsonl``
(``skipless/training/rank_monitor.py``: one line ``{"epoch", "step", "rho", "erank", ...}`` at its k-NN,
export and last epochs), so the figure comes out of the runs without an evaluation job. Also Ji et al.'s
Tables 5-6 as the runs measured them during training (``diagnostics.jsonl``, the student on the run's
own images: ``skipless/training/diagnostics_callbacks.py``). Keys of the item: ``file`` (the JSON-lines
file in each run folder), ``x`` (the key along the curve, ``epoch`` by default), ``metric`` (a dotted key
of each line, ``rho``), ``lines`` (the run axes that name a run's row, all by default) and ``reference``
(the paper's numbers, as a table's: ``columns`` are values of ``x``; ``report.py`` writes the cells).
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable

from skipless.reports.tables import markdown_table


def read_lines(path: Path, x: str) -> dict[int | float, dict[str, Any]]:
    """``{x: line}`` of every line of ``path`` that has a number at ``x`` (a later line wins: a resumed run
    that measured an epoch again); {} when the file is missing."""
    lines: dict[int | float, dict[str, Any]] = {}
    try:
        text = path.read_text().splitlines()
    except OSError:
        return lines
    for line in text:
        try:
            value: Any = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        at = value.get(x) if isinstance(value, dict) else None
        if isinstance(at, (int, float)):
            lines[at] = value
    return dict(sorted(lines.items()))


def metric_of(data: Any, path: str) -> Any:
    """``data[a][b]...`` for ``path = "a.b"`` (a result JSON's or a series line's number); None when a key
    is missing."""
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def read_series(path: Path, x: str, metric: str) -> dict[int | float, float]:
    """``{x: metric}`` of the lines of ``path`` (``read_lines``) whose metric is a finite number: what a
    figure can draw (an infinite condition number is in the table, ∞, not on the curve)."""
    points = {at: metric_of(line, metric) for at, line in read_lines(path, x).items()}
    return {at: float(v) for at, v in points.items() if isinstance(v, (int, float)) and math.isfinite(v)}


def series_section(item: dict[str, Any], runs: list[tuple[str, Path]], columns: list[str], figure: Path,
                   cell: Callable[[dict[str, Any] | None, str, str], str] | None = None) -> str:
    """The figure (``figure``, a PNG beside the report) and table of ``item`` for ``runs`` (label, run
    folder): one row per run, its value at each of ``columns`` (the epochs the experiment's evaluations
    read; every epoch measured when there are none). ``cell(line, label, column)`` writes a cell from the
    run's line at that column (None: no line there); by default the metric to three digits."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    x, metric = item.get("x", "epoch"), item.get("metric", "rho")
    lines = {label: read_lines(run_dir / item["file"], x) for label, run_dir in runs}
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, run_dir in runs:
        points = read_series(run_dir / item["file"], x, metric)
        if points:
            ax.plot(list(points), list(points.values()), marker="o" if len(points) < 30 else None, markersize=3,
                    label=label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs, not 1.2
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.set_title(item.get("title", item["file"]), fontsize=9)
    if ax.lines:
        ax.legend(fontsize=7)
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(figure, dpi=90)
    plt.close(fig)
    if not runs:
        return f"![{item['file']}](figures/{figure.name})\n\nNo finished training run yet."
    if not any(lines.values()):
        return f"![{item['file']}](figures/{figure.name})\n\nNo finished run has written `{item['file']}`."
    if cell is None:
        def cell(line: dict[str, Any] | None, label: str, column: str) -> str:
            value = None if line is None else metric_of(line, metric)
            return f"{value:.3g}" if isinstance(value, (int, float)) else "-"
    shown = columns or [str(k) for k in sorted({k for found in lines.values() for k in found})]
    body = []
    for label, found in lines.items():
        by_column = {str(k): line for k, line in found.items()}
        body.append([label, *(cell(by_column.get(c), label, c) for c in shown)])
    return (f"![{item['file']}](figures/{figure.name})\n\n{metric} of each run's `{item['file']}` at each {x}:\n\n"
            + markdown_table(["run", *shown], body))
