"""What a file built from corpus files is keyed by (a tokenizer trained on them, a token cache): each file's
name, size and modification time in nanoseconds, as ``make`` decides what is stale. Reading the bytes instead
would cost a pass over every shard at every start (minutes for C4's train shards); a file rewritten, even with
the same bytes, counts as changed and what was built from it is built again."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence


def files_fingerprint(paths: Sequence[str | os.PathLike]) -> list[list]:
    """``[[name, size, mtime_ns], ...]`` of ``paths``, in their order."""
    rows = []
    for path in paths:
        stat = Path(path).stat()
        rows.append([Path(path).name, stat.st_size, stat.st_mtime_ns])
    return rows


def digest_of(value: Any) -> str:
    """The sha256 (hex) of ``value``'s canonical JSON (sorted keys, compact)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()
