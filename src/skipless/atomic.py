"""Atomic file writes: write to a temporary file in the same folder, then ``os.replace``.

An interrupted write (crash, pre-emption, full disk) leaves the previous file intact, never a
truncated one.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch


def atomic_write(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Call ``write(tmp_path)`` then move the result onto ``path`` atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` that never leaves a half-written file at ``path``."""
    return atomic_write(path, lambda tmp: torch.save(obj, tmp))
