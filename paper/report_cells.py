"""What a report's cell reads and how a table shows it (``report.py`` writes the report): each job's state
and collapse, a number as the report prints it (a bound as ``>= x``, ∞), the paper's reference at an
epoch, and the ``table`` item: ``ours (paper, ours - paper)`` per cell, then the paper's table as printed.
"""
from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

from skipless.reports.tables import markdown_table

from .experiment import RUNS, Experiment
from .jobs import Job, job_state, read_marker, result_files
from .series import metric_of


NOT_AT_SCALE = "not at this scale"


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
        if job.kind == "run":  # a history reads the run's curves, also when it stopped (diverged)
            record["run_dir"] = folder / job.run_dir
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


def cell_text(record: dict[str, Any] | None, metric: str, paper: float | None) -> str:
    if record is None:
        return "-"
    if record["state"] != "done":
        if record["state"] == "failed" and " not found" in (record.get("error") or ""):
            return "missing data"  # the dataset's layout sentence is in the Jobs table
        diverged = re.search(r"diverged at step (\d+)", record.get("error") or "")
        if record["state"] == "failed" and diverged:  # training/divergence.py's sentence: the step it stopped at
            return f"diverged at step {diverged.group(1)}"
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


def chosen_epochs(records: list[dict[str, Any]], choice: Any) -> list[str]:
    found = sorted({r["labels"].get("epoch") for r in records},
                   key=lambda e: (not str(e).isdigit(), int(e) if str(e).isdigit() else 0))
    if choice in (None, "last"):
        return found[-1:]
    if choice == "all":
        return found
    return [str(choice)]


def combos(records: list[dict[str, Any]], axes: list[str], experiment: Experiment, evaluation: str) -> list[tuple]:
    """The value combinations of ``axes`` in file order (axes of the file), those present in ``records``."""
    order = {a.name: a.values for a in experiment.runs.axes}
    if evaluation != RUNS:
        order.update({a.name: a.values for a in experiment.evaluations[evaluation].axes})
        order["epoch"] = chosen_epochs(records, "all")  # in number order, not text order (20 before 100)
    present = {tuple(r["labels"].get(a) for a in axes) for r in records}
    return [c for c in itertools.product(*(order.get(a, sorted({r["labels"].get(a) for r in records})) for a in axes))
            if c in present]


def paper_at(ref: dict[str, Any], epoch: str | None, key: str = "rows") -> tuple[dict[str, Any], Any]:
    """(the paper's numbers of a ``reference`` block for the table or curve of ``epoch``, the epoch they are
    at): ``reference.epochs.<epoch>.<key>`` where the paper prints numbers at that very epoch (Table 2's
    200-epoch columns), else ``reference.<key>``, at ``reference.epoch``, whatever epoch ours is (the demo's
    4 against the paper's 300)."""
    other = (ref.get("epochs") or {}).get(str(epoch)) if epoch is not None else None
    if other is not None:
        return {str(k): v for k, v in (other.get(key) or {}).items()}, epoch
    return {str(k): v for k, v in (ref.get(key) or {}).items()}, ref.get("epoch")


def save_figure(fig: Any, path: Path) -> None:
    """Write a report's figure as a PNG at ``path`` (beside report.md, its folder made) and free it."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def table_section(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment) -> str:

    ev = item["evaluation"]
    if item.get("metrics"):
        return metrics_table(item, [r for r in records if r["evaluation"] == ev], experiment)
    metric = item.get("metric") or (experiment.evaluations[ev].metric if ev != RUNS else None)
    mine = [r for r in records if r["evaluation"] == ev]
    rows, cols = list(item.get("rows") or []), list(item.get("columns") or [])
    ref = item.get("reference") or {}
    ref_cols = [str(c) for c in ref.get("columns", [])]
    out = []
    epochs = chosen_epochs(mine, item.get("epoch"))
    across = "epoch" in rows + cols  # one table, a row or column per epoch
    for epoch in [None] if across else epochs:
        ref_rows, ref_epoch = paper_at(ref, epoch)
        at = [r for r in mine if r["labels"].get("epoch") in ((*epochs, None) if across else (epoch, None))]
        col_combos, row_combos = combos(at, cols, experiment, ev), combos(at, rows, experiment, ev)
        body = []
        for rc in row_combos:
            line = ["/".join(rc)]
            for cc in col_combos:
                want = dict(zip(rows + cols, rc + cc))
                found = next((r for r in at if all(r["labels"].get(k) == v for k, v in want.items())), None)
                paper = None
                row_ref, key = ref_rows.get("/".join(rc)), "/".join(cc) or metric
                if row_ref is not None and key in ref_cols:
                    paper = row_ref[ref_cols.index(key)]
                line.append(cell_text(found, metric, paper))
            body.append(line)
        header = ["/".join(rows) or "", *("/".join(c) or metric for c in col_combos)]
        paper_epoch = f"; the paper's numbers are at epoch {ref_epoch}" if ref_epoch is not None else ""
        when = (f"Epoch {epoch}{paper_epoch}. " if epoch is not None
                else f"Epochs {', '.join(epochs)}{paper_epoch}. " if across else "")
        out.append(f"{when}Cells: ours (paper, ours - paper), {metric}.\n\n" + markdown_table(header, body)
                   + collapse_notes(at))
    out += paper_tables(ref, "/".join(rows) or "")
    return "\n".join(out)


def paper_tables(ref: dict[str, Any], corner: str) -> list[str]:
    """The paper's numbers of a ``reference`` block as it prints them: its table, then its table at each
    other epoch it gives (``reference.epochs``)."""

    ref_cols = [str(c) for c in ref.get("columns", [])]
    blocks = [("", ref.get("rows"))] + [(f" at epoch {e}", other.get("rows"))
                                       for e, other in (ref.get("epochs") or {}).items()]
    return [f"The paper's table{when}:\n\n" + markdown_table([corner, *ref_cols],
                                                           [[k, *(number(v) for v in vals)] for k, vals in rows.items()])
            for when, rows in blocks if rows]


def metrics_table(item: dict[str, Any], mine: list[dict[str, Any]], experiment: Experiment) -> str:
    """A ``table`` with ``metrics`` ({column title: dotted key}): a row per combination of ``rows`` run at this
    scale (at the last epoch evaluated), a column per metric, each cell as ``cell_text`` writes it (a whole
    number with its thousands, a word as it is, no paper numbers). With ``best: <axis>`` (one of ``rows``), a second table keeps,
    of each combination of the other rows, the row of that axis whose ``metric`` is highest (Table 7: the best
    lr of each model by the mean)."""
    ev, rows = item["evaluation"], list(item.get("rows") or [])
    epochs = chosen_epochs(mine, item.get("epoch"))
    at = [r for r in mine if r["labels"].get("epoch") in (*epochs, None) and r["state"] != NOT_AT_SCALE]

    def line(found: dict[str, Any] | None, name: str) -> list[str]:
        cells = []
        for key in item["metrics"].values():
            value = metric_of(found["result"], key) if found and found["state"] == "done" else None
            whole = isinstance(value, int) and not isinstance(value, bool)
            if isinstance(value, str) and value not in ("inf", "nan"):  # a word the run wrote (summary.json's wall.hardware)
                cells.append(value + collapsed_mark(found))
                continue
            cells.append(f"{value:,}" + collapsed_mark(found) if whole else cell_text(found, key, None))
        return [name, *cells]

    found = {rc: next((r for r in at if all(r["labels"].get(k) == v for k, v in zip(rows, rc))), None)
             for rc in combos(at, rows, experiment, ev)}
    out = markdown_table(["/".join(rows), *item["metrics"]], [line(r, "/".join(rc)) for rc, r in found.items()])
    axis = item.get("best")
    if axis:
        by, i = item["metric"], rows.index(axis)
        groups: dict[tuple, list[tuple]] = {}
        for rc in found:
            groups.setdefault(rc[:i] + rc[i + 1:], []).append(rc)
        best = []
        for rest, members in groups.items():
            scored = [(metric_of(found[rc]["result"], by), rc) for rc in members
                      if found[rc] and found[rc]["state"] == "done"]
            scored = [(v, rc) for v, rc in scored if isinstance(v, (int, float))]
            if scored:
                rc = max(scored, key=lambda p: p[0])[1]
                best.append(line(found[rc], "/".join(rest) + f" ({axis} {rc[i]})"))
            else:
                best.append(["/".join(rest) + f" ({axis}: none finished)", *("-" for _ in item["metrics"])])
        others = "/".join(a for a in rows if a != axis)
        out += (f"\n\nThe best {axis} of each {others or 'cell'}, by {by} (highest):\n\n"
                + markdown_table([f"{others} ({axis})", *item["metrics"]], best))
    return out + collapse_notes(at)
