"""Short TensorBoard run names: a folder of links that ``make tensorboard`` shows instead of ``runs/``.

TensorBoard names a run by the path from its logdir to the folder of the events file, and its run list
cuts a name at its end. The suite's paths repeat two words that say nothing to the reader (``tb``, where
every run keeps its events, and ``eval``, where every evaluation of a backbone writes), so every name of
a run began ``skipless-adamw-default/`` and was cut before the part that told the runs apart:

    runs/skipless-adamw-default/tb                          ->  skipless-adamw-default
    runs/skipless-adamw-default/tb/random-init              ->  skipless-adamw-default/random-init
    runs/skipless-adamw-default/eval/tb/probe-default/lr=0.01 -> skipless-adamw-default/probe-default/lr=0.01
    runs/skipless-adamw-default/eval/tb                     ->  skipless-adamw-default/eval  (PCA's images:
                                                                 ``eval`` stays where dropping it would
                                                                 give two folders one name)

``short_names`` is that mapping; ``sync_view`` makes a folder in which each short name is a directory of
links to the events files of its run (files, not folders, so that a run's sub-runs are not read twice),
and ``ViewKeeper`` syncs it again every few seconds while TensorBoard runs, so a run that starts later
appears as it would under ``runs/``. Nothing under ``runs/`` is written.
"""
from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

EVENTS = "events.out.tfevents."
SILENT = ("tb", "eval")  # path words every run has: dropped from the names


def event_folders(logdir: Path) -> dict[Path, list[Path]]:
    """Every folder under ``logdir`` holding events files (relative path -> its files, sorted)."""
    found: dict[Path, list[Path]] = {}
    for folder, dirs, files in os.walk(logdir):
        dirs.sort()
        events = sorted(Path(folder) / f for f in files if f.startswith(EVENTS))
        if events:
            found[Path(folder).relative_to(logdir)] = events
    return found


def short_names(folders: list[Path]) -> dict[Path, str]:
    """Each relative events folder's name without ``tb`` (always) and ``eval`` (unless two folders would
    then share a name, or nothing would be left): see the module docstring."""
    def without(folder: Path, words: tuple[str, ...]) -> str:
        kept = [p for p in folder.parts if p not in words]
        return "/".join(kept) if kept else folder.as_posix()

    def clashing(names: dict[Path, str]) -> set[str]:
        return {n for n, count in Counter(names.values()).items() if count > 1}

    names = {f: without(f, SILENT) for f in folders}
    twice = clashing(names)
    names = {f: (without(f, ("tb",)) if n in twice else n) for f, n in names.items()}
    twice = clashing(names)
    return {f: (f.as_posix() if n in twice else n) for f, n in names.items()}


def sync_view(logdir: Path, view: Path) -> dict[str, Path]:
    """Make ``view`` hold, for each run under ``logdir``, ``<short name>/<events file>`` links to its events
    files, and nothing else (links of a run no longer there are removed); returns name -> real folder."""
    folders = event_folders(logdir)
    names = short_names(list(folders))
    wanted: set[Path] = set()
    for folder, name in names.items():
        for events in folders[folder]:
            link = view / name / events.name
            wanted.add(link)
            if not link.is_symlink():
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(events.resolve())
    for link in [p for p in view.rglob("*") if p.is_symlink() and p not in wanted]:
        link.unlink()
    return {name: logdir / folder for folder, name in names.items()}


class ViewKeeper:
    """``sync_view(logdir, view)`` now and every ``every_s`` seconds on a daemon thread, until ``stop()``."""

    def __init__(self, logdir: Path, view: Path, every_s: float = 5.0) -> None:
        self.logdir, self.view, self.every_s = Path(logdir), Path(view), every_s
        self.names: Mapping[str, Path] = sync_view(self.logdir, self.view)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tensorboard-view")
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self.every_s):
            try:
                self.names = sync_view(self.logdir, self.view)
            except OSError:  # a run folder removed while it was read: the next pass sees the rest
                continue

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
