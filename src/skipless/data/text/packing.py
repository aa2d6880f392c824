"""Documents packed into one token stream, stored once as a flat binary cache the training windows read
(``windows.py``), as nanoGPT's ``prepare.py`` writes ``train.bin`` and GPT-2/3 train on documents joined by
``<|endoftext|>``.

The stream of a list of corpus files is, in file order and line order, every document's ids (encoded without
the tokenizer's own special tokens) each followed by the end-of-text id:

    doc_1 EOS doc_2 EOS ... doc_n EOS

so EOS stands between every two documents (and closes the last), and a window that crosses a document's end
sees its EOS, then the next document. The ids are written as a flat array of ``uint16`` when every id fits
(a vocabulary of at most 65,536) and ``uint32`` otherwise, in the machine's byte order, to
``<cache>/tokens-<key>.bin``; ``tokens-<key>.json`` beside it, written after it, says what it holds (dtype,
tokens, documents, the files and the tokenizer). The key is the sha256 of the files' fingerprints
(``fingerprint.py``: name, size, modification time) and of the tokenizer file's sha256 and end-of-text id, so a
changed corpus or tokenizer gets a stream of its own and an unchanged one is read again without tokenizing. The
stream is written atomically (``skipless.atomic``) while it is encoded, a batch of documents at a time, so a
C4 split never has to fit in memory; DDP ranks that pack at once wait for the first (``locking.py``).
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Sequence

import numpy as np
from tqdm import tqdm

from ...atomic import atomic_write
from ..errors import MalformedDatasetError
from .c4 import c4_shards, read_documents
from .fingerprint import digest_of, files_fingerprint
from .locking import locked
from .tokenizer import TextTokenizer

FORMAT = 1       # raise when the stream's layout changes: old caches then get new keys
BATCH = 1024     # documents encoded at a time (tokenizers encodes a batch on all cores)


@dataclass(frozen=True)
class PackedStream:
    """A packed token stream on disk: ``path`` (the ``.bin``), its ``dtype``, ``tokens`` ids in all,
    ``documents`` documents, the ``eos_id`` between them and the tokenizer's ``vocab_size``."""

    path: Path
    dtype: str
    tokens: int
    documents: int
    eos_id: int
    vocab_size: int

    def array(self) -> np.memmap:
        """The stream, mapped read-only (nothing is read until it is indexed)."""
        return np.memmap(self.path, dtype=np.dtype(self.dtype), mode="r", shape=(self.tokens,))


def stream_dtype(vocab_size: int) -> np.dtype:
    """``uint16`` when every id of a ``vocab_size`` vocabulary fits (at most 65,536 ids), else ``uint32``."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def stream_key(files: Sequence[Path], tokenizer: TextTokenizer) -> str:
    """The cache key of the stream of ``files`` under ``tokenizer`` (module docstring)."""
    return digest_of({"format": FORMAT, "files": files_fingerprint(files), "tokenizer": tokenizer.digest,
                      "eos_id": tokenizer.eos_id})[:24]


def _read_cached(meta: Path, bin_path: Path, expected: dict) -> PackedStream | None:
    try:
        saved = json.loads(meta.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or any(saved.get(k) != v for k, v in expected.items()):
        return None
    stream = PackedStream(bin_path, saved["dtype"], int(saved["tokens"]), int(saved["documents"]),
                          int(saved["eos_id"]), int(saved["vocab_size"]))
    if not bin_path.is_file() or bin_path.stat().st_size != stream.tokens * np.dtype(stream.dtype).itemsize:
        return None
    return stream


def _write_stream(f: BinaryIO, files: Sequence[Path], tokenizer: TextTokenizer, dtype: np.dtype) -> tuple[int, int]:
    """Encode every document of ``files`` into ``f``; returns (tokens, documents)."""
    tokens = documents = 0

    def flush(batch: list[str]) -> None:
        nonlocal tokens, documents
        ids: list[int] = []
        for doc in tokenizer.encode_batch(batch):
            ids += doc
            ids.append(tokenizer.eos_id)
        f.write(np.asarray(ids, dtype=dtype).tobytes())
        tokens, documents = tokens + len(ids), documents + len(batch)

    for shard in tqdm(files, desc="tokenizing", unit="file", file=sys.stderr, disable=len(files) < 2):
        batch: list[str] = []
        for text in read_documents(shard):
            batch.append(text)
            if len(batch) == BATCH:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
    return tokens, documents


def pack_tokens(files: Sequence[str | os.PathLike], tokenizer: TextTokenizer, cache: str | os.PathLike) -> PackedStream:
    """The packed stream of the documents of ``files`` (C4 shards) under ``tokenizer``, read from ``cache`` when
    it is there, else encoded and written there first.

    Raises:
        MalformedDatasetError: from the shards (``c4.read_documents``), or the files hold no document.
    """
    files, cache = [Path(p) for p in files], Path(cache)
    key = stream_key(files, tokenizer)
    bin_path, meta = cache / f"tokens-{key}.bin", cache / f"tokens-{key}.json"
    dtype = stream_dtype(tokenizer.vocab_size)
    expected = {"format": FORMAT, "files": files_fingerprint(files), "tokenizer_sha256": tokenizer.digest,
                "eos_id": tokenizer.eos_id, "dtype": dtype.name, "vocab_size": tokenizer.vocab_size}
    stream = _read_cached(meta, bin_path, expected)
    if stream is not None:
        return stream
    with locked(cache, f"tokens-{key}"):
        stream = _read_cached(meta, bin_path, expected)
        if stream is not None:
            return stream
        counts: list[tuple[int, int]] = []

        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                counts.append(_write_stream(f, files, tokenizer, dtype))

        atomic_write(bin_path, write)
        tokens, documents = counts[-1]
        if documents == 0:
            bin_path.unlink()
            raise MalformedDatasetError(f"{', '.join(str(p) for p in files[:3])}{' ...' if len(files) > 3 else ''} "
                                        "hold no document; expected at least one line with a 'text' field")
        text = json.dumps({**expected, "tokens": tokens, "documents": documents,
                           "tokenizer": str(tokenizer.path)}, indent=1) + "\n"
        atomic_write(meta, lambda tmp: Path(tmp).write_text(text))
        return PackedStream(bin_path, dtype.name, tokens, documents, tokenizer.eos_id, tokenizer.vocab_size)


def pack_split(root: str | os.PathLike, split: str, tokenizer: TextTokenizer, cache: str | os.PathLike) -> PackedStream:
    """The packed stream of every shard of ``split`` at the C4 root ``root`` (``c4.c4_shards``)."""
    return pack_tokens(c4_shards(root, split), tokenizer, cache)
