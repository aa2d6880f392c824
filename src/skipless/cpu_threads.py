"""How many CPU threads torch uses in a process of this suite: one rule, read from the ``cpu_threads`` key of
every evaluator's config (``eval/``).

Why not torch's default (one thread per core): its OpenMP threads wait for each other at the end of every
parallel region, so when one of them shares its core with another process (a second job, or this run's own
image-decoding workers), all of them wait. On a 2-core machine running another job, TokenCut on 200 demo
images took 0.032 s per image with one thread and 0.094 s with two (docs/results.md; a new user measured
1.2-1.5 s against 0.037 s beside a heavier job), the probe 44 s against 250 s. On idle cores one thread costs
at most the number of cores, and the heavy evaluations on a GPU do not run on these threads at all.

The rule for ``cpu_threads: null``, the default: half of the cores this process may run on
(``os.sched_getaffinity``) that the loader's worker processes leave, and at least one:

    threads = max(1, (cores - workers) // 2)

so 1 on a 2-core machine however many workers, 4 on 16 cores with 8 workers, 8 on 16 idle cores and no
workers. A number is taken as it is (``cpu_threads=2`` on an idle machine that is yours alone).
"""
from __future__ import annotations

import os

import torch


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask: a SLURM allocation's, a container's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def loader_workers(requested: int | None) -> int:
    """The image-decoding processes of an evaluator's loader: ``requested``, or (None) min(8, usable cores)."""
    return min(8, usable_cores()) if requested is None else int(requested)


def cpu_threads(requested: int | None, workers: int, cores: int | None = None) -> int:
    """The threads for ``requested`` (``cpu_threads`` of a config; None: the module's rule), with ``workers``
    loader processes beside this one, on ``cores`` (None: ``usable_cores()``)."""
    if requested is not None:
        return int(requested)
    cores = usable_cores() if cores is None else cores
    return max(1, (cores - max(0, workers)) // 2)


def set_cpu_threads(requested: int | None, workers: int) -> int:
    """``torch.set_num_threads`` with ``cpu_threads(requested, workers)``; returns the number set."""
    threads = cpu_threads(requested, workers)
    torch.set_num_threads(threads)
    return threads
