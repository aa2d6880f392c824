"""C4 ``en`` read from a local folder as it is distributed (allenai/c4 on the Hugging Face hub, the
``c4/en`` of Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer", JMLR 2020): shards ``c4-<split>.<NNNNN>-of-<MMMMM>.json.gz`` (``train``: 1,024 of them,
``validation``: 8), each gzipped JSON lines ``{"text", "timestamp", "url"}``, one document a line.

The root is the folder that holds the shards, or the clone of allenai/c4 that holds them in ``en/``
(``DATA_ROOT=`` either). Any subset of a split's shards is read (C4 is often downloaded in part: the 20,000
steps of 262,144 tokens of seed 000 read about 30 train shards); the shards of one split must agree on how many
the split has (``-of-01024``), so that two variants (``en`` and ``en.noclean``, 7,168) are never mixed. The
embedded default (``bible.py``) is written in the same layout and read by this same code.

Refused in one sentence: a root without the split's shards (the sentence names the layout and ``DATA_ROOT``),
shards of one split that disagree on their count, a shard that is not gzip or is cut short, a line that is not a
JSON object or has no string ``text`` (each with its file and line).
"""
from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from pathlib import Path
from typing import Iterator

from ..errors import MalformedDatasetError, missing_dataset

SPLITS = ("train", "validation")
SHARD = re.compile(r"c4-(train|validation)\.(\d{5})-of-(\d{5})\.json\.gz")
LAYOUT = ("C4 en's shards c4-{split}.NNNNN-of-MMMMM.json.gz (gzipped JSON lines with a 'text' field) in the root "
          "or in its en/ folder, as allenai/c4 distributes them")


def shard_name(split: str, index: int, count: int) -> str:
    """C4's name of shard ``index`` of ``count`` of ``split``: ``c4-train.00003-of-01024.json.gz``."""
    return f"c4-{split}.{index:05d}-of-{count:05d}.json.gz"


def _shards_in(folder: Path, split: str) -> list[Path]:
    if not folder.is_dir():
        return []
    found = []
    for entry in os.scandir(folder):
        match = SHARD.fullmatch(entry.name)
        if match and match.group(1) == split and entry.is_file():
            found.append(Path(entry.path))
    return sorted(found)


def c4_shards(root: str | os.PathLike, split: str) -> list[Path]:
    """The shards of ``split`` (``train`` or ``validation``) at ``root`` (or ``root/en``), in shard order.

    Raises:
        DatasetNotFoundError: neither folder holds a shard of the split.
        MalformedDatasetError: the shards disagree on the split's shard count.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown C4 split {split!r}; expected one of: {', '.join(SPLITS)}")
    root = Path(root)
    shards = _shards_in(root, split) or _shards_in(root / "en", split)
    if not shards:
        raise missing_dataset(f"C4 en ({split} split)", root, LAYOUT.format(split=split),
                              hint=f"no c4-{split}.*.json.gz there or in its en/ folder; point DATA_ROOT= at the "
                                   "folder that holds them")
    counts = sorted({SHARD.fullmatch(p.name).group(3) for p in shards})
    if len(counts) > 1:
        raise MalformedDatasetError(f"the {split} shards in {shards[0].parent} disagree on the split's size "
                                    f"(-of-{' and -of-'.join(counts)}): keep one C4 variant per folder")
    return shards


def read_documents(shard: str | os.PathLike) -> Iterator[str]:
    """The ``text`` of each line of one shard, in order.

    Raises:
        MalformedDatasetError: the file is not gzip or ends inside its stream; a line is not a JSON object or
            has no string ``text`` (file and line in the sentence).
    """
    shard = Path(shard)
    line = 0
    try:
        with gzip.open(shard, "rt", encoding="utf-8") as f:
            for line, raw in enumerate(f, start=1):
                try:
                    record = json.loads(raw)
                except ValueError:
                    raise MalformedDatasetError(f"{shard} line {line} is not a JSON object; expected C4's "
                                                '{"text", "timestamp", "url"} lines') from None
                if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                    raise MalformedDatasetError(f"{shard} line {line} has no string 'text' field; expected C4's "
                                                '{"text", "timestamp", "url"} lines')
                yield record["text"]
    except (gzip.BadGzipFile, EOFError, zlib.error, UnicodeDecodeError) as err:
        where = f"line {line + 1}" if line else "its first line"
        raise MalformedDatasetError(f"{shard} is not a whole gzip file of UTF-8 text (at {where}: "
                                    f"{type(err).__name__}); expected a C4 .json.gz shard") from None


def split_documents(root: str | os.PathLike, split: str) -> Iterator[str]:
    """Every document of ``split`` at ``root``, shard after shard."""
    for shard in c4_shards(root, split):
        yield from read_documents(shard)
