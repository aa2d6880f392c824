"""The zero-shot tasks' files (issue 49, item 4): PIQA, HellaSwag, WinoGrande, ARC-Easy and ARC-Challenge, read
as their original releases and as Hugging Face snapshots lay them out, without the ``datasets`` package.

Every item comes back in the Hugging Face layout (its other fields kept as they are), the fields
lm-evaluation-harness's task files read:

============== ====================================== =====================================================
task           original release                       Hugging Face (``datasets`` features)
============== ====================================== =====================================================
piqa           ``valid.jsonl`` {goal, sol1, sol2} and  {goal, sol1, sol2, label: 0 | 1}
               ``valid-labels.lst`` (one 0/1 a line)
hellaswag      ``hellaswag_val.jsonl`` {activity_label, the same fields, label a string "0" .. "3"
               ctx_a, ctx_b, endings, label: 0 .. 3}
winogrande     ``dev.jsonl`` {sentence (with one "_"),  the same, answer "1" | "2"
               option1, option2, answer: "1" | "2"}
arc_easy,      ``ARC-Easy-Dev.jsonl`` / ``-Test.jsonl`` {id, question (the stem), choices {text: [...],
arc_challenge  {id, question {stem, choices [{text,     label: [...]}}, answerKey}
               label}]}, answerKey}
============== ====================================== =====================================================

A task's file is found in a root folder (``task_file``) under the first of ``CANDIDATES`` that exists: the
original release's name, then the snapshot's; for ARC the test split first (lm-eval scores ARC on its test
split), then validation. ``make data DATA=lm-val`` and the demo tasks write under these names. A file can also be
named directly (``read_task(task, path)``). Readable: JSON lines (``.jsonl``, ``.jsonl.gz``) and JSON (a list of
items, ``.json``); Arrow (``.arrow``, ``datasets``' ``save_to_disk``) and Parquet (the Hub's files) when pyarrow
is installed.

A missing file, or an item without a field its task reads or with a value that cannot be its answer, is refused
in one sentence naming the file, the item (its line, from 1) and the field, before anything is scored.
"""
from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import DatasetNotFoundError, MalformedDatasetError

TASKS = ("piqa", "hellaswag", "winogrande", "arc_easy", "arc_challenge")

# task -> [(path under the root, split, layout)], the first that exists wins.
CANDIDATES: dict[str, list[tuple[str, str, str]]] = {
    "piqa": [("piqa/valid.jsonl", "validation", "original"), ("piqa/validation.jsonl", "validation", "hf")],
    "hellaswag": [("hellaswag/hellaswag_val.jsonl", "validation", "original"),
                  ("hellaswag/validation.jsonl", "validation", "hf")],
    "winogrande": [("winogrande/dev.jsonl", "validation", "original"),
                   ("winogrande/validation.jsonl", "validation", "hf")],
    **{task: [(f"{name}/{name}-Test.jsonl", "test", "original"), (f"{name}/test.jsonl", "test", "hf"),
              (f"{name}/{name}-Dev.jsonl", "validation", "original"), (f"{name}/validation.jsonl", "validation", "hf")]
       for task, name in (("arc_easy", "ARC-Easy"), ("arc_challenge", "ARC-Challenge"))},
}
PIQA_LABELS = "-labels.lst"  # valid.jsonl's labels: valid-labels.lst beside it


@dataclass(frozen=True)
class TaskFile:
    """One task's items in the Hugging Face layout.

    Attributes:
        task: one of ``TASKS``.
        path: the file read.
        split: ``validation`` or ``test`` (by the file's name; ``as given`` for a file named directly).
        layout: ``original`` or ``hf``, as read.
        docs: the items.
    """

    task: str
    path: Path
    split: str
    layout: str
    docs: list[dict[str, Any]]


def _bad(path: Path, line: int, field: str, expected: str) -> MalformedDatasetError:
    return MalformedDatasetError(f"{path} item {line}: field {field!r} {expected}")


def _text(doc: dict, path: Path, line: int, field: str) -> str:
    if field not in doc:
        raise _bad(path, line, field, "is missing")
    if not isinstance(doc[field], str):
        raise _bad(path, line, field, f"must be a string, got {type(doc[field]).__name__}")
    return doc[field]


def _texts(value: Any, path: Path, line: int, field: str) -> list[str]:
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(v, str) for v in value):
        raise _bad(path, line, field, "must be a list of at least two strings")
    return list(value)


def _index(value: Any, count: int, path: Path, line: int, field: str) -> int:
    """An answer index 0 .. count-1, given as an integer or a string of digits."""
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if not text.isdigit() or int(text) >= count:
        raise _bad(path, line, field, f"must be an answer index 0 to {count - 1}, got {value!r}")
    return int(text)


def _piqa(doc: dict, path: Path, line: int, label: Any) -> dict:
    out = {f: _text(doc, path, line, f) for f in ("goal", "sol1", "sol2")}
    return {**doc, **out, "label": _index(label, 2, path, line, "label")}


def _hellaswag(doc: dict, path: Path, line: int) -> dict:
    out = {f: _text(doc, path, line, f) for f in ("activity_label", "ctx_a", "ctx_b")}
    if "endings" not in doc:
        raise _bad(path, line, "endings", "is missing")
    endings = _texts(doc["endings"], path, line, "endings")
    if "label" not in doc:
        raise _bad(path, line, "label", "is missing")
    label = _index(doc["label"], len(endings), path, line, "label")
    return {**doc, **out, "endings": endings, "label": str(label)}


def _winogrande(doc: dict, path: Path, line: int) -> dict:
    out = {f: _text(doc, path, line, f) for f in ("sentence", "option1", "option2")}
    if out["sentence"].count("_") < 1:
        raise _bad(path, line, "sentence", "must hold the blank '_' the options fill")
    if "answer" not in doc or str(doc["answer"]) not in ("1", "2"):
        raise _bad(path, line, "answer", f"must be '1' or '2', got {doc.get('answer')!r}")
    return {**doc, **out, "answer": str(doc["answer"])}


def _arc(doc: dict, path: Path, line: int, layout: str) -> dict:
    if "question" not in doc:
        raise _bad(path, line, "question", "is missing")
    if layout == "original":
        question = doc["question"]
        if not isinstance(question, dict):
            raise _bad(path, line, "question", "must be {stem, choices} in the original release's layout")
        if "stem" not in question:
            raise _bad(path, line, "question.stem", "is missing")
        stem = question["stem"]
        if not isinstance(stem, str):
            raise _bad(path, line, "question.stem", f"must be a string, got {type(stem).__name__}")
        choices = question.get("choices")
        if not isinstance(choices, list) or not all(isinstance(c, dict) and isinstance(c.get("text"), str)
                                                    and isinstance(c.get("label"), str) for c in choices):
            raise _bad(path, line, "question.choices", "must be a list of {text, label} strings")
        texts, labels = [c["text"] for c in choices], [c["label"] for c in choices]
    else:
        stem = _text(doc, path, line, "question")
        choices = doc.get("choices")
        if not isinstance(choices, dict) or "text" not in choices or "label" not in choices:
            raise _bad(path, line, "choices", "must be {text: [...], label: [...]}")
        texts = _texts(choices["text"], path, line, "choices.text")
        labels = _texts(choices["label"], path, line, "choices.label")
    if len(texts) != len(labels) or len(texts) < 2:
        raise _bad(path, line, "choices", "must pair each text with a label, at least two")
    key = _text(doc, path, line, "answerKey")
    if key not in labels:
        raise _bad(path, line, "answerKey", f"must be one of the choices' labels {labels}, got {key!r}")
    return {"id": str(doc.get("id", line)), "question": stem, "choices": {"text": texts, "label": labels},
            "answerKey": key}


def _arrow_rows(path: Path) -> list[dict]:
    try:
        import pyarrow  # noqa: F401  (optional: only Arrow and Parquet files need it)
    except ImportError:
        raise MalformedDatasetError(f"{path} is an Arrow/Parquet file and reading it needs pyarrow, which is not "
                                    "installed; install it (pip install pyarrow) or give the task as JSON lines"
                                    ) from None
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    with pa.memory_map(str(path)) as source:
        try:
            return pa.ipc.open_stream(source).read_all().to_pylist()
        except pa.ArrowInvalid:
            return pa.ipc.open_file(source).read_all().to_pylist()


def read_items(path: str | os.PathLike) -> list[Any]:
    """The items of a JSON-lines, JSON, Arrow or Parquet file (module docstring), in order."""
    path = Path(path)
    if not path.is_file():
        raise DatasetNotFoundError(f"no task file at {path}")
    if path.suffix in (".arrow", ".parquet"):
        return _arrow_rows(path)
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedDatasetError(f"{path} is not UTF-8 text; expected JSON lines or JSON") from None
    if path.suffix == ".json" or path.name.endswith(".json.gz"):
        try:
            items = json.loads(text)
        except ValueError as err:
            raise MalformedDatasetError(f"{path} is not JSON ({err.args[0]}); expected a list of items") from None
        if not isinstance(items, list):
            raise MalformedDatasetError(f"{path} holds a JSON {type(items).__name__}; expected a list of items")
        return items
    items = []
    for line, row in enumerate(text.splitlines(), start=1):
        if not row.strip():
            continue
        try:
            items.append(json.loads(row))
        except ValueError:
            raise MalformedDatasetError(f"{path} item {line} is not a JSON line") from None
    return items


def _piqa_labels(path: Path, count: int) -> list[str]:
    labels_path = path.with_name(path.name.split(".")[0] + PIQA_LABELS)
    if not labels_path.is_file():
        raise DatasetNotFoundError(f"{path} item 1: field 'label' is missing and so is {labels_path.name} beside it "
                                   "(the original release's labels, one 0 or 1 a line)")
    labels = [row.strip() for row in labels_path.read_text().splitlines() if row.strip()]
    if len(labels) != count:
        raise MalformedDatasetError(f"{labels_path} has {len(labels)} labels for the {count} items of {path.name}")
    return labels


def _layout(task: str, first: Any) -> str:
    """``original`` or ``hf``, by the first item's fields."""
    if task.startswith("arc"):
        return "original" if isinstance(first, dict) and isinstance(first.get("question"), dict) else "hf"
    if task == "piqa":
        return "hf" if isinstance(first, dict) and "label" in first else "original"
    if task == "hellaswag":
        return "original" if isinstance(first, dict) and isinstance(first.get("label"), int) else "hf"
    return "hf"  # winogrande: the two layouts hold the same fields


def read_task(task: str, path: str | os.PathLike, split: str = "as given") -> TaskFile:
    """Every item of ``task``'s file at ``path``, checked and in the Hugging Face layout (module docstring)."""
    if task not in TASKS:
        raise ValueError(f"unknown zero-shot task {task!r}; expected one of: {', '.join(TASKS)}")
    path = Path(path)
    items = read_items(path)
    if not items:
        raise MalformedDatasetError(f"{path} holds no items")
    layout = _layout(task, items[0])
    labels = _piqa_labels(path, len(items)) if task == "piqa" and layout == "original" else None
    docs = []
    for line, item in enumerate(items, start=1):
        if not isinstance(item, dict):
            raise MalformedDatasetError(f"{path} item {line} is a {type(item).__name__}, not a record of fields")
        build: Callable[[], dict] = {
            "piqa": lambda: _piqa(item, path, line, labels[line - 1] if labels is not None else item.get("label")),
            "hellaswag": lambda: _hellaswag(item, path, line),
            "winogrande": lambda: _winogrande(item, path, line),
        }.get(task, lambda: _arc(item, path, line, layout))
        if task == "piqa" and labels is None and "label" not in item:
            raise _bad(path, line, "label", "is missing")
        docs.append(build())
    return TaskFile(task, path, split, layout, docs)


def task_file(task: str, root: str | os.PathLike) -> tuple[Path, str]:
    """``(path, split)`` of ``task``'s file under ``root``: the first of ``CANDIDATES[task]`` that exists."""
    root = Path(root)
    for name, split, _ in CANDIDATES[task]:
        if (root / name).is_file():
            return root / name, split
    names = ", ".join(name for name, _, _ in CANDIDATES[task])
    raise DatasetNotFoundError(f"no {task} file under {root}; expected one of {names} (the original release's or a "
                               f"Hugging Face snapshot's layout, docs/zeroshot.md), or name it with files.{task}=<file>")


def load_task(task: str, root: str | os.PathLike) -> TaskFile:
    """``task``'s items from its file under ``root`` (``task_file``)."""
    path, split = task_file(task, root)
    return read_task(task, path, split)


__all__ = ["CANDIDATES", "TASKS", "TaskFile", "load_task", "read_items", "read_task", "task_file"]
