"""Five small zero-shot tasks made from the Bible chapters held out for them (``bible.py``'s ``ZEROSHOT_FILE``), in
the five real tasks' file layouts (``tasks.py``), so that ``make zeroshot`` after ``make lm`` has something to score
without a dataset host. They test what a model of the embedded text can know, the order and the neighbourhood of
its words; they stand in for the real tasks' *files and scoring*, not for their content.

From the held-out verses of at least ``MIN_WORDS`` words, each task draws its own ``ITEMS`` verses with its own
seeded generator (``random.Random("<task>-<SEED>")``; a verse's second half is "its true half"):

- ``piqa`` (2 choices, the original release's ``valid.jsonl`` + ``valid-labels.lst``): goal the verse's first
  half; the true half against another verse's second half;
- ``hellaswag`` (4, the original ``hellaswag_val.jsonl``): activity label the book, ``ctx_a`` and ``ctx_b`` the
  verse's first two thirds; the true last third against three other verses' last thirds;
- ``winogrande`` (2, the Hugging Face layout ``validation.jsonl``): one word (letters only, four or more, with
  three words after it) blanked; the true word against a word of another verse of the same kind (four letters or
  more, capitalised as the true one);
- ``arc_easy`` (4, the original ``ARC-Easy-Dev.jsonl``): the question the first half; the true half against
  three other verses' second halves;
- ``arc_challenge`` (4, the Hugging Face layout ``validation.jsonl``): the true half against three shuffles of
  its own words (distinct, none in the true order): word order only.

Chance is 0.5 for two choices, 0.25 for four. The files are the same bytes each time (fixed seeds, compact JSON,
sorted keys), written atomically, with ``MARKER`` last naming the source file's sha256 and the version: a folder
whose marker matches is used as it is.
"""
from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path
from typing import Callable

from ...atomic import atomic_write
from ..errors import DatasetNotFoundError, MalformedDatasetError
from .locking import locked
from .pinned import sha256_of

VERSION = 1  # raise when the items written change
SEED = 0
ITEMS = 250       # per task, or all the usable verses when there are fewer
MIN_WORDS = 9     # thirds of at least three words (hellaswag), halves of at least four
MARKER = ".skipless_demo_tasks.json"
FILES = {"piqa": "piqa/valid.jsonl", "hellaswag": "hellaswag/hellaswag_val.jsonl",
         "winogrande": "winogrande/validation.jsonl", "arc_easy": "ARC-Easy/ARC-Easy-Dev.jsonl",
         "arc_challenge": "ARC-Challenge/validation.jsonl"}
PIQA_LABELS = "piqa/valid-labels.lst"


def held_out_verses(zeroshot_file: str | os.PathLike) -> list[tuple[str, str]]:
    """``(book title, verse)`` of every held-out verse with at least ``MIN_WORDS`` words, in the file's order."""
    path = Path(zeroshot_file)
    if not path.is_file():
        raise DatasetNotFoundError(f"no held-out chapters at {path}; expected the embedded corpus's {path.name}, "
                                   "written with the corpus by make lm (skipless.data.text.bible)")
    verses = []
    for line, row in enumerate(gzip.decompress(path.read_bytes()).decode("utf-8").splitlines(), start=1):
        try:
            record = json.loads(row)
            text, url = record["text"], record["url"]
        except (ValueError, KeyError, TypeError):
            raise MalformedDatasetError(f"{path} line {line} is not a JSON object with 'text' and 'url'") from None
        book = url.rstrip("/").split("/")[-2].replace("-", " ").title()
        verses += [(book, v) for v in text.split("\n") if len(v.split()) >= MIN_WORDS]
    if len(verses) < 8:
        raise MalformedDatasetError(f"{path} holds {len(verses)} verses of {MIN_WORDS} words or more; the demo tasks "
                                    "need at least 8")
    return verses


def _halves(text: str) -> tuple[str, str]:
    words = text.split()
    return " ".join(words[:len(words) // 2]), " ".join(words[len(words) // 2:])


def _others(rng: random.Random, verses: list[tuple[str, str]], i: int, k: int, part: Callable[[str], str]) -> list[str]:
    """``k`` distinct ``part``s of verses other than ``i``, none equal to verse ``i``'s."""
    own, out = part(verses[i][1]), []
    for _ in range(100 * len(verses)):
        j = rng.randrange(len(verses))
        candidate = part(verses[j][1])
        if j != i and candidate != own and candidate not in out:
            out.append(candidate)
        if len(out) == k:
            return out
    raise MalformedDatasetError(f"the held-out verses hold fewer than {k + 1} distinct endings; the demo tasks need "
                                "that many")


def _place(rng: random.Random, true: str, wrong: list[str]) -> tuple[list[str], int]:
    """The choices with the true one at a random place, and that place."""
    at = rng.randrange(len(wrong) + 1)
    return wrong[:at] + [true] + wrong[at:], at


def _piqa(rng, verses, i):
    goal, true = _halves(verses[i][1])
    choices, label = _place(rng, true, _others(rng, verses, i, 1, lambda v: _halves(v)[1]))
    return {"goal": goal, "sol1": choices[0], "sol2": choices[1]}, label


def _thirds(text: str) -> tuple[str, str, str]:
    words = text.split()
    t = len(words) // 3
    return " ".join(words[:t]), " ".join(words[t:2 * t]), " ".join(words[2 * t:])


def _hellaswag(rng, verses, i):
    a, b, true = _thirds(verses[i][1])
    endings, label = _place(rng, true, _others(rng, verses, i, 3, lambda v: _thirds(v)[2]))
    return {"ind": i, "activity_label": verses[i][0], "ctx_a": a, "ctx_b": b, "ctx": f"{a} {b}", "endings": endings,
            "label": label, "source_id": f"bible-{i}", "split": "val", "split_type": "indomain"}


def _word_ok(word: str) -> bool:
    return word.isalpha() and len(word) >= 4


def _winogrande(rng, verses, i):
    words = verses[i][1].split()
    places = [k for k in range(len(words) - 3) if _word_ok(words[k])]
    if not places:
        return None
    at = rng.choice(places)
    for _ in range(100 * len(verses)):
        other = rng.choice(verses[rng.randrange(len(verses))][1].split())
        if _word_ok(other) and other.lower() != words[at].lower() and other[0].isupper() == words[at][0].isupper():
            break
    else:
        return None
    options, answer = _place(rng, words[at], [other])
    sentence = " ".join(words[:at] + ["_"] + words[at + 1:])
    return {"sentence": sentence, "option1": options[0], "option2": options[1], "answer": str(answer + 1)}


def _arc_easy(rng, verses, i):
    stem, true = _halves(verses[i][1])
    choices, at = _place(rng, true, _others(rng, verses, i, 3, lambda v: _halves(v)[1]))
    labels = ["A", "B", "C", "D"]
    return {"id": f"bible-{i}", "question": {"stem": stem, "choices": [{"text": t, "label": lab}
                                                                         for t, lab in zip(choices, labels)]},
            "answerKey": labels[at]}


def _arc_challenge(rng, verses, i):
    stem, true = _halves(verses[i][1])
    words, shuffles = true.split(), []
    for _ in range(50):
        order = words[:]
        rng.shuffle(order)
        text = " ".join(order)
        if text != true and text not in shuffles:
            shuffles.append(text)
        if len(shuffles) == 3:
            break
    else:
        return None
    choices, at = _place(rng, true, shuffles)
    labels = ["A", "B", "C", "D"]
    return {"id": f"bible-{i}", "question": stem, "choices": {"text": choices, "label": labels},
            "answerKey": labels[at]}


BUILDERS = {"piqa": _piqa, "hellaswag": _hellaswag, "winogrande": _winogrande, "arc_easy": _arc_easy,
            "arc_challenge": _arc_challenge}


def _jsonl(records: list) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"
                   for r in records).encode("utf-8")


def demo_task_files(verses: list[tuple[str, str]], items: int = ITEMS) -> dict[str, bytes]:
    """``{path under the root: bytes}`` of the five tasks (module docstring)."""
    files: dict[str, bytes] = {}
    for task, build in BUILDERS.items():
        rng = random.Random(f"{task}-{SEED}")
        order = list(range(len(verses)))
        rng.shuffle(order)
        records, labels = [], []
        for i in order:
            made = build(rng, verses, i)
            if made is None:
                continue
            if task == "piqa":
                made, label = made
                labels.append(label)
            records.append(made)
            if len(records) == items:
                break
        files[FILES[task]] = _jsonl(records)
        if task == "piqa":
            files[PIQA_LABELS] = "".join(f"{label}\n" for label in labels).encode()
    return files


def _complete(root: Path, source_sha: str) -> bool:
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(marker, dict) and marker.get("version") == VERSION and marker.get("source") == source_sha
            and all((root / name).is_file() and sha256_of(root / name) == digest
                    for name, digest in marker.get("files", {}).items()))


def ensure_demo_tasks(root: str | os.PathLike, zeroshot_file: str | os.PathLike) -> Path:
    """``root`` once it holds the five demo tasks made from ``zeroshot_file`` (written first if not)."""
    root, source = Path(root), Path(zeroshot_file)
    if not source.is_file():
        held_out_verses(source)  # the one-sentence refusal
    source_sha = sha256_of(source)
    if _complete(root, source_sha):
        return root
    with locked(root, "demo-tasks"):
        if _complete(root, source_sha):
            return root
        files = demo_task_files(held_out_verses(source))
        for name, data in files.items():
            atomic_write(root / name, lambda tmp, data=data: Path(tmp).write_bytes(data), needed=len(data))
        marker = {"tasks": "skipless demo tasks from the held-out Bible chapters (skipless.data.text.demo_tasks)",
                  "version": VERSION, "source": source_sha,
                  "files": {name: sha256_of(root / name) for name in files}}
        text = json.dumps(marker, indent=2) + "\n"
        atomic_write(root / MARKER, lambda tmp: Path(tmp).write_text(text))
    return root


__all__ = ["FILES", "ITEMS", "demo_task_files", "ensure_demo_tasks", "held_out_verses"]
