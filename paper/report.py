"""The report of an experiment: each of our cells beside the paper's, the difference, and links. This file
writes it; a cell and the ``table`` item are ``report_cells.py``, the figure items ``report_figures.py``.

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
  With ``metrics`` (``{column title: dotted key}``, no ``columns``), a row per ``rows`` cell run at the scale
  and a column per metric, no paper numbers; with ``best: <axis>`` too, a second table keeps per combination
  of the other rows the row of that axis whose ``metric`` is highest (Table 7: five zero-shot columns and their
  mean, the best lr per model). A run whose training diverged reads ``diverged at step N``.
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
  against the epoch, tabulated at a few epochs (Ji et al.'s Figures 1 and 9: the training loss). With
  ``reach: {axis, line, baseline, tag}`` (against the step), a table per panel of the first step at which the
  ``line`` run's ``tag`` comes down to the ``baseline`` run's last value, over the baseline's steps (Table 7's
  "1x steps", seeds/000 App. A.8), that value drawn as a dotted line.
- ``series``: a value per epoch from a JSON-lines file of each training run (``rank.jsonl``'s effective
  rank, seed 002's Figure 5a; ``diagnostics.jsonl``'s condition numbers, Tables 5-6 as measured during
  training; ``series.py``), at the epochs the evaluations read, beside the paper's (``reference``).
- ``layers``: quantities an evaluation measured at every block (``metric``, a ``{block: entry}`` mapping, and
  ``curves``, ``{label: key of the entry}``: make conditioning's ``embeddings_log_kappa``, seed 003's Figs. 1b,
  3 and 5), a curve per cell and label against the block, a panel per ``panels`` combination, ``select`` keeping
  the cells the paper's figure shows; tabulated per block with the mean over the blocks beside the paper's
  (``reference.values``; ``report_layers.py``).

A table whose ``rows`` or ``columns`` name ``epoch`` is one table over the epochs chosen (Tables 5-6,
Figure 5b: one column per checkpoint); otherwise each epoch gets its own table.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from skipless.atomic import atomic_write
from skipless.reports.tables import markdown_table

from .experiment import Experiment
from .jobs import Job, job_state, read_marker
from .report_cells import cell_states, table_section
from .report_figures import curve_section, history_section, images_section, series_part
from .report_layers import layers_section


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
        elif item["kind"] == "layers":
            parts.append(layers_section(item, records, experiment, folder, i))
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

    rows = []
    for job in jobs:
        marker = read_marker(folder, job) or {}
        state = job_state(folder, job) or "not run yet"
        target = folder / job.run_dir if job.run_dir else Path(str(folder / job.result)).parents[1]
        where = os.path.relpath(target, here)
        note = marker.get("error", "") if state != "done" else f"{marker.get('seconds', 0):.0f} s"
        rows.append([job.name, state, f"[{where}]({where})", note, f"`{job.shown()}`"])
    return markdown_table(["job", "state", "output", "seconds / error", "command"], rows)
