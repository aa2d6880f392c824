"""The report's items drawn as figures (``report.py`` writes the report): ``curve`` (a value per block, or
one number per checkpoint over the epochs: Figure 2), ``images`` (the evaluators' or the runs' own
figures, embedded), ``history`` (TensorBoard scalars of the training runs: Figures 1 and 9) and
``series`` (a value per epoch from a run's JSON lines: seed 002's Figure 5a, Tables 5-6 during training).
Each writes its PNG under ``figures/`` beside report.md and returns its markdown.
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from skipless.reports.tables import markdown_table

from .experiment import RUNS, Experiment, axis_names
from .report_cells import (NOT_AT_SCALE, cell_text, chosen_epochs, collapse_notes, collapsed_mark, combos, paper_at,
                           paper_tables, save_figure, table_section)
from .run_scalars import epoch_means, read_scalars
from .series import metric_of, series_section


def curve_section(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment, folder: Path,
                  index: int) -> str:
    if item.get("x") == "epoch":
        return epoch_curve_section(item, records, experiment, folder, index)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev, metric = item["evaluation"], item.get("metric") or experiment.evaluations[item["evaluation"]].metric
    lines_axes = list(item.get("lines") or axis_names(experiment, ev))
    ref = item.get("reference") or {}
    mine = [r for r in records if r["evaluation"] == ev]
    epochs = chosen_epochs(mine, item.get("epoch"))
    fig, ax = plt.subplots(figsize=(7, 4))
    body = []
    for epoch in epochs:
        ref_values, _ = paper_at(ref, epoch, "values")
        for combo in combos([r for r in mine if r["labels"].get("epoch") == epoch], lines_axes, experiment, ev):
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
                body.append([label, epoch, cell_text(found, metric, paper), "-"])
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
    epochs = [int(e) for e in chosen_epochs(mine, "all")]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    drawn = [r for r in mine if r["state"] != NOT_AT_SCALE]  # a panel per cell this scale runs (the table has all)
    panel_combos, line_combos = combos(drawn, panels, experiment, ev), combos(drawn, lines, experiment, ev)
    count = max(1, len(panel_combos))
    across = min(3, count)  # panels per row of the figure
    down = math.ceil(count / across)
    fig, axes = plt.subplots(down, across, figsize=(4.2 * across, 3.4 * down), squeeze=False)
    for ax in list(axes.flat)[len(panel_combos):]:
        ax.set_visible(False)
    for ax, pc in zip(axes.flat, panel_combos):
        here = [r for r in drawn if all(r["labels"].get(a) == v for a, v in zip(panels, pc))]
        for lc in combos(here, lines, experiment, ev):
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

    tags = list(item.get("tags") or ["train/loss"])
    by_epoch = item.get("x") == "epoch"
    panels = list(item.get("panels") or [])
    runs = [r for r in records if r["evaluation"] == RUNS and (r["state"] == "done" or stopped_with_curves(r))]
    curves = {}  # job -> tag -> [(x, value)]
    for r in runs:
        where = r["file"].parent if r["state"] == "done" else r["run_dir"]
        if by_epoch:
            curves[r["job"]] = {t: sorted(m.items()) for t, m in epoch_means(where, tags).items()}
        else:
            curves[r["job"]] = read_scalars(where, tags)
    panel_combos = combos(runs, panels, experiment, RUNS) or [()]
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
                            label="/".join(v for a, v in r["labels"].items() if a not in panels) + stopped_mark(r),
                            marker="o" if len(points) < 30 else None, markersize=3)
            target = reach_target(item, runs, curves, dict(zip(panels, pc)), tag)
            if target is not None:  # the baseline's last value, which the reach table's line must come down to
                ax.axhline(target[1], color="grey", linestyle=":", linewidth=1)
            ax.set_title(" ".join(filter(None, [tag, "/".join(pc)])), fontsize=9)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("epoch (each epoch's mean)" if by_epoch else "step", fontsize=8)
            if ax.lines:
                ax.legend(fontsize=7)
    figure = folder / experiment.name / "figures" / f"{index:02d}-history.png"
    save_figure(fig, figure)
    shown = f"![history](figures/{figure.name})\n\n"
    labels = {r["job"]: "/".join(r["labels"].values()) + collapsed_mark(r) + stopped_mark(r) for r in runs}
    if not by_epoch:
        body = [[labels[r["job"]], *(curves[r["job"]][t][-1][1] if curves[r["job"]][t] else None for t in tags)]
                for r in runs]
        reach = reach_table(item, runs, curves, panels, panel_combos) if item.get("reach") else ""
        return (shown + "The last value of each curve:\n\n" + markdown_table(["run", *tags], body, float_format=".3g")
                + reach + collapse_notes(runs))
    evaluated = [int(e) for e in chosen_epochs([r for r in records if r["evaluation"] != RUNS], "all") if str(e).isdigit()]
    last = max((p[0] for c in curves.values() for points in c.values() for p in points), default=0)
    columns = history_epochs(last, evaluated)
    if not columns:
        return shown + f"No finished run has logged {', '.join(tags)} yet." + collapse_notes(runs)
    for tag in tags:
        body = [[labels[r["job"]], *(dict(curves[r["job"]][tag]).get(e) for e in columns)] for r in runs]
        shown += (f"The mean {tag} of each run over an epoch, at epochs {', '.join(map(str, columns))}:\n\n"
                  + markdown_table(["run", *map(str, columns)], body, float_format=".4g") + "\n\n")
    return shown.rstrip() + collapse_notes(runs)


def stopped_with_curves(record: dict[str, Any]) -> bool:
    """A training run that failed (a diverged one: training/divergence.py) and left TensorBoard curves: a history
    draws them up to where it stopped (seeds/002 Sec. 4.3's unstable alpha_min, Table 7's skipless-plain)."""
    run_dir = record.get("run_dir")
    return record["state"] == "failed" and run_dir is not None and any(Path(run_dir).glob("tb/events.out.tfevents.*"))


def stopped_mark(record: dict[str, Any]) -> str:
    """`` (diverged at step N)`` / `` (failed)`` after a stopped run's label, nothing after a finished one's."""
    if record["state"] == "done":
        return ""
    text = cell_text(record, "", None)
    return f" ({text})"


def first_step_at_most(points: list[tuple[int, float]], target: float) -> int | None:
    """The first logged step whose value is at most ``target`` (a finite value), None when none is."""
    return next((step for step, value in points if math.isfinite(value) and value <= target), None)


def _run_of(runs: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, Any] | None:
    return next((r for r in runs if all(r["labels"].get(a) == v for a, v in labels.items())), None)


def reach_target(item: dict[str, Any], runs: list[dict[str, Any]], curves: dict, panel: dict[str, str],
                 tag: str) -> tuple[int, float] | None:
    """(the last step, the last value) of ``reach.tag`` of the baseline run in ``panel``, or None (no ``reach``,
    another tag, no finished baseline there, or a baseline whose last value is not finite)."""
    reach = item.get("reach")
    if not reach or tag != reach["tag"]:
        return None
    run = _run_of(runs, {**panel, reach["axis"]: reach["baseline"]})
    points = curves[run["job"]][tag] if run else []
    return points[-1] if points and math.isfinite(points[-1][1]) else None


def reach_table(item: dict[str, Any], runs: list[dict[str, Any]], curves: dict, panels: list[str],
                panel_combos: list[tuple]) -> str:
    """A history's ``reach``: per ``panels`` combination, the first step at which the ``line`` run's ``tag`` comes
    down to the ``baseline`` run's last value, and that step over the baseline's steps (seed 000's App. A.8: the
    initialised skipless model matches the residual baseline "at the same training speed (1x steps)"). It holds at
    1x or less; the step is known to within the curve's logging interval (the validation's, for val/loss)."""
    reach = item["reach"]
    tag, line, baseline = reach["tag"], reach["line"], reach["baseline"]
    rows = []
    for pc in panel_combos:
        panel = dict(zip(panels, pc))
        target = reach_target(item, runs, curves, panel, tag)
        run = _run_of(runs, {**panel, reach["axis"]: line})
        name = "/".join(pc) or "all"
        if target is None or run is None:
            missing = baseline if target is None else line
            rows.append([name, None, None, None, None, f"no {missing} run with a finite last {tag}"])
            continue
        step = first_step_at_most(curves[run["job"]][tag], target[1])
        if step is None:
            rows.append([name, target[1], target[0], None, None, f"not reached by step "
                         f"{curves[run['job']][tag][-1][0] if curves[run['job']][tag] else 0}"])
            continue
        ratio = step / target[0] if target[0] else math.inf
        rows.append([name, target[1], target[0], step, f"{ratio:.2f}x",
                     "holds (1x steps or fewer)" if ratio <= 1 else "does not hold (more steps)"])
    return ("\n\n" + f"The steps {line} needs to reach {baseline}'s last {tag} (the dotted line):\n\n"
            + markdown_table([" / ".join(panels) or "panel", f"{baseline} last {tag}", f"{baseline} steps",
                              f"{line} reaches it at step", "steps ratio", "1x steps"], rows, float_format=".4g"))


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
        return cell_text(None if line is None else {"state": "done", "result": line}, metric, paper)

    lines = [(label, r["file"].parent) for label, r in zip(shown, runs)]
    evaluated = [e for e in chosen_epochs([r for r in records if r["evaluation"] != RUNS], "all") if str(e).isdigit()]
    figure = folder / experiment.name / "figures" / f"{index:02d}-series.png"
    return "\n\n".join([series_section(item, lines, evaluated, figure, cell), *paper_tables(ref, "/".join(axes))]
                       ) + collapse_notes(runs)
