"""Atomic file writes: write to a temporary file in the same folder, then ``os.replace``.

The file gets the mode a plain ``open(path, "w")`` would give it, ``0o666`` less the user's umask (0644
under umask 022, 0664 under 002, as a shared cluster group expects): ``tempfile.mkstemp`` makes its file
0600 whatever the umask, and the rename would keep that.

An interrupted write (crash, pre-emption, full disk) leaves the previous file intact, never a
truncated one. The temporary file is flushed to its disk (``fsync``) before the rename, and the folder
after it, so that a machine that loses power just after a write finds the new file whole or the old
one, never a renamed file whose blocks were not written yet (a file system with delayed allocation may
commit the rename before the data); a file system that cannot flush a folder (some network ones)
fails nothing by it. A write killed outright leaves its temporary file behind,
``.<name>.<8 random characters>.tmp`` (``TEMPORARY``), which the next run in the folder removes
(``training/stale_files.py``). A write that fails because its disk is full raises ``DiskFullError``, one sentence
with the space the file needs, instead of the chained C++ stream errors ``torch.save`` gives
(``basic_ios::clear: iostream error``, then ``inline_container.cc ... unexpected pos``, no errno): a
failed write is taken for a full disk when an ``OSError`` of its chain says so (``ENOSPC``,
``EDQUOT``) or when the disk has less room left than the rest of the file needed.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable

import torch

from .errors import SkiplessError

_FULL = (errno.ENOSPC, errno.EDQUOT)
_SLACK = 1 << 20  # a disk with less than this left counts as full when a write fails on it
# The names atomic_write's temporary files have: mkstemp's prefix and suffix around CPython's 8 random
# characters (tempfile._RandomNameSequence: a-z, 0-9 and _).
TEMPORARY = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


class DiskFullError(SkiplessError, OSError):
    """A file could not be written because its disk (or quota) is full. ``path``, ``needed`` and
    ``free`` (bytes) let a caller say more about what it was writing."""

    def __init__(self, message: str, path: Path | None = None, needed: int = 0, free: int = 0) -> None:
        super().__init__(message)
        self.path, self.needed, self.free = path, needed, free


def size_text(n: int) -> str:
    """``123 MB``-style size, for messages."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _says_full(err: BaseException | None, seen: set[int]) -> bool:
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in _FULL:
            return True
        if err.__cause__ is not None and _says_full(err.__cause__, seen):
            return True
        err = err.__context__
    return False


def umask() -> int:
    """This process's umask, read without changing it where Linux says it (``/proc/self/status``, 4.7+);
    elsewhere set and restored at once."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def fsync_file(path: str | os.PathLike) -> None:
    """Flush the written blocks of the file at ``path`` to its disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_folder(folder: str | os.PathLike) -> None:
    """Flush ``folder``'s entries (a rename into it) to its disk; best effort: a file system that refuses to
    open or flush a folder (``EINVAL``, ``EBADF``, ``EACCES``...) leaves the rename to its own schedule."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[str], None], needed: int = 0) -> Path:
    """Call ``write(tmp_path)`` then move the result onto ``path`` atomically; ``needed`` (bytes, an
    estimate) helps tell a full disk and says how much the file needs (else the size of the file it replaces)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    full = False
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask())
        fsync_file(tmp)  # a full disk may say so only here (delayed allocation, NFS): the except below tells it
        os.replace(tmp, path)
        fsync_folder(path.parent)
        return path
    except Exception as err:
        needed = max(needed, path.stat().st_size if path.is_file() else 0)
        written = os.path.getsize(tmp) if os.path.exists(tmp) else 0
        full = _says_full(err, set()) or shutil.disk_usage(path.parent).free < max(needed - written, _SLACK)
        if not full:
            raise
        needed = max(needed, written)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    # Raised here, outside the except clause, so that the failed write's exception (whose frames may
    # hold the temporary file open, keeping its blocks after the removal above) is gone first.
    free = shutil.disk_usage(path.parent).free
    raise DiskFullError(f"could not write {path}: its disk is full (the file needs about {size_text(needed)}, "
                        f"{size_text(free)} is free there); free space and run again", path, needed, free)


def tensor_bytes(obj: Any) -> int:
    """The bytes of the tensors in a nested dict / list / tuple (each storage once): about what
    ``torch.save`` writes."""
    seen: dict[int, int] = {}

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            storage = x.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        elif isinstance(x, Mapping):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(obj)
    return sum(seen.values())


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> Path:
    """``torch.save`` that never leaves a half-written file at ``path``."""
    return atomic_write(path, lambda tmp: torch.save(obj, tmp), needed=tensor_bytes(obj))
