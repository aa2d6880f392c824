"""Errors and warnings of the dataset readers.

A missing dataset is the first thing a new user meets, so it gets one sentence that says which
dataset, where it was looked for, what layout was expected and where the instructions are
instead of a bare ``FileNotFoundError`` from deep inside a loader.
"""
from __future__ import annotations

import logging
import os
import warnings

from ..errors import SkiplessError

README = "data/README.md"


class DatasetNotFoundError(SkiplessError, FileNotFoundError):
    """A dataset folder, list or file that a reader needs is not where it was looked for."""


class MalformedDatasetError(SkiplessError, ValueError):
    """A dataset is present but a file breaks its layout's conventions (e.g. an RGB mask)."""


class UnknownDatasetError(SkiplessError, ValueError):
    """A dataset name that no registry knows; the message lists the known ones."""


class CorruptImageWarning(UserWarning):
    """An unreadable image was skipped; training goes on with the next one."""


def warn_unreadable(path: object, error: Exception, logger: logging.Logger) -> None:
    """Say once, as a ``CorruptImageWarning`` and in the log, that the image at ``path`` was skipped."""
    message = f"skipping unreadable image {path} ({type(error).__name__}: {error})"
    warnings.warn(message, CorruptImageWarning, stacklevel=4)
    logger.warning(message)


def missing_dataset(name: str, root: str | os.PathLike, layout: str) -> DatasetNotFoundError:
    """Build the one-sentence error for a dataset that is not at ``root``.

    Args:
        name: the dataset as users call it ("PASCAL VOC 2012 segmentation").
        root: the path that was looked at (file or folder).
        layout: the expected layout, relative to the data root, in one line.

    Returns:
        The error, for the caller to raise (``raise missing_dataset(...)``) so that the traceback
        points at the reader that needed the data.
    """
    return DatasetNotFoundError(
        f"{name} not found at {os.fspath(root)!r}: expected {layout}; see {README} for how to "
        "get and lay out each dataset (or set DATA_ROOT=).")
