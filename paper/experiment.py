"""An experiment file (``configs/experiments/<name>.yaml``) and the jobs it means at one scale.

An experiment is what a paper table or figure needs: trainings (``runs``: a matrix of ``make
pretrain`` or ``make train`` cells), evaluations of their checkpoints (``evaluations``: a matrix of
evaluator cells, each run on every run and checkpoint epoch), how the report lays the numbers out,
and the paper's numbers. Every cell is plain config overrides, the ``key=value`` words a user would
type, so each job is a command that could be typed by hand (the report lists them).

Axes map a cell's value to its overrides, either for every scale (a list) or per scale (a mapping
``{scale: list}``); a value a scale does not list is not run at that scale (the demo has no COCO-Stuff,
say) and the report marks its cells so. ``scales`` adds overrides to every cell at a scale, ``epochs``
names the checkpoints evaluated (each run exports ``backbone-epoch<N>.pt`` at those epochs).

Scales: ``demo`` (the CPU demo recipes on the embedded data), ``full`` (the paper's recipe on the real
datasets) and ``quick``, a smoke test of the demo's matrix: wherever a file does not name ``quick``,
it takes the demo's overrides, cells and epochs, and ``quick.py`` shrinks every job of it to minutes.

The file is checked whole before anything runs: a wrong key, an unknown entry point, an axis value
without overrides or a report naming an axis that does not exist is one sentence, saying what was
expected.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from skipless.config import CONFIG_DIR
from skipless.errors import SkiplessError

EXPERIMENT_DIR = CONFIG_DIR / "experiments"
SCALES = ("demo", "quick", "full")
INHERITED = {"quick": "demo"}  # a scale a file does not name takes this one's value
# ``lm``: the language model of seed 000's App. A.8 (``make lm``), trained for ``train.steps`` optimizer steps, not
# epochs: its runs export no checkpoints of epochs (``runs.epochs`` is refused), only the last ``backbone.pt``.
RUN_ENTRIES = {"pretrain": "skipless.pretrain", "train": "skipless.train", "lm": "skipless.lm"}
STEP_ENTRIES = ("lm",)  # run entries measured in optimizer steps
EVAL_ENTRIES = {name: f"skipless.eval.{name}"
                for name in ("probe", "tokencut", "pca", "conditioning", "knn", "linear", "tsne", "zeroshot")}
# Fine-tuning reads a run's backbone as an evaluation does, and trains: its run folder is the evaluation's folder.
FINETUNE = "finetune"
EVAL_ENTRIES[FINETUNE] = "skipless.finetune"
REPORT_KINDS = ("table", "curve", "images", "history", "series", "layers")
_TOP = {"title", "source", "runs", "evaluations", "report"}
_RUNS = {"entry", "axes", "scales", "epochs"}
_EVAL = {"entry", "axes", "scales", "result", "metric"}
_REPORT = {"kind", "title", "evaluation", "metric", "metrics", "best", "rows", "columns", "lines", "epoch", "reference", "images",
           "tags", "file", "x", "panels", "note", "reach", "curves", "select"}
_REACH = {"axis", "line", "baseline", "tag"}
# What a curve and a history are drawn against, the first by default (report.py): a curve, the blocks of one
# checkpoint or the checkpoints' epochs; a history, the training step or the epoch (each epoch's mean).
X_AXES = {"curve": ("block", "epoch"), "history": ("step", "epoch")}


class ExperimentError(SkiplessError, ValueError):
    """An experiment name or file that cannot be run as written."""


def known_experiments(folder: Path = EXPERIMENT_DIR) -> list[str]:
    return sorted(p.stem for p in folder.glob("*.yaml"))


@dataclass(frozen=True)
class Axis:
    """One dimension of a matrix: ``values`` in file order, each value's overrides per scale (None:
    not run at that scale)."""

    name: str
    overrides: dict[str, dict[str, list[str] | None]]  # value -> scale -> overrides

    @property
    def values(self) -> list[str]:
        return list(self.overrides)

    def at(self, value: str, scale: str) -> list[str] | None:
        return self.overrides[value][scale]


@dataclass(frozen=True)
class Matrix:
    """A set of cells: the product of ``axes``, ``scales`` overrides added to every cell."""

    entry: str
    axes: tuple[Axis, ...]
    scales: dict[str, list[str]]

    def cells(self, scale: str) -> list[tuple[dict[str, str], list[str] | None]]:
        """Every cell as ``(labels, overrides)``, overrides None where the scale does not run it."""
        out = []
        for values in itertools.product(*(a.values for a in self.axes)):
            labels = {a.name: v for a, v in zip(self.axes, values)}
            parts = [a.at(v, scale) for a, v in zip(self.axes, values)]
            overrides = None if any(p is None for p in parts) else [*self.scales.get(scale, []), *itertools.chain(*parts)]
            out.append((labels, overrides))
        return out


@dataclass(frozen=True)
class Evaluation(Matrix):
    result: str = ""  # glob of the result JSON under the evaluator's out folder
    metric: str | None = None


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    source: str
    runs: Matrix
    epochs: dict[str, list[int]]
    evaluations: dict[str, Evaluation]
    report: list[dict[str, Any]] = field(default_factory=list)


def _fail(where: str, what: str) -> ExperimentError:
    return ExperimentError(f"{where}: {what}")


def _keys(node: Any, allowed: set[str], where: str, required: set[str] = frozenset()) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise _fail(where, f"expected a mapping with keys {', '.join(sorted(allowed))}, got {type(node).__name__}")
    unknown = sorted(set(node) - allowed)
    if unknown:
        raise _fail(where, f"unknown keys {unknown}; expected some of {', '.join(sorted(allowed))}")
    missing = sorted(required - set(node))
    if missing:
        raise _fail(where, f"missing keys {missing}")
    return node


def _overrides(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and re.fullmatch(r"[\w.\-]+=.*", v) for v in value):
        raise _fail(where, f"expected a list of key=value overrides, got {value!r}")
    return list(value)


def _scales_named(node: dict[str, Any], where: str) -> None:
    bad = sorted(set(node) - set(SCALES))
    if bad:
        raise _fail(where, f"unknown scales {bad}; expected {', '.join(SCALES[:-1])} and/or {SCALES[-1]}")


def by_scale(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` (``{scale: value}``) with the scales it does not name filled from ``INHERITED`` (quick
    from demo)."""
    return {**{s: node[parent] for s, parent in INHERITED.items() if s not in node and parent in node}, **node}


def _per_scale(value: Any, where: str) -> dict[str, list[str] | None]:
    """A list (every scale) or ``{scale: list}`` (the scales not named: None, or inherited)."""
    if isinstance(value, dict):
        _scales_named(value, where)
        value = by_scale(value)
        return {s: (_overrides(value[s], f"{where}.{s}") if s in value else None) for s in SCALES}
    overrides = _overrides(value, where)
    return {s: overrides for s in SCALES}


def _matrix(node: dict[str, Any], entries: dict[str, str], where: str) -> tuple[str, tuple[Axis, ...], dict]:
    entry = node.get("entry")
    if entry not in entries:
        raise _fail(f"{where}.entry", f"unknown entry {entry!r}; expected one of {', '.join(entries)}")
    axes_node = node.get("axes") or {}
    if not isinstance(axes_node, dict):
        raise _fail(f"{where}.axes", "expected a mapping of axis name -> {value: overrides}")
    axes = []
    for name, values in axes_node.items():
        if not isinstance(values, dict) or not values:
            raise _fail(f"{where}.axes.{name}", "expected a non-empty mapping of value -> overrides")
        axes.append(Axis(str(name), {str(v): _per_scale(o, f"{where}.axes.{name}.{v}") for v, o in values.items()}))
    scales = by_scale(_keys(node.get("scales") or {}, set(SCALES), f"{where}.scales"))
    return entry, tuple(axes), {s: _overrides(v, f"{where}.scales.{s}") for s, v in scales.items()}


def _plain(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, (DictConfig, ListConfig)) else node


def load_experiment(name: str, folder: Path = EXPERIMENT_DIR) -> Experiment:
    """The experiment ``configs/experiments/<name>.yaml``, checked whole (``ExperimentError``)."""
    path = Path(folder) / f"{name}.yaml"
    if not path.is_file():
        raise ExperimentError(f"unknown experiment {name!r}; expected one of: {', '.join(known_experiments(folder))}")
    where = f"{path.name}"
    try:
        loaded = OmegaConf.load(path)
    except yaml.YAMLError as err:  # one sentence, with the line, rather than the parser's traceback
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ExperimentError(f"{path} is not valid YAML{at} ({getattr(err, 'problem', None) or err}); quote an "
                              "item that holds brackets or commas, e.g. \"measures=[embeddings]\"") from None
    node = _keys(_plain(loaded), _TOP, where, {"title", "runs"})
    runs_node = _keys(node["runs"], _RUNS, f"{where}: runs", {"entry"})
    entry, axes, scales = _matrix(runs_node, RUN_ENTRIES, f"{where}: runs")
    epochs = by_scale(_keys(runs_node.get("epochs") or {}, set(SCALES), f"{where}: runs.epochs"))
    if entry in STEP_ENTRIES and epochs:
        raise _fail(f"{where}: runs.epochs", f"a {entry} run counts optimizer steps, not epochs, and exports only its "
                    "last backbone.pt; drop runs.epochs")
    for scale, listed in epochs.items():
        if not (isinstance(listed, list) and listed and all(isinstance(e, int) and e >= 1 for e in listed)):
            raise _fail(f"{where}: runs.epochs.{scale}", f"expected a list of positive epochs, got {listed!r}")
    evaluations = {}
    for ev_name, ev in (node.get("evaluations") or {}).items():
        at = f"{where}: evaluations.{ev_name}"
        ev = _keys(ev, _EVAL, at, {"entry", "result"})
        ev_entry, ev_axes, ev_scales = _matrix(ev, EVAL_ENTRIES, at)
        evaluations[str(ev_name)] = Evaluation(ev_entry, ev_axes, ev_scales, result=str(ev["result"]),
                                               metric=ev.get("metric"))
    experiment = Experiment(name, str(node["title"]), str(node.get("source", "")), Matrix(entry, axes, scales),
                            {s: list(v) for s, v in epochs.items()}, evaluations, list(node.get("report") or []))
    _check_report(experiment, where)
    return experiment


RUNS = "runs"  # a report item about the training runs' own results (their summary.json)


def axis_names(experiment: Experiment, evaluation: str) -> list[str]:
    """The labels a result of ``evaluation`` carries: the runs' axes, then ``epoch`` and the evaluation's
    axes (``runs``: the runs' axes only)."""
    if evaluation == RUNS:
        return [a.name for a in experiment.runs.axes]
    return ([a.name for a in experiment.runs.axes] + ["epoch"]
            + [a.name for a in experiment.evaluations[evaluation].axes])


def _check_reach(experiment: Experiment, item: dict, at: str) -> None:
    """A history's ``reach`` (``report_figures.reach_table``): a mapping naming a runs axis, two of its values and
    one of the item's tags, on a history against the step."""
    reach = item["reach"]
    if item["kind"] != "history" or item.get("x", "step") != "step" or not isinstance(reach, dict):
        raise _fail(at, "reach belongs to a history against the step: {axis, line, baseline, tag}")
    reach = _keys(reach, _REACH, at, _REACH)
    axis = next((a for a in experiment.runs.axes if a.name == reach["axis"]), None)
    if axis is None:
        raise _fail(f"{at}.axis", f"unknown runs axis {reach['axis']!r}; expected one of "
                    f"{', '.join(a.name for a in experiment.runs.axes)}")
    for key in ("line", "baseline"):
        if reach[key] not in axis.values:
            raise _fail(f"{at}.{key}", f"{reach[key]!r} is no value of the axis {axis.name}; expected one of "
                        f"{', '.join(axis.values)}")
    if reach["tag"] not in (item.get("tags") or ["train/loss"]):
        raise _fail(f"{at}.tag", f"{reach['tag']!r} is not one of the item's tags")


def _check_report(experiment: Experiment, where: str) -> None:
    for i, item in enumerate(experiment.report):
        at = f"{where}: report[{i}]"
        item = _keys(item, _REPORT, at, {"kind", "evaluation"})
        if item["kind"] not in REPORT_KINDS:
            raise _fail(f"{at}.kind", f"unknown kind {item['kind']!r}; expected one of {', '.join(REPORT_KINDS)}")
        if item["evaluation"] not in (*experiment.evaluations, RUNS):
            raise _fail(f"{at}.evaluation", f"unknown evaluation {item['evaluation']!r}; expected one of "
                        f"{', '.join([*experiment.evaluations, RUNS])}")
        if item["kind"] in ("history", "series") and item["evaluation"] != RUNS:
            raise _fail(f"{at}.evaluation", f"a {item['kind']} reads the training runs' curves: evaluation: {RUNS}")
        if item["kind"] == "series" and not item.get("file"):
            raise _fail(f"{at}.file", "a series names the JSON-lines file of each run it reads (file: rank.jsonl)")
        if item.get("metrics") is not None:
            metrics = item["metrics"]
            if item["kind"] != "table" or not (isinstance(metrics, dict) and metrics
                                               and all(isinstance(v, str) for v in metrics.values())):
                raise _fail(f"{at}.metrics", "a table's metrics are a mapping {column title: dotted key of the result}")
            if item.get("columns"):
                raise _fail(f"{at}.columns", "a table with metrics has a column per metric, not per axis: drop columns")
        if item.get("best") is not None:
            if item.get("metrics") is None or item["best"] not in (item.get("rows") or []) or not item.get("metric"):
                raise _fail(f"{at}.best", "best names one of the table's rows axes, chosen by the item's metric "
                            "(highest) among its metrics' rows")
        if item["kind"] == "layers":
            _check_layers(experiment, item, at)
        elif item.get("curves") is not None or item.get("select") is not None:
            raise _fail(f"{at}.curves", "curves and select belong to a layers item (a value per block)")
        if item["evaluation"] == RUNS and item["kind"] == "table" and not (item.get("metric") or item.get("metrics")):
            raise _fail(f"{at}.metric", "a report on the runs names its metric, a key of their summary.json")
        allowed_x = X_AXES.get(item["kind"])
        if allowed_x and item.get("x", allowed_x[0]) not in allowed_x:
            raise _fail(f"{at}.x", f"a {item['kind']} is drawn against {' or '.join(allowed_x)}, not {item['x']!r}")
        if item.get("reach") is not None:
            _check_reach(experiment, item, f"{at}.reach")
        names = set(axis_names(experiment, item["evaluation"]))
        for key in ("rows", "columns", "lines", "panels"):
            bad = [a for a in item.get(key) or [] if a not in names]
            if bad:
                raise _fail(f"{at}.{key}", f"unknown axes {bad}; expected some of {', '.join(sorted(names))}")


def _check_layers(experiment: Experiment, item: dict[str, Any], at: str) -> None:
    """A ``layers`` item (``report_layers.py``): an evaluation's per-block mapping (``metric``), its ``curves``
    ({label: key of each block's entry}) and ``select`` ({axis: [values]}, the cells drawn)."""
    if item["evaluation"] == RUNS or not (item.get("metric") or experiment.evaluations[item["evaluation"]].metric):
        raise _fail(f"{at}.evaluation", "a layers item reads an evaluation's {block: ...} mapping: an evaluation "
                    "and its metric (embeddings_log_kappa)")
    curves = item.get("curves")
    if curves is not None and not (isinstance(curves, dict) and curves and all(isinstance(v, str) for v in curves.values())):
        raise _fail(f"{at}.curves", "a layers item's curves are a mapping {label: key of each block's entry}")
    select = item.get("select") or {}
    values = {a.name: a.values for a in experiment.runs.axes}
    values.update({a.name: a.values for a in experiment.evaluations[item["evaluation"]].axes})
    for axis, chosen in select.items():
        if axis not in values or not isinstance(chosen, list) or not chosen or any(str(v) not in values[axis] for v in chosen):
            raise _fail(f"{at}.select", f"select maps an axis to a list of its values; {axis}: {chosen!r} is not "
                        f"among {', '.join(f'{k} {v}' for k, v in values.items())}")
