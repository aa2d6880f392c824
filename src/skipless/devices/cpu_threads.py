"""How many CPU threads torch uses in a process of this suite: one rule, read from the ``cpu_threads`` key of
every evaluator's config (``eval/``), from ``train.cpu_threads`` of pretraining and supervised training
(each of a run's processes on a node sets its own), and by the test suite (``tests/conftest.py``).

Why not torch's default (one thread per core): its OpenMP threads wait for each other at the end of every
parallel region, so when one of them shares its core with another process (a second job, or this run's own
image-decoding workers), all of them wait. On a 2-core machine running another job, TokenCut on 200 demo
images took 0.032 s per image with one thread and 0.094 s with two (docs/results.md; a new user measured
1.2-1.5 s against 0.037 s beside a heavier job), the probe 44 s against 250 s. Training and the tests
likewise (docs/results.md, "CPU threads"): 20 steps of the DINO demo beside a 2-thread job took 65 s with one
thread and 188 s with two; 127 tests of the suite 64 s against 620 s. On idle cores one thread costs at most
the number of cores (the DINO demo: 76 s against 49 s for 40 steps, so ``train.cpu_threads=2`` on a 2-core
machine that is yours alone; the tests: no difference), and on a GPU the heavy work does not run on these
threads at all.

The rule for ``cpu_threads: null``, the default: half of the cores this process may run on
(``os.sched_getaffinity``) that the loader's worker processes leave, shared among the ``processes`` a
training run starts on the node (one per GPU), and at least one:

    threads = max(1, (cores - processes x workers) // (2 x processes))

so 1 on a 2-core machine however many workers, 4 on 16 cores with 8 workers, 8 on 16 idle cores and no
workers, 4 for each of 8 GPU processes with 8 workers each on 128 cores. ``OMP_NUM_THREADS`` in the
environment (a SLURM script's ``$SLURM_CPUS_PER_TASK``) stands for the rule when the key is null. A number
is taken as it is (``cpu_threads=2`` on an idle machine that is yours alone).
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


def _from_environment() -> int | None:
    """``OMP_NUM_THREADS`` when it holds a positive whole number, else None."""
    text = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(text) if text.isdigit() and int(text) >= 1 else None


def threads_reason(requested: int | None, workers: int, processes: int = 1, key: str = "cpu_threads") -> str:
    """Where ``cpu_threads(requested, workers, processes=processes)`` came from, for a header: the ``key``,
    ``OMP_NUM_THREADS``, or the rule with its numbers."""
    if requested is not None:
        return key
    if _from_environment() is not None:
        return f"OMP_NUM_THREADS; {key}= to choose"
    beside = f" x {processes} processes" if processes > 1 else ""
    return f"half of {usable_cores()} cores less {workers} loader workers{beside}, skipless/devices/cpu_threads.py; {key}= to choose"


def cpu_threads(requested: int | None, workers: int, cores: int | None = None, processes: int = 1) -> int:
    """The threads for ``requested`` (``cpu_threads`` of a config; None: the module's rule), with ``workers``
    loader processes beside each of ``processes`` on the node, on ``cores`` (None: ``usable_cores()``)."""
    if requested is not None:
        return int(requested)
    from_environment = _from_environment()
    if from_environment is not None:
        return from_environment
    cores = usable_cores() if cores is None else cores
    processes = max(1, processes)
    return max(1, (cores - processes * max(0, workers)) // (2 * processes))


def set_cpu_threads(requested: int | None, workers: int, processes: int = 1) -> int:
    """``torch.set_num_threads`` with ``cpu_threads(requested, workers, processes=processes)``; returns the number set."""
    threads = cpu_threads(requested, workers, processes=processes)
    torch.set_num_threads(threads)
    return threads
