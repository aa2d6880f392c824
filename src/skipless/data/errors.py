"""Errors and warnings of the dataset readers.

A missing dataset is the first thing a new user meets, so it gets one sentence that says which
dataset, where it was looked for, what layout was expected and where the instructions are
instead of a bare ``FileNotFoundError`` from deep inside a loader.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Sequence

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


def warn_unreadable(path: object, error: Exception) -> None:
    """Say, as a ``CorruptImageWarning``, that the image at ``path`` was skipped (once: not also in a log
    line, which printed every file twice)."""
    warnings.warn(f"skipping unreadable image {path} ({type(error).__name__}: {error})", CorruptImageWarning,
                  stacklevel=5)


def own_folder_hint(data_root: str | os.PathLike, own: Sequence[str]) -> str | None:
    """What to say when the data root is (or lies inside) one of the dataset's own folders (``own``:
    ``ADEChallengeData2016``, ``VOCdevkit``, ImageNet's ``train``): the folder to give instead, the one
    that holds it. None when the root is no such folder."""
    root = Path(data_root)
    inside = [i for i, part in enumerate(root.parts) if part in own]
    if not inside:
        return None
    holder = Path(*root.parts[:inside[-1]]) if inside[-1] else Path(".")
    where = "is" if inside[-1] == len(root.parts) - 1 else "lies inside"
    return (f"the data root {root} {where} the dataset's own folder {root.parts[inside[-1]]}; give the folder "
            f"that holds it instead, DATA_ROOT={holder}")


def missing_dataset(name: str, root: str | os.PathLike, layout: str, hint: str | None = None) -> DatasetNotFoundError:
    """Build the one-sentence error for a dataset that is not at ``root``.

    Args:
        name: the dataset as users call it ("PASCAL VOC 2012 segmentation").
        root: the path that was looked at (file or folder).
        layout: the expected layout, relative to the data root, in one line.
        hint: what to do instead, when the reader can tell (``own_folder_hint``, a zip to unpack ...);
            it comes first, the layout after it.

    Returns:
        The error, for the caller to raise (``raise missing_dataset(...)``) so that the traceback
        points at the reader that needed the data.
    """
    if hint:
        return DatasetNotFoundError(f"{name} not found at {os.fspath(root)}: {hint} (expected {layout}; "
                                    f"see {README})")
    return DatasetNotFoundError(
        f"{name} not found at {os.fspath(root)!r}: expected {layout}; see {README} for how to "
        "get and lay out each dataset (or point the root its config reads at it: DATA_ROOT=, or the dataset's own "
        "variable, IMAGENET100_ROOT= or IMAGENET10_ROOT=).")
