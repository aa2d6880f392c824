"""The ``series`` report item: a value that each training run writes, epoch after epoch, to a JSON-lines
file of its folder; one line per run in a figure, and a table at chosen epochs.

Made for seed 002's Figure 5a (Zhang et al., Sec. 5, Eq. 6): the effective rank rho of the last-layer
class tokens over training, beside the probe accuracy of the same checkpoints (Figure 5b, a ``table``
item over the evaluated epochs). Every pretraining run writes it to ``rank.jsonl``
(``skipless/training/rank_monitor.py``: one line ``{"epoch", "step", "rho", "erank", ...}`` at its k-NN,
export and last epochs), so the figure comes out of the runs without an evaluation job. Keys of the
item: ``file`` (the JSON-lines file in each run folder), ``x`` (the key along the curve, ``epoch`` by
default) and ``metric`` (a dotted key of each line, ``rho``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_series(path: Path, x: str, metric: str) -> dict[int | float, float]:
    """``{x: metric}`` of every line of ``path`` that has both (a later line wins: a resumed run that
    measured an epoch again); {} when the file is missing."""
    points: dict[int | float, float] = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return points
    for line in lines:
        try:
            value: Any = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        at = value.get(x) if isinstance(value, dict) else None
        for key in metric.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(at, (int, float)) and isinstance(value, (int, float)):
            points[at] = float(value)
    return dict(sorted(points.items()))


def series_section(item: dict[str, Any], runs: list[tuple[str, Path]], columns: list[str], figure: Path) -> str:
    """The figure (``figure``, a PNG beside the report) and table of ``item`` for ``runs`` (label, run
    folder): one row per run, its value at each of ``columns`` (the epochs the experiment's evaluations
    read; every epoch measured when there are none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    from eval.shared.report import markdown_table

    x, metric = item.get("x", "epoch"), item.get("metric", "rho")
    series = {label: read_series(run_dir / item["file"], x, metric) for label, run_dir in runs}
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, points in series.items():
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
    shown = columns or [str(k) for k in sorted({k for points in series.values() for k in points})]
    body = []
    for label, points in series.items():
        values = {str(k): v for k, v in points.items()}
        body.append([label, *(f"{values[c]:.3g}" if c in values else "-" for c in shown)])
    if not runs:
        return f"![{item['file']}](figures/{figure.name})\n\nNo finished training run yet."
    return (f"![{item['file']}](figures/{figure.name})\n\n{metric} of each run's `{item['file']}` at each {x}:\n\n"
            + markdown_table(["run", *shown], body))
