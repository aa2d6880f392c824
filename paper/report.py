"""The report of an experiment: each of our cells beside the paper's, the difference, and links.

``<scale folder>/<experiment>/report.md``, written from what is on disk (the job markers and result
files), so it can be written at any time: cells whose job is not done say why (not run at this
scale, failed with its error, blocked by a failed training, not run yet). Items of the experiment
file's ``report`` (any of them may carry a ``note``, a paragraph under its title: which protocol made
its numbers, where the paper contradicts itself):

- ``table``: one number per cell (``metric``, a dotted key of the result JSON), laid out as the paper's
  table (``rows`` and ``columns`` name axes); each cell reads ``ours (paper, ours - paper)``, and the
  paper's table follows as it is printed. ``evaluation: runs`` reads the training runs' own
  ``summary.json`` (a supervised run's ``val.top1``: Table 1). A condition number that did not converge
  is shown as the lower bound it is (``>= x``), an infinite one as ∞. A cell whose training collapsed
  (the run's ``summary.json`` says ``collapsed``) reads ``<number> collapsed``, with the reasons under
  the table; so do the curves' best blocks and the histories' runs. ``reference.epoch`` says which epoch
  the paper's numbers are at; ``reference.epochs: {<epoch>: {rows: ...}}`` gives its numbers at other
  epochs (Table 2's 200-epoch columns), used in the table of that very epoch.
- ``curve``: ``x: block`` (the default), a value per block (``metric`` a ``{block: value}`` mapping, e.g.
  TokenCut's CorLoc), one line per cell in one figure (``figures/<item>.png``), and the best block of
  each line against the paper's (``reference.values``, and ``reference.epochs: {<epoch>: {values: ...}}``).
  ``x: epoch``: one number per cell (the probe's mIoU, TokenCut's ``best_corloc``) at every checkpoint
  evaluated, a panel per ``panels`` combination and a line per ``lines`` one (Figure 2), the paper's
  numbers as hollow squares, and the numbers as a table with a column per epoch.
- ``images``: the figures the evaluator wrote (``images``: a glob under each job's output), embedded; with
  ``evaluation: runs``, images the training runs wrote (a glob under each run folder, e.g. MAE's
  reconstructions), side by side.
- ``history``: the training runs' TensorBoard scalars (``tags``, e.g. ``train/loss``, ``val/top1``;
  ``run_scalars.py``), one panel per tag (and per ``panels`` combination) and one line per run: against
  the step with each run's last value (seeds/004's Figure 1), or with ``x: epoch`` each epoch's mean
  against the epoch, tabulated at a few epochs (Ji et al.'s Figures 1 and 9: the training loss).
- ``series``: a value per epoch from a JSON-lines file of each training run (``rank.jsonl``'s effective
  rank, seed 002's Figure 5a; ``diagnostics.jsonl``'s condition numbers, Tables 5-6 as measured during
  training; ``series.py``), at the epochs the evaluations read, beside the paper's (``reference``).

A table whose ``rows`` or ``columns`` name ``epoch`` is one table over the epochs chosen (Tables 5-6,
Figure 5b: one column per checkpoint); otherwise each epoch gets its own table.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from skipless.atomic import atomic_write

from .experiment import RUNS, Experiment, axis_names
from .jobs import Job, job_state, read_marker, result_files
from .run_scalars import epoch_means, read_scalars
from .series import metric_of, series_section

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
    from eval.shared.report import markdown_table

    ev = item["evaluation"]
    metric = item.get("metric") or (experiment.evaluations[ev].metric if ev != RUNS else None)
    mine = [r for r in records if r["evaluation"] == ev]
    rows, cols = list(item.get("rows") or []), list(item.get("columns") or [])
    ref = item.get("reference") or {}
    ref_cols = [str(c) for c in ref.get("columns", [])]
    out = []
    epochs = _epochs(mine, item.get("epoch"))
    across = "epoch" in rows + cols  # one table, a row or column per epoch
    for epoch in [None] if across else epochs:
        ref_rows, ref_epoch = paper_at(ref, epoch)
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
                    paper = row_ref[ref_cols.index(key)]
                line.append(_cell_text(found, metric, paper))
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
    from eval.shared.report import markdown_table

    ref_cols = [str(c) for c in ref.get("columns", [])]
    blocks = [("", ref.get("rows"))] + [(f" at epoch {e}", other.get("rows"))
                                       for e, other in (ref.get("epochs") or {}).items()]
    return [f"The paper's table{when}:\n\n" + markdown_table([corner, *ref_cols],
                                                           [[k, *(number(v) for v in vals)] for k, vals in rows.items()])
            for when, rows in blocks if rows]


def curve_section(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment, folder: Path,
                  index: int) -> str:
    if item.get("x") == "epoch":
        return epoch_curve_section(item, records, experiment, folder, index)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from eval.shared.report import markdown_table

    ev, metric = item["evaluation"], item.get("metric") or experiment.evaluations[item["evaluation"]].metric
    lines_axes = list(item.get("lines") or axis_names(experiment, ev))
    ref = item.get("reference") or {}
    mine = [r for r in records if r["evaluation"] == ev]
    epochs = _epochs(mine, item.get("epoch"))
    fig, ax = plt.subplots(figsize=(7, 4))
    body = []
    for epoch in epochs:
        ref_values, _ = paper_at(ref, epoch, "values")
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
    save_figure(fig, figure)
    what = ref.get("what", f"best block of {metric}")
    return (f"![{ev}](figures/{figure.name})\n\n{what}: ours (paper, ours - paper){_paper_epochs(ref)}.\n\n"
            + markdown_table(["/".join(lines_axes), "epoch", "best", "block"], body) + collapse_notes(mine))


def _paper_epochs(ref: dict[str, Any]) -> str:
    """Which epoch the paper's numbers of a curve's ``reference`` are at, as a clause ('' when unsaid)."""
    if "epoch" not in ref:
        return ""
    others = list(ref.get("epochs") or {})
    return (f"; the paper's numbers are at epoch {ref['epoch']}"
            + "".join(f" (on the epoch-{e} rows, its epoch-{e} numbers where it gives them)" for e in others))


def epoch_curve_section(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment, folder: Path,
                        index: int) -> str:
    """A ``curve`` with ``x: epoch``: one number of each cell (``metric``, a scalar: the probe's mIoU,
    TokenCut's best defined block) at every checkpoint evaluated, a panel per combination of ``panels``
    and a line per combination of ``lines`` (Ji et al., Figure 2: the dense probe throughout pretraining),
    the paper's numbers as hollow squares at their epochs (``reference``: ``columns`` epochs, ``rows``
    keyed panel/line), then the numbers as a table (``table_section``, a column per epoch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    ev = item["evaluation"]
    metric = item.get("metric") or experiment.evaluations[ev].metric
    panels = list(item.get("panels") or [])
    lines = list(item.get("lines") or [a for a in axis_names(experiment, ev) if a not in panels and a != "epoch"])
    ref = item.get("reference") or {}
    ref_cols = [int(c) for c in ref.get("columns", [])]
    ref_rows = {str(k): v for k, v in (ref.get("rows") or {}).items()}
    mine = [r for r in records if r["evaluation"] == ev and str(r["labels"].get("epoch")).isdigit()]
    epochs = [int(e) for e in _epochs(mine, "all")]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = [r for r in mine if r["state"] != NOT_AT_SCALE]  # a panel per cell this scale runs (the table has all)
    panel_combos, line_combos = _combos(drawn, panels, experiment, ev), _combos(drawn, lines, experiment, ev)
    count = max(1, len(panel_combos))
    across = min(3, count)  # panels per row of the figure
    down = math.ceil(count / across)
    fig, axes = plt.subplots(down, across, figsize=(4.2 * across, 3.4 * down), squeeze=False)
    for ax in list(axes.flat)[len(panel_combos):]:
        ax.set_visible(False)
    for ax, pc in zip(axes.flat, panel_combos):
        here = [r for r in drawn if all(r["labels"].get(a) == v for a, v in zip(panels, pc))]
        for lc in _combos(here, lines, experiment, ev):
            cells = [r for r in here if all(r["labels"].get(a) == v for a, v in zip(lines, lc))]
            ours = sorted((int(r["labels"]["epoch"]), metric_of(r["result"], metric)) for r in cells
                          if r["state"] == "done")
            ours = [(e, v) for e, v in ours if isinstance(v, (int, float)) and math.isfinite(v)]
            colour = colours[line_combos.index(lc) % len(colours)]  # one colour per line in every panel
            if ours:
                ax.plot(*zip(*ours), marker="o", markersize=4, color=colour, label="/".join(lc))
            paper = [(e, v) for e, v in zip(ref_cols, ref_rows.get("/".join(pc + lc), []))
                     if v is not None and epochs and epochs[0] <= e <= epochs[-1]]  # not the paper's 300 beside a demo's 4
            if paper:
                ax.plot(*zip(*paper), linestyle="none", marker="s", markerfacecolor="none", color=colour)
        ax.set_title("/".join(pc) or metric, fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("epoch", fontsize=8)
        ax.set_ylabel(metric, fontsize=8)
        if ax.lines:
            ax.legend(fontsize=7)
    figure = folder / experiment.name / "figures" / f"{index:02d}-{ev}-epochs.png"
    save_figure(fig, figure)
    table = table_section({**item, "rows": panels + lines, "columns": ["epoch"], "epoch": "all"}, records, experiment)
    return (f"![{ev} over training](figures/{figure.name})\n\n{metric} of each checkpoint, a line per "
            f"{'/'.join(lines)}" + (f", a panel per {'/'.join(panels)}" if panels else "")
            + "; hollow squares: the paper's numbers at the epochs within ours.\n\n" + table)


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


def history_section(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment, folder: Path,
                    index: int) -> str:
    """A ``history`` item: the finished training runs' TensorBoard scalars (``tags``, ``train/loss`` by
    default; ``run_scalars.py``), a panel per tag and per combination of the ``panels`` axes (Ji et al.'s
    Figure 1: AdamW left, SOAP right), a line per run. ``x: step`` (the default) draws every logged point
    and tabulates each curve's last value; ``x: epoch`` draws each epoch's mean (Figures 1 and 9, the
    training loss over 300 epochs) and tabulates it at a few epochs (``history_epochs``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator
    from eval.shared.report import markdown_table

    tags = list(item.get("tags") or ["train/loss"])
    by_epoch = item.get("x") == "epoch"
    panels = list(item.get("panels") or [])
    runs = [r for r in records if r["evaluation"] == RUNS and r["state"] == "done"]
    curves = {}  # job -> tag -> [(x, value)]
    for r in runs:
        if by_epoch:
            curves[r["job"]] = {t: sorted(m.items()) for t, m in epoch_means(r["file"].parent, tags).items()}
        else:
            curves[r["job"]] = read_scalars(r["file"].parent, tags)
    panel_combos = _combos(runs, panels, experiment, RUNS) or [()]
    shape = (len(tags), len(panel_combos)) if panels else (1, len(tags))  # without panels: the tags side by side
    fig, axes = plt.subplots(*shape, figsize=(4.5 * shape[1], 3.6 * shape[0]), squeeze=False)
    for row, tag in enumerate(tags):
        for col, pc in enumerate(panel_combos):
            ax = axes[row][col] if panels else axes[0][row]
            for r in runs:
                if any(r["labels"].get(a) != v for a, v in zip(panels, pc)):
                    continue
                points = curves[r["job"]][tag]
                if points:
                    ax.plot([p[0] for p in points], [p[1] for p in points],
                            label="/".join(v for a, v in r["labels"].items() if a not in panels),
                            marker="o" if len(points) < 30 else None, markersize=3)
            ax.set_title(" ".join(filter(None, [tag, "/".join(pc)])), fontsize=9)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("epoch (each epoch's mean)" if by_epoch else "step", fontsize=8)
            if ax.lines:
                ax.legend(fontsize=7)
    figure = folder / experiment.name / "figures" / f"{index:02d}-history.png"
    save_figure(fig, figure)
    shown = f"![history](figures/{figure.name})\n\n"
    labels = {r["job"]: "/".join(r["labels"].values()) + collapsed_mark(r) for r in runs}
    if not by_epoch:
        body = [[labels[r["job"]], *(curves[r["job"]][t][-1][1] if curves[r["job"]][t] else None for t in tags)]
                for r in runs]
        return (shown + "The last value of each curve:\n\n" + markdown_table(["run", *tags], body, float_format=".3g")
                + collapse_notes(runs))
    evaluated = [int(e) for e in _epochs([r for r in records if r["evaluation"] != RUNS], "all") if str(e).isdigit()]
    last = max((p[0] for c in curves.values() for points in c.values() for p in points), default=0)
    columns = history_epochs(last, evaluated)
    if not columns:
        return shown + f"No finished run has logged {', '.join(tags)} yet." + collapse_notes(runs)
    for tag in tags:
        body = [[labels[r["job"]], *(dict(curves[r["job"]][tag]).get(e) for e in columns)] for r in runs]
        shown += (f"The mean {tag} of each run over an epoch, at epochs {', '.join(map(str, columns))}:\n\n"
                  + markdown_table(["run", *map(str, columns)], body, float_format=".4g") + "\n\n")
    return shown.rstrip() + collapse_notes(runs)


def history_epochs(last: int, evaluated: list[int]) -> list[int]:
    """The epochs a ``history`` over epochs tabulates: the first, each quarter of the runs' ``last`` epoch
    and the last (300: 1, 75, 150, 225, 300), and the epochs the experiment evaluates."""
    if last < 1:
        return []
    quarters = {max(1, round(last * q / 4)) for q in (1, 2, 3)}
    return sorted({1, last, *quarters, *(e for e in evaluated if 1 <= e <= last)})


def series_part(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment, folder: Path,
                index: int) -> str:
    """A ``series`` item (``series.py``) for the finished training runs, at the epochs the evaluations read:
    a row per run named by its ``lines`` axes, each cell ours (paper, ours - paper) where ``reference``
    gives the paper's number, written as a table's cells are (∞, a condition number's lower bound)."""
    runs = [r for r in records if r["evaluation"] == RUNS and r["state"] == "done"]
    axes = list(item.get("lines") or [a.name for a in experiment.runs.axes])
    plain = ["/".join(r["labels"][a] for a in axes) for r in runs]  # as the reference names the rows
    shown = [label + collapsed_mark(r) for label, r in zip(plain, runs)]
    named = dict(zip(shown, plain))
    metric = item.get("metric", "rho")
    ref = item.get("reference") or {}
    ref_cols = [str(c) for c in ref.get("columns", [])]
    ref_rows, _ = paper_at(ref, None)

    def cell(line: dict[str, Any] | None, label: str, column: str) -> str:
        row = ref_rows.get(named[label])
        paper = row[ref_cols.index(column)] if row is not None and column in ref_cols else None
        return _cell_text(None if line is None else {"state": "done", "result": line}, metric, paper)

    lines = [(label, r["file"].parent) for label, r in zip(shown, runs)]
    evaluated = [e for e in _epochs([r for r in records if r["evaluation"] != RUNS], "all") if str(e).isdigit()]
    figure = folder / experiment.name / "figures" / f"{index:02d}-series.png"
    return "\n\n".join([series_section(item, lines, evaluated, figure, cell), *paper_tables(ref, "/".join(axes))]
                       ) + collapse_notes(runs)


def write_report(folder: Path, experiment: Experiment, scale: str, jobs: list[Job],
                 skipped: list[dict[str, Any]], command: str) -> Path:
    """Write ``<folder>/<experiment>/report.md`` (and its figures) for what is on disk now (``folder``:
    the scale folder); returns its path."""
    records = cell_states(folder, jobs, skipped)
    parts = [f"# {experiment.title}", "",
             f"{experiment.source}. Scale: **{scale}**. Written {time.strftime('%Y-%m-%d %H:%M')} by `{command}`.", ""]
    for i, item in enumerate(experiment.report):
        parts += [f"## {item.get('title', item['evaluation'])}", ""]
        if item.get("note"):  # what the numbers are (a protocol, the paper's own inconsistencies), in words
            parts += [" ".join(str(item["note"]).split()), ""]
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
