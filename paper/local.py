"""Running an experiment's jobs on this machine: in dependency order, one at a time, or one per GPU.

Each job is its own process (``runner.run_job``), so a crash or an out-of-memory in one job is that
job's failure: it is marked failed with the error it printed, the jobs that depend on it are marked
blocked, and every other job still runs. With ``parallel`` slots (``paper.local.parallel``: ``gpus``
= one per visible GPU) each slot pins its job to one GPU through ``CUDA_VISIBLE_DEVICES``, naming it
as this process's own ``CUDA_VISIBLE_DEVICES`` does (``visible_gpus``).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable

import torch

from skipless.errors import EXIT_BUSY

from .jobs import Job, is_done, read_marker, write_marker
from .runner import run_job

ENDED = ("failed", "blocked", "busy", "preempted")  # a job's states that block the jobs waiting for it


def visible_gpus() -> list[str]:
    """The GPUs this process sees, each named as a child's ``CUDA_VISIBLE_DEVICES`` must name it.

    A child's list is read against the machine, not against its parent's list: under
    ``CUDA_VISIBLE_DEVICES=2,3`` the parent's GPU 0 is the machine's GPU 2, so a child must be given
    ``2`` (or the UUID the parent's list holds), never ``0``. CUDA stops reading the list at its first
    invalid entry, so only the first ``torch.cuda.device_count()`` entries are GPUs."""
    count = torch.cuda.device_count()
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [name.strip() for name in listed.split(",")] if listed is not None else [str(i) for i in range(count)]
    return names[:count]


def slots(parallel: int | str) -> list[dict[str, str]]:
    """The environment of each slot: ``gpus`` gives one slot per visible GPU (one slot without a GPU)."""
    if parallel == "gpus":
        return [{"CUDA_VISIBLE_DEVICES": name} for name in visible_gpus()] or [{}]
    return [{} for _ in range(int(parallel))]


def run_local(folder: Path, jobs: list[Job], parallel: int | str = 1,
              say: Callable[[str], None] = print) -> dict[str, str]:
    """Run every job that is not done; returns ``{job name: done | failed | blocked | preempted | busy}``
    (done includes the jobs found done before, which are not run again; preempted: a training stopped by a
    signal after a checkpoint, which the next call continues; busy: a training another live run holds)."""
    state: dict[str, str] = {}
    for job in jobs:
        if is_done(folder, job):
            state[job.name] = "done"
    skipped = sorted(state)
    if skipped:
        say(f"{len(skipped)} of {len(jobs)} jobs already done, not run again: {', '.join(skipped)}")
    free = slots(parallel)
    running: dict[Future, tuple[Job, dict[str, str]]] = {}
    pending = [j for j in jobs if j.name not in state]
    with ThreadPoolExecutor(max_workers=len(free)) as pool:
        while pending or running:
            for job in list(pending):
                deps = [state.get(d) for d in job.depends]
                if any(d in ENDED for d in deps):
                    state[job.name] = "blocked"
                    blocker = next(d for d in job.depends if state.get(d) in ENDED)
                    write_marker(folder, job, "blocked", error=f"not run: {blocker} did not finish")
                    say(f"[blocked] {job.name}: {blocker} did not finish")
                    pending.remove(job)
                elif all(d == "done" for d in deps) and free:
                    slot = free.pop(0)
                    say(f"[start] {job.name}: {job.shown()}")
                    running[pool.submit(run_job, folder, job, slot)] = (job, slot)
                    pending.remove(job)
            if not running:
                if pending:  # a dependency that is not in this plan: nothing can start them
                    for job in pending:
                        state[job.name] = "blocked"
                    break
                continue
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                job, slot = running.pop(future)
                free.append(slot)
                code = future.result()
                if code == EXIT_BUSY:  # another make paper runs this training: its marker is that one's
                    state[job.name] = "busy"
                    say(f"[busy] {job.name}: another run holds its folder (see {job.log}); left to it")
                    continue
                done = is_done(folder, job)
                marker = read_marker(folder, job) or {}
                state[job.name] = "done" if done else ("preempted" if marker.get("status") == "preempted" else "failed")
                seconds = marker.get("seconds", 0)
                shown = {"done": "done", "preempted": "preempted", "failed": "FAILED"}[state[job.name]]
                say(f"[{shown}] {job.name} ({seconds:.0f} s)"
                    + ("" if done else f": {marker.get('error', 'see its log')}"))
    return state


def elapsed(start: float) -> str:
    minutes, seconds = divmod(int(time.time() - start), 60)
    return f"{minutes} min {seconds} s"
