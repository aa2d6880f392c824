"""Files that a killed write leaves in a run folder, removed when the next run of the folder starts.

A write killed outright (SIGKILL, out of memory, a node that died) cannot clean up after itself, and
what it leaves is hidden and large: ``checkpoints/.last.ckpt.<random>.tmp`` is a whole checkpoint
(gigabytes at the paper's scale), and each restart of a cluster job may leave another. The run that
next holds the folder removes them, and only them, by their exact names:

- ``.<name>.<8 random characters>.tmp``: ``atomic.atomic_write``'s temporary files (``atomic.TEMPORARY``),
  in the run folder and in ``checkpoints/``;
- ``.backbone.pt.staged`` and ``.backbone-epoch<N>.pt.staged``: ``ExportBackbone``'s staged exports
  (``callbacks.py``), put in place only once their epoch's checkpoint is written;
- ``.run.lock.<pid>.stale``: a lock ``run_lock._take_over`` moved aside, unless that pid still runs on this
  host (a run taking a stale lock over at this very moment: it puts a live lock it moved by mistake back).

It runs only once the run holds ``run.lock`` (``run_start.record_start``, rank 0, inside
``run_lock.hold_run_folder``): no other run writes into the folder then, so nothing removed is in use.
A user's other files, dotfiles included, are never touched. One line says what went, with its size.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..atomic import TEMPORARY, size_text
from .run_folder import LOCK

STAGED = re.compile(r"\.backbone(-epoch\d+)?\.pt\.staged")
LOCK_ASIDE = re.compile(re.escape(f".{LOCK}.") + r"(\d+)\.stale")
FOLDERS = (".", "checkpoints")  # where the run writes with atomic_write and ExportBackbone


def _runs_here(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process (OverflowError: no such pid at all)
        return False
    except PermissionError:  # a process of another user
        return True
    return True


def is_stale(path: Path) -> bool:
    """Whether ``path`` is a leftover of a killed write (module docstring), by its name."""
    name = path.name
    if TEMPORARY.fullmatch(name) or STAGED.fullmatch(name):
        return True
    lock = LOCK_ASIDE.fullmatch(name)
    return lock is not None and not _runs_here(int(lock.group(1)))


def stale_files(run_dir: Path) -> list[Path]:
    """The leftovers of killed writes in ``run_dir`` and its ``checkpoints/``, sorted."""
    found = []
    for folder in FOLDERS:
        where = Path(run_dir) / folder
        if where.is_dir():
            found += [p for p in where.iterdir() if is_stale(p) and p.is_file() and not p.is_symlink()]
    return sorted(found)


def remove_stale_files(run_dir: Path) -> str | None:
    """Remove the leftovers of killed writes in ``run_dir``; the line that says so (None: there were none).
    Call only while holding the folder's lock (module docstring)."""
    removed, size = [], 0
    for path in stale_files(run_dir):
        try:
            bytes_ = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path.relative_to(run_dir).as_posix())
        size += bytes_
    if not removed:
        return None
    shown = ", ".join(removed[:4]) + (f" and {len(removed) - 4} more" if len(removed) > 4 else "")
    return (f"  cleanup  removed {len(removed)} file{'s' if len(removed) > 1 else ''} that an interrupted write left "
            f"in {run_dir} ({size_text(size)}): {shown}")
