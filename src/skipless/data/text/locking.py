"""One writer at a time for a folder the text data writes (the corpus, a tokenizer, the token cache): an
exclusive ``flock`` on ``<folder>/.<name>.lock``. DDP ranks that all call ``ensure_bible_corpus`` (or
``build_tokenizer``, ``pack_tokens``) at once wait here; the first one writes, the others find the result
complete. The same lock as the image default's (``generator/synthetic.py``)."""
from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def locked(folder: Path, name: str) -> Iterator[None]:
    """Hold the exclusive lock ``<folder>/.<name>.lock`` (the folder is created) for the ``with`` block."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f".{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
