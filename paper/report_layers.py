"""The ``layers`` report item: quantities measured at every block of a backbone, drawn against the block, and
tabulated block by block with their mean over the blocks.

Made for "Always Skip Attention" (seeds/003): Fig. 1b (ln kappa of the four sub-block output embeddings,
SA, SA + skip, MLP, MLP + skip, at each layer of a trained ViT-Tiny), Fig. 3 (SA with and without the skip,
linear against softmax attention) and Fig. 5 (the SAB output of ViT-B with and without DCT token graying),
read from ``make conditioning``'s ``embeddings_log_kappa`` (``{block: {in, attn, attn+skip, mlp, mlp+skip}}``).

Keys of the item: ``metric`` (a dotted key of the result whose value maps each block to its entry),
``curves`` (``{label: key of each block's entry}``, a curve each; absent: the block's value is the number),
``select`` (``{axis: [values]}``: only those cells, the paper's figure being of one model), ``panels`` (axes,
a panel each), ``lines`` (axes naming a line; by default every other axis not fixed to one value by
``select``), ``epoch`` (the checkpoint, the last by default) and ``reference.values``: the paper's numbers
keyed by a table row's label (``<panel/line>: <curve>``) or by a curve's label (every row of that curve),
shown as a dotted level in the figure and beside our mean over the blocks in the table. An infinite value
(a rank-deficient embedding) is a triangle at the top of its panel and ∞ in the table.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from skipless.reports.tables import markdown_table

from .experiment import Experiment, axis_names
from .report_cells import NOT_AT_SCALE, cell_text, chosen_epochs, collapse_notes, collapsed_mark, combos, save_figure
from .series import metric_of


def _value(v: Any) -> float | None:
    """A JSON number of a block (``"inf"`` as the evaluators write infinity) as a float; None when missing."""
    if v in ("inf", float("inf")):
        return math.inf
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def block_curves(result: Any, metric: str, curves: dict[str, str | None]) -> dict[str, dict[int, float | None]]:
    """``{curve label: {block: value}}`` of one result: ``metric`` maps each block (a number as text) to an entry,
    and each curve reads its key of the entry (None: the entry is the number)."""
    per_block = metric_of(result, metric)
    if not isinstance(per_block, dict):
        return {}
    blocks = sorted(per_block, key=int)
    return {label: {int(b): _value(per_block[b] if key is None else metric_of(per_block[b], key)) for b in blocks}
            for label, key in curves.items()}


def two_decimals(v: float | None) -> str:
    """A ln kappa as the paper's Table 3 prints it (6.72); ∞; ``-`` when missing."""
    return "-" if v is None else "∞" if math.isinf(v) else f"{v:.2f}"


def mean_of(values: list[float | None]) -> float | None:
    """The mean over the blocks (Table 3's "average ... in log scale"); ∞ if any block is; None if one is missing."""
    if not values or any(v is None for v in values):
        return None
    return math.inf if any(math.isinf(v) for v in values) else sum(values) / len(values)


def layers_section(item: dict[str, Any], records: list[dict[str, Any]], experiment: Experiment, folder: Path,
                   index: int) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = item["evaluation"]
    metric = item.get("metric") or experiment.evaluations[ev].metric
    curves: dict[str, str | None] = dict(item.get("curves") or {metric.rsplit(".", 1)[-1]: None})
    select = {a: [str(v) for v in vs] for a, vs in (item.get("select") or {}).items()}
    panels = list(item.get("panels") or [])
    fixed = {a for a, vs in select.items() if len(vs) == 1}
    lines = list(item.get("lines") or [a for a in axis_names(experiment, ev)
                                      if a not in panels and a != "epoch" and a not in fixed])
    ref_values = {str(k): v for k, v in ((item.get("reference") or {}).get("values") or {}).items()}
    mine = [r for r in records if r["evaluation"] == ev
            and all(str(r["labels"].get(a)) in vs for a, vs in select.items())]
    epoch = (chosen_epochs(mine, item.get("epoch")) or [None])[0]
    at = [r for r in mine if r["labels"].get("epoch") in (epoch, None)]
    drawn = [r for r in at if r["state"] != NOT_AT_SCALE]
    panel_combos = combos(drawn, panels, experiment, ev) or [()]
    across = min(3, len(panel_combos))
    down = math.ceil(len(panel_combos) / across)
    fig, axes = plt.subplots(down, across, figsize=(4.6 * across, 3.6 * down), squeeze=False)
    for ax in list(axes.flat)[len(panel_combos):]:
        ax.set_visible(False)
    body, blocks_seen = [], set()
    for ax, pc in zip(axes.flat, panel_combos):
        here = [r for r in at if all(r["labels"].get(a) == v for a, v in zip(panels, pc))]
        for lc in combos(here, lines, experiment, ev) or [()]:
            found = next((r for r in here if all(r["labels"].get(a) == v for a, v in zip(lines, lc))), None)
            name = "/".join(pc + lc)
            values = (block_curves(found["result"], metric, curves) if found and found["state"] == "done" else {})
            for label in curves:
                row = f"{name}: {label}" if name else label
                paper = ref_values.get(row, ref_values.get(label))
                per_block = values.get(label) or {}
                blocks_seen.update(per_block)
                body.append((row, found, per_block, paper))
                finite = [(b, v) for b, v in per_block.items() if v is not None and math.isfinite(v)]
                line_label = "/".join(lc + ((label,) if len(curves) > 1 or not lc else ()))
                colour = None
                if finite:
                    colour = ax.plot(*zip(*finite), marker="o", markersize=3, label=line_label)[0].get_color()
                infinite = [b for b, v in per_block.items() if v is not None and math.isinf(v)]
                if infinite:
                    ax.plot(infinite, [1.0] * len(infinite), marker="^", linestyle="none", color=colour,
                            transform=ax.get_xaxis_transform(), clip_on=False, label=None if finite else line_label)
                if paper is not None and math.isfinite(paper):
                    ax.axhline(paper, linestyle=":", linewidth=1, color=colour or "grey")
        ax.set_title("/".join(pc) or item.get("title", ev), fontsize=9)
        ax.set_xlabel("block", fontsize=8)
        ax.set_ylabel(metric if len(curves) > 1 else f"{metric}.{next(iter(curves.values())) or ''}".rstrip("."),
                      fontsize=8)
        if ax.lines:
            ax.legend(fontsize=7)
    figure = folder / experiment.name / "figures" / f"{index:02d}-{ev}-layers.png"
    save_figure(fig, figure)
    blocks = sorted(blocks_seen)
    rows = []
    for row, found, per_block, paper in body:
        if not per_block:  # not done (its state), or done without the metric
            state = cell_text(found, metric, None) if found is None or found["state"] != "done" else "missing"
            rows.append([row, state, *("" for _ in blocks)])
            continue
        mean = mean_of([per_block.get(b) for b in blocks])
        shown = two_decimals(mean)
        if paper is not None and mean is not None:
            shown += " (∞)" if math.isinf(paper) else f" ({two_decimals(paper)}, {mean - paper:+.2f})"
        rows.append([row, shown + collapsed_mark(found), *(two_decimals(per_block.get(b)) for b in blocks)])
    when = f"Epoch {epoch}. " if epoch is not None else ""
    paper_note = (" The mean cell reads ours (paper, ours - paper) where the paper gives a number; the dotted "
                  "lines are the paper's." if ref_values else "")
    return (f"![{ev} per block](figures/{figure.name})\n\n{when}{metric}, per block and the mean over the blocks."
            f"{paper_note}\n\n"
            + markdown_table(["/".join(panels + lines) or "curve", "mean", *(f"L{b}" for b in blocks)], rows)
            + collapse_notes(at))
