"""The report of an experiment: each of our cells beside the paper's, the difference, and links.

``<scale folder>/<experiment>/report.md``, written from what is on disk (the job markers and result
files), so it can be written at any time: cells whose job is not done say why (not run at this
scale, failed with its error, blocked by a failed training, not run yet). Items of the experiment
file's ``report``:

- ``table``: one number per cell (``metric``, a dotted key of the result JSON), laid out as the paper's
  table (``rows`` and ``columns`` name axes); each cell reads ``ours (paper, ours - paper)``, and the
  paper's table follows as it is printed. ``evaluation: runs`` reads the training runs' own
  ``summary.json`` (a supervised run's ``val.top1``: Table 1). A condition number that did not converge
  is shown as the lower bound it is (``>= x``), an infinite one as ∞. A cell whose training collapsed
  (the run's ``summary.json`` says ``collapsed``) reads ``<number> collapsed``, with the reasons under
  the table; so do the curves' best blocks and the histories' runs.
- ``curve``: a value per block (``metric`` a ``{block: value}`` mapping, e.g. TokenCut's CorLoc),
  one line per cell in one figure (``figures/<item>.png``), and the best block of each line against
  the paper's.
- ``images``: the figures the evaluator wrote (``images``: a glob under each job's output), embedded; with
  ``evaluation: runs``, images the training runs wrote (a glob under each run folder, e.g. MAE's
  reconstructions), side by side.
- ``history``: the training runs' TensorBoard scalars (``tags``, e.g. ``train/loss``, ``val/top1``)
  against the step, one panel per tag and one line per run (seeds/004's Figure 1: loss curves), and
  each run's last value of each tag.
- ``series``: a value per epoch from a JSON-lines file of each training run (``rank.jsonl``'s effective
  rank, seed 002's Figure 5a; ``series.py``), at the epochs the evaluations read.

A table whose ``rows`` or ``columns`` name ``epoch`` is one table over the epochs chosen (Tables 5-6,
Figure 5b: one column per checkpoint); otherwise each epoch gets its own table.
"""
from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

from skipless.atomic import atomic_write

from .experiment import RUNS, Experiment, axis_names
from .jobs import Job, job_state, read_marker, result_files
from .series import series_section

NOT_AT_SCALE = "not at this scale"


def metric_of(data: Any, path: str) -> Any:
    """``data[a][b]...`` for ``path = "a.b"``; None when a key is missing."""
    for key in path.split("."):
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def collapse_of(folder: Path, job: Job, runs: dict[str, Job]) -> str | None:
    """Why the training behind ``job`` collapsed, from its ``summary.json`` (``collapsed``, written by the
    run's collapse monitor, ``skipless/training/collapse.py``): the run's own, or for an evaluation its
    training run's; None when it did not (or says nothing)."""
    for run in [job] if job.kind == "run" else [runs[d] for d in job.depends if d in runs]:
        try:
            reason = json.loads((folder / run.run_dir / "summary.json").read_text()).get("collapsed")
        except (OSError, json.JSONDecodeError, AttributeError):
            continue
        if reason:
            return f"{run.name}: {reason}"
    return None


def cell_states(folder: Path, jobs: list[Job], skipped: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per evaluation cell: its labels, ``state`` (done, failed, blocked, pending, or
    NOT_AT_SCALE), its result JSON when done, the error that stopped it, and ``collapsed``: why its
    training collapsed (``collapse_of``), or None."""
    records = []
    runs = {j.name: j for j in jobs if j.kind == "run"}
    for job in jobs:
        record = {"evaluation": job.evaluation if job.kind == "eval" else RUNS, "labels": job.labels, "job": job.name,
                  "collapsed": collapse_of(folder, job, runs)}
        state = job_state(folder, job)
        if state == "done":
            files = result_files(folder, job) if job.kind == "eval" else [folder / job.run_dir / "summary.json"]
            is_json = files[0].suffix == ".json" and files[0].is_file()  # an evaluator's result may be a figure
            record.update(state="done", result=json.loads(files[0].read_text()) if is_json else {}, file=files[0])
        else:
            record.update(state=state or "pending", error=(read_marker(folder, job) or {}).get("error"))
        records.append(record)
    for cell in skipped:
        records.append({"evaluation": RUNS if cell["kind"] == "run" else cell["kind"],
                        "labels": {k: v for k, v in cell.items() if k != "kind"}, "state": NOT_AT_SCALE})
    return records


def number(value: Any) -> str:
    """A number as the paper prints it: one decimal (accuracies, mIoU, CorLoc), three significant
    digits below 10 (condition numbers near 1) and above 10^4; ∞ for infinity."""
    if isinstance(value, str) and value in ("inf", "nan"):
        return "∞" if value == "inf" else "nan"
    if not isinstance(value, (int, float)):
        return "-"
    if value == float("inf"):
        return "∞"
    return f"{value:.3g}" if abs(value) < 10 or abs(value) >= 1e4 else f"{value:.1f}"


def _bound(data: Any, path: str) -> str:
    """``>= `` when the metric is a condition number whose solver stopped before converging."""
    parent = metric_of(data, path.rsplit(".", 1)[0]) if "." in path else None
    return ">= " if isinstance(parent, dict) and parent.get("converged") is False and parent.get("reason") is None else ""


def _cell_text(record: dict[str, Any] | None, metric: str, paper: float | None) -> str:
    if record is None:
        return "-"
    if record["state"] != "done":
        if record["state"] == "failed" and " not found" in (record.get("error") or ""):
            return "missing data"  # the dataset's layout sentence is in the Jobs table
        return {"failed": "failed", "blocked": "blocked", NOT_AT_SCALE: "not at this scale"}.get(
            record["state"], "not run yet")
    ours = metric_of(record["result"], metric)
    if ours == "inf" or ours == float("inf"):
        return "∞" + ("" if paper is None else f" ({number(paper)})") + collapsed_mark(record)
    if not isinstance(ours, (int, float)):
        return "missing"
    shown = _bound(record["result"], metric) + number(ours)
    if paper is not None:
        shown += " (∞)" if paper == float("inf") else f" ({number(paper)}, {ours - paper:+.1f})"
    return shown + collapsed_mark(record)


def collapsed_mark(record: dict[str, Any] | None) -> str:
    """`` collapsed`` after the number of a cell whose training collapsed (the reasons follow the table)."""
    return " collapsed" if record and record.get("state") == "done" and record.get("collapsed") else ""


def collapse_notes(records: list[dict[str, Any]]) -> str:
    """The reason of each collapsed training among ``records``' cells, one line each, or ''."""
    reasons = sorted({r["collapsed"] for r in records if collapsed_mark(r)})
    return "".join(f"\n- collapsed: {reason}" for reason in reasons)


def _epochs(records: list[dict[str, Any]], choice: Any) -> list[str]:
    found = sorted({r["labels"].get("epoch") for r in records},
                   key=lambda e: (not str(e).isdigit(), int(e) if str(e).isdigit() else 0))
    if choice in (None, "last"):
        return found[-1:]
    if choice == "all":
        return found
    return [str(choice)]


def _combos(records: list[dict[str, Any]], axes: list[str], experiment: Experiment, evaluation: str) -> list[tuple]:
    """The value combinations of ``axes`` in file order (axes of the file), those present in ``records``."""
    order = {a.name: a.values for a in experiment.runs.axes}
    if evaluation != RUNS:
        order.update({a.name: a.values for a in experiment.evaluations[evaluation].axes})
        order["epoch"] = _epochs(records, "all")  # in number order, not text order (20 before 100)
    present = {tuple(r["labels"].get(a) for a in axes) for r in records}
    return [c for c in itertools.product(*(order.get(a, sorted({r["labels"].get(a) for r in records})) for a in axes))
            if c in present]


def table_section(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment) -> str:
    from eval.shared.report import markdown_table

    ev = item["evaluation"]
    metric = item.get("metric") or (experiment.evaluations[ev].metric if ev != RUNS else None)
    mine = [r for r in records if r["evaluation"] == ev]
    rows, cols = list(item.get("rows") or []), list(item.get("columns") or [])
    ref = item.get("reference") or {}
    ref_cols = [str(c) for c in ref.get("columns", [])]
    ref_rows = {str(k): v for k, v in (ref.get("rows") or {}).items()}
    out = []
    epochs = _epochs(mine, item.get("epoch"))
    across = "epoch" in rows + cols  # one table, a row or column per epoch
    for epoch in [None] if across else epochs:
        at = [r for r in mine if r["labels"].get("epoch") in ((*epochs, None) if across else (epoch, None))]
        col_combos, row_combos = _combos(at, cols, experiment, ev), _combos(at, rows, experiment, ev)
        body = []
        for rc in row_combos:
            line = ["/".join(rc)]
            for cc in col_combos:
                want = dict(zip(rows + cols, rc + cc))
                found = next((r for r in at if all(r["labels"].get(k) == v for k, v in want.items())), None)
                paper = None
                row_ref, key = ref_rows.get("/".join(rc)), "/".join(cc) or metric
                if row_ref is not None and key in ref_cols:
                    paper = ref_rows["/".join(rc)][ref_cols.index(key)]
                line.append(_cell_text(found, metric, paper))
            body.append(line)
        header = ["/".join(rows) or "", *("/".join(c) or metric for c in col_combos)]
        paper_epoch = f"; the paper's numbers are at epoch {ref['epoch']}" if "epoch" in ref else ""
        when = (f"Epoch {epoch}{paper_epoch}. " if epoch is not None
                else f"Epochs {', '.join(epochs)}{paper_epoch}. " if across else "")
        out.append(f"{when}Cells: ours (paper, ours - paper), {metric}.\n\n" + markdown_table(header, body)
                   + collapse_notes(at))
    if ref_rows:
        out.append("The paper's table:\n\n" + markdown_table(
            ["/".join(rows) or "", *ref_cols], [[k, *(number(v) for v in vals)] for k, vals in ref_rows.items()]))
    return "\n".join(out)


def curve_section(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment, folder: Path,
                  index: int) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from eval.shared.report import markdown_table

    ev, metric = item["evaluation"], item.get("metric") or experiment.evaluations[item["evaluation"]].metric
    lines_axes = list(item.get("lines") or axis_names(experiment, ev))
    ref = item.get("reference") or {}
    ref_values = {str(k): v for k, v in (ref.get("values") or {}).items()}
    mine = [r for r in records if r["evaluation"] == ev]
    epochs = _epochs(mine, item.get("epoch"))
    fig, ax = plt.subplots(figsize=(7, 4))
    body = []
    for epoch in epochs:
        for combo in _combos([r for r in mine if r["labels"].get("epoch") == epoch], lines_axes, experiment, ev):
            label = "/".join(combo)
            want = dict(zip(lines_axes, combo))
            found = next((r for r in mine if r["labels"].get("epoch") == epoch
                          and all(r["labels"].get(k) == v for k, v in want.items())), None)
            per_block = metric_of(found["result"], metric) if found and found["state"] == "done" else None
            paper = ref_values.get(label)
            if isinstance(per_block, dict) and per_block:
                blocks = sorted(per_block, key=int)
                values = [per_block[b] for b in blocks]
                ax.plot([int(b) for b in blocks], values, marker="o", label=f"{label} (epoch {epoch})")
                best = max(range(len(values)), key=lambda i: values[i] if values[i] is not None else -1)
                cell = (f"{values[best]:.1f}" + (f" ({paper:.1f}, {values[best] - paper:+.1f})" if paper is not None else "")
                        + collapsed_mark(found))
                body.append([label, epoch, cell, blocks[best]])
            else:
                body.append([label, epoch, _cell_text(found, metric, paper), "-"])
    ax.set_xlabel("block")
    ax.set_ylabel(metric)
    ax.set_title(item.get("title", ev))
    if ax.lines:
        ax.legend(fontsize=7)
    figure = folder / experiment.name / "figures" / f"{index:02d}-{ev}.png"
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(figure, dpi=90)
    plt.close(fig)
    what = ref.get("what", f"best block of {metric}")
    return (f"![{ev}](figures/{figure.name})\n\n{what}: ours (paper, ours - paper).\n\n"
            + markdown_table(["/".join(lines_axes), "epoch", "best", "block"], body) + collapse_notes(mine))


def images_section(item: dict[str, Any], records: list[dict[str, Any]], folder: Path) -> str:
    """``folder``: the experiment's folder (where report.md is). An evaluation's images follow one another;
    the training runs' own (``evaluation: runs``, e.g. MAE's ``reconstructions/epoch*.png``) stand side by side
    in one table row, each run's newest match with ``epoch: last``."""
    if item["evaluation"] == RUNS:
        return _run_images(item, records, folder)
    lines = []
    for r in records:
        if r["evaluation"] != item["evaluation"] or r["state"] != "done":
            continue
        job_dir = folder / "evals" / r["job"]
        for image in sorted(job_dir.glob(item.get("images", "*/*.png"))):
            label = ", ".join(f"{k} {v}" for k, v in r["labels"].items())
            lines.append(f"{label}:\n\n![{label}]({image.relative_to(folder)})\n")
    return "\n".join(lines) or "No images yet."


def _run_images(item: dict[str, Any], records: list[dict[str, Any]], folder: Path) -> str:
    heads, cells = [], []
    for r in records:
        if r["evaluation"] != RUNS or r["state"] != "done":
            continue
        found = sorted(r["file"].parent.glob(item.get("images", "*.png")))
        for image in found[-1:] if item.get("epoch") == "last" else found:
            label = "/".join(r["labels"].values()) + collapsed_mark(r)
            heads.append(f"{label} ({image.stem})")
            cells.append(f"![{label}]({os.path.relpath(image, folder)})")
    if not cells:
        return "No images yet."
    return "| " + " | ".join(heads) + " |\n|" + "---|" * len(heads) + "\n| " + " | ".join(cells) + " |\n"


def scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """``(step, value)`` of a TensorBoard scalar of a run (its ``tb/`` events, resumed runs included)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points: dict[int, float] = {}
    for events in sorted((run_dir / "tb").rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        if tag in acc.Tags().get("scalars", []):
            points.update({e.step: e.value for e in acc.Scalars(tag)})
    return sorted(points.items())


def history_section(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment, folder: Path,
                    index: int) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from eval.shared.report import markdown_table

    tags = list(item.get("tags") or ["train/loss"])
    runs = [r for r in records if r["evaluation"] == RUNS and r["state"] == "done"]
    fig, axes = plt.subplots(1, len(tags), figsize=(4.5 * len(tags), 3.6), squeeze=False)
    body = []
    for r in runs:
        label = "/".join(r["labels"].values())
        last = []
        for ax, tag in zip(axes.flat, tags):
            points = scalars(r["file"].parent, tag)
            if points:
                ax.plot([p[0] for p in points], [p[1] for p in points], label=label,
                        marker="o" if len(points) < 30 else None, markersize=3)
            last.append(points[-1][1] if points else None)
        body.append([label + collapsed_mark(r), *last])
    for ax, tag in zip(axes.flat, tags):
        ax.set_title(tag, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
    if runs:
        axes.flat[0].legend(fontsize=7)
    figure = folder / experiment.name / "figures" / f"{index:02d}-history.png"
    figure.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(figure, dpi=90)
    plt.close(fig)
    return (f"![history](figures/{figure.name})\n\nThe last value of each curve:\n\n"
            + markdown_table(["run", *tags], body, float_format=".3g") + collapse_notes(runs))


def series_part(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment, folder: Path,
                index: int) -> str:
    """A ``series`` item (``series.py``) for the finished training runs, at the epochs the evaluations read."""
    runs = [r for r in records if r["evaluation"] == RUNS and r["state"] == "done"]
    lines = [("/".join(r["labels"].values()) + collapsed_mark(r), r["file"].parent) for r in runs]
    evaluated = [e for e in _epochs([r for r in records if r["evaluation"] != RUNS], "all") if str(e).isdigit()]
    figure = folder / experiment.name / "figures" / f"{index:02d}-series.png"
    return series_section(item, lines, evaluated, figure) + collapse_notes(runs)


def write_report(folder: Path, experiment: Experiment, scale: str, jobs: list[Job],
                 skipped: list[dict[str, Any]], command: str) -> Path:
    """Write ``<folder>/<experiment>/report.md`` (and its figures) for what is on disk now (``folder``:
    the scale folder); returns its path."""
    records = cell_states(folder, jobs, skipped)
    parts = [f"# {experiment.title}", "",
             f"{experiment.source}. Scale: **{scale}**. Written {time.strftime('%Y-%m-%d %H:%M')} by `{command}`.", ""]
    for i, item in enumerate(experiment.report):
        parts += [f"## {item.get('title', item['evaluation'])}", ""]
        if item["kind"] == "table":
            parts.append(table_section(item, records, experiment))
        elif item["kind"] == "curve":
            parts.append(curve_section(item, records, experiment, folder, i))
        elif item["kind"] == "history":
            parts.append(history_section(item, records, experiment, folder, i))
        elif item["kind"] == "series":
            parts.append(series_part(item, records, experiment, folder, i))
        else:
            parts.append(images_section(item, records, folder / experiment.name))
        parts.append("")
    parts += ["## Jobs", "", _jobs_table(folder, jobs, folder / experiment.name), ""]
    if skipped:
        parts += [f"Not run at scale {scale} (the experiment file lists no overrides for it): "
                  + "; ".join("/".join(str(v) for v in c.values()) for c in skipped), ""]
    path = folder / experiment.name / "report.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_text("\n".join(parts) + "\n"))
    return path


def _jobs_table(folder: Path, jobs: list[Job], here: Path) -> str:
    """Every job, its state, a link to its output (relative to ``here``, the report's folder)."""
    from eval.shared.report import markdown_table

    rows = []
    for job in jobs:
        marker = read_marker(folder, job) or {}
        state = job_state(folder, job) or "not run yet"
        target = folder / job.run_dir if job.run_dir else Path(str(folder / job.result)).parents[1]
        where = os.path.relpath(target, here)
        note = marker.get("error", "") if state != "done" else f"{marker.get('seconds', 0):.0f} s"
        rows.append([job.name, state, f"[{where}]({where})", note, f"`{job.shown()}`"])
    return markdown_table(["job", "state", "output", "seconds / error", "command"], rows)
