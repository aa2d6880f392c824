"""Errors of the text data that are not a dataset's: a pinned download whose bytes are not the pinned ones,
and a tokenizer that cannot serve a language model.

A missing or malformed corpus raises the dataset readers' own errors (``data/errors.py``:
``DatasetNotFoundError``, ``MalformedDatasetError``), so an entry point says them as it says a missing
image dataset.
"""
from __future__ import annotations

from ...errors import SkiplessError


class PinnedFileError(SkiplessError, ValueError):
    """A pinned distribution (``pinned.py``) whose sha256 is not the pinned one, or that could not be fetched."""


class TokenizerError(SkiplessError, ValueError):
    """A tokenizer name no table knows, a ``path:`` that does not exist or is no tokenizer, or a
    tokenizer without an end-of-text token."""
