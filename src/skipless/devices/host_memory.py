"""The host memory a training loader holds, and the memory this machine has available: the header states the
first (``reports/summary.py``) and an entry point refuses a loader that needs more than the second, before
anything is written.

What a loader holds at once, per process (``loader_host_bytes``): each of its ``W`` workers makes up to
``prefetch_factor`` loader items ahead of the step (torch's ``DataLoader`` keeps ``W x prefetch_factor`` in
flight), and the main process gathers the ``k`` micro-batches of the step it deals next
(``training/loader_state.py``). Since the workers collate micro-batches, a loader item is one micro-batch:
``W x prefetch_factor x m + k x m`` for micro-batches of ``m`` bytes. When the loader dealt the whole step as
one item (before issue 48), an item was ``k x m``: ``W x prefetch_factor x k x m + k x m``, tens of GB for
DINO's paper recipe on one GPU (``docs/results.md``, "The loader's host memory"). Each process of a node has
its own loader, so the node holds ``devices per node`` times that. Not counted: the model's own host memory, the
pinned copy a CUDA run makes of the item being pinned, the dataset's own state.

``available_bytes`` reads ``MemAvailable`` of ``/proc/meminfo`` (Linux: memory that can be given to a new
program without swapping), else the free pages ``os.sysconf`` reports, else None (then nothing is refused).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..config import ConfigError

MEMINFO = Path("/proc/meminfo")


def available_bytes() -> int | None:
    """The host memory this machine has available now, in bytes (module docstring); None where unknown."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def loader_host_bytes(item: int, workers: int, prefetch: int, gathered: int) -> int:
    """Host bytes a loader holds at once: ``workers x prefetch`` items of ``item`` bytes in flight, and the
    ``gathered`` bytes of the step the main process deals next (module docstring)."""
    return int(workers) * int(prefetch) * int(item) + int(gathered)


def size_text(n: float) -> str:
    """``2.37 GB``, ``148 MB``, ``12.3 kB``: decimal units, three significant digits."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


@dataclass(frozen=True)
class LoaderMemory:
    """The training loader of one run, as far as its host memory goes (module docstring).

    ``micro_batch``: bytes of one micro-batch (``images`` images of the method's views, ``dtype`` the dtype of the
    largest of its tensors); ``micro_batches``: ``k``, per optimizer step; ``workers`` and ``prefetch``: the
    loader's workers and the micro-batches each makes ahead; ``processes``: the loaders on this node."""

    micro_batch: int
    images: int
    dtype: str
    micro_batches: int
    workers: int
    prefetch: int
    processes: int = 1

    @property
    def per_process(self) -> int:
        return loader_host_bytes(self.micro_batch, self.workers, self.prefetch, self.micro_batches * self.micro_batch)

    @property
    def per_node(self) -> int:
        return self.processes * self.per_process

    def terms(self) -> str:
        """``10 workers x 2 micro-batches ahead + the step's 16 being gathered; a micro-batch is 64 images, 134 MB
        in float32``."""
        step = f"the step's {self.micro_batches} being gathered" if self.micro_batches > 1 else "the step's one"
        ahead = (f"{self.workers} worker{'s' if self.workers != 1 else ''} x {self.prefetch} micro-batch"
                 f"{'es' if self.prefetch != 1 else ''} ahead + {step}" if self.workers else f"no workers, {step}")
        return f"{ahead}; a micro-batch is {self.images} images, {size_text(self.micro_batch)} in {self.dtype}"

    def describe(self) -> str:
        """The header's words: the bytes per process (and on this node), and how they are made."""
        node = (f" ({size_text(self.per_node)} for the {self.processes} processes on this node)"
                if self.processes > 1 else "")
        return f"{size_text(self.per_process)} of host memory per process{node}: {self.terms()}"


def check_loader_fits(memory: LoaderMemory, available: int | None = None) -> None:
    """Refuse, in one sentence, a loader whose host memory on this node exceeds the memory this machine has
    available (``available``, by default ``available_bytes()``; nothing is refused where it is unknown). It names
    the most workers that would fit, or, where the step's own micro-batches do not, what shrinks them."""
    available = available_bytes() if available is None else available
    if available is None or memory.per_node <= available:
        return
    per_process = available // memory.processes
    step = memory.micro_batches * memory.micro_batch
    fits = (per_process - step) // (memory.prefetch * memory.micro_batch) if per_process >= step else -1
    if fits >= 0:
        fix = (f"train.num_workers={fits} or fewer (each worker holds {memory.prefetch} x "
               f"{size_text(memory.micro_batch)}), or a smaller train.batch_size_per_device")
    else:
        alone = (f"the step's {memory.micro_batches} micro-batches alone take" if memory.micro_batches > 1 else
                 "its one micro-batch alone takes")
        fix = f"a smaller train.global_batch or more devices: {alone} {size_text(step)} per process"
    on = f" on this node's {memory.processes} processes" if memory.processes > 1 else ""
    raise ConfigError(f"the training loader would hold {size_text(memory.per_node)} of host memory{on} "
                      f"({memory.terms()}), more than the {size_text(available)} this machine has available; "
                      f"expected {fix} (nothing was written)")
