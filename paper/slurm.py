"""Submitting an experiment's jobs to a SLURM cluster through submitit (as DINO's and DINOv2's
``run_with_submitit.py`` do), instead of a scheduler of our own.

Every job that is not done becomes one SLURM job running ``slurm_task.SlurmTask`` (``runner.run_job``, the
function the local runner calls, made checkpointable: a training stopped at its time limit or pre-empted is
requeued by submitit, ``slurm.max_requeues`` times at most, and continues from its checkpoint). A training run
is a multi-node job: ``nodes`` x ``gpus_per_node`` tasks, one per GPU, and Lightning reads the SLURM environment
inside each task (``train.devices`` and ``train.num_nodes`` are set to match, and are part of the run's
identity: they set the accumulation steps of a recipe's ``train.global_batch``, or the global batch where it is
null). A fine-tuning evaluation (``make finetune``) is a training too and gets the same resources; any other
evaluation is a one-GPU job that waits for its training run (``--dependency=afterok:<id>``, and
``--kill-on-invalid-dep=yes``: SLURM cancels it if that training fails rather than leave it pending for
ever); a last, GPU-less job writes the report once every other job has ended (``afterany``).

``make paper`` returns after submitting, and can be run again at any time: each job's marker names its SLURM
job, and squeue is asked once about all of them (``scheduler.squeue_states``). A job that is done, or whose
SLURM job is still queued or running, is left alone; one whose SLURM job ended (or left the queue, which is
the same: the marker says whether it finished) without finishing is submitted again, with the jobs waiting
for it; a new evaluation of a training still in the queue waits for that training's SLURM job. When squeue
cannot be asked, no job that may still be in the queue is submitted again (a duplicate training would meet
its run's lock and leave; a duplicate evaluation would run twice). ``force`` (``FORCE=1``) submits every job
that is not done, queued or not. The report job is submitted only when something was.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable, NamedTuple

from omegaconf import DictConfig

from skipless.training.scheduler import is_alive, squeue_states

from .experiment import FINETUNE
from .jobs import Job, is_done, marker_status, read_marker, write_marker
from .slurm_task import SlurmTask

MAYBE_QUEUED = ("submitted", "running", "preempted")  # marker statuses of a job that may still be in the queue
WAITING = ("PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SPECIAL_EXIT")  # not started


class Submission(NamedTuple):
    """What ``submit_slurm`` did: ``submitted``, ``{job name: submitit job}`` (``report`` included);
    ``queued``, ``{job name: SLURM job id}`` of the jobs left in the queue; ``unknown``, the jobs not
    submitted because squeue could not tell whether they (or the jobs they wait for) are still queued."""

    submitted: dict[str, Any]
    queued: dict[str, str]
    unknown: list[str]


def slurm_available() -> bool:
    return shutil.which("sbatch") is not None


def run_overrides(settings: DictConfig) -> list[str]:
    """What a training run needs to use the GPUs of its SLURM job."""
    return [f"train.devices={int(settings.gpus_per_node)}", f"train.num_nodes={int(settings.nodes)}"]


def _resources(job: Job, settings: DictConfig) -> dict[str, Any]:
    common = {"name": job.name, "slurm_partition": settings.partition, "cpus_per_task": int(settings.cpus_per_task),
              "mem_gb": int(settings.mem_gb), "slurm_signal_delay_s": int(settings.signal_delay_s)}
    if settings.account:
        common["slurm_account"] = settings.account
    if job.kind == "run" or job.entry == FINETUNE:  # a fine-tuning is a training: the run's nodes, GPUs and time
        gpus = int(settings.gpus_per_node)
        return {**common, "nodes": int(settings.nodes), "gpus_per_node": gpus, "tasks_per_node": gpus,
                "timeout_min": int(settings.run_minutes)}
    return {**common, "nodes": 1, "gpus_per_node": 1, "tasks_per_node": 1, "timeout_min": int(settings.eval_minutes)}


def _executor(folder: Path, cluster: str, settings: DictConfig) -> Any:
    import submitit

    return submitit.AutoExecutor(folder=folder / "slurm" / "%j", cluster=cluster,
                                 slurm_max_num_timeout=int(settings.max_requeues))


def _this_config(folder: Path, job: Job) -> dict[str, Any] | None:
    """The job's marker when it is this very config's (another config's says nothing about this job)."""
    marker = read_marker(folder, job)
    return marker if marker and marker.get("config_hash") == job.config_hash else None


def _why(marker: dict[str, Any] | None, old: str | None, state: str | None, listed: bool, force: bool,
         after_new: str | None) -> str:
    """Why a job that has been submitted or run before is submitted again (the ``[resubmitted]`` line)."""
    status = marker_status(marker) if marker else None
    if old is None:
        return f"marked {status}"
    if force and is_alive(state):
        return f"FORCE=1; its job {old} is still {state}"
    if after_new is not None and is_alive(state):
        return f"its job {old} waited for {after_new}'s job, which ended"
    if listed:
        return f"its job {old} ended {state}" if state else f"its job {old} left the queue"
    return f"its job {old} was marked {status}"


def submit_slurm(folder: Path, jobs: list[Job], settings: DictConfig, report: Callable[[], Any] | None = None,
                 cluster: str = "slurm", say: Callable[[str], None] = print, force: bool = False) -> Submission:
    """Submit, in dependency order, every job that is not done and not in the queue (module docstring), saying
    per job what it found or did; ``report`` is submitted after them when anything was. ``cluster``: submitit's
    (``slurm``, or ``debug`` to run the same functions in this process when each job's ``result()`` is asked).
    ``force``: submit every job that is not done, also those still queued or running."""
    markers = {job.name: _this_config(folder, job) for job in jobs}
    done = {job.name for job in jobs if is_done(folder, job)}
    named = {n: str(m["slurm_job"]) for n, m in markers.items() if m and m.get("slurm_job") and n not in done}
    states = squeue_states(named.values())  # one question for every job: {} when none is named
    ids: dict[str, str] = {}  # the SLURM job of each job in the queue, which the jobs waiting for it name
    submitted: dict[str, Any] = {}
    queued: dict[str, str] = {}
    unknown: list[str] = []
    for job in jobs:
        if job.name in done:
            say(f"[done] {job.name}")
            continue
        marker, old = markers[job.name], named.get(job.name)
        state = (states or {}).get(old) if old else None
        after_new = next((d for d in job.depends if d in submitted), None)  # its old job waits on an ended one
        if old and not force and after_new is None:
            if states is None and marker_status(marker) in MAYBE_QUEUED:
                unknown.append(job.name)
                say(f"[unknown] {job.name}: SLURM job {old}, marked {marker_status(marker)} (squeue did not answer)")
                continue
            if is_alive(state):
                ids[job.name] = queued[job.name] = old
                say(f"[{'queued' if state in WAITING else 'running'}] {job.name}: SLURM job {old} ({state})")
                continue
        held = next((d for d in job.depends if d in unknown), None)
        if held is not None:
            unknown.append(job.name)
            say(f"[held] {job.name}: waits for {held}, whose SLURM job squeue could not tell")
            continue
        after = [ids[d] for d in job.depends if d in ids]  # a dependency already done needs no wait
        params = _resources(job, settings)
        if after:
            params["slurm_additional_parameters"] = {"dependency": "afterok:" + ":".join(after),
                                                     "kill-on-invalid-dep": "yes"}
        executor = _executor(folder, cluster, settings)
        executor.update_parameters(**params)
        new = executor.submit(SlurmTask(settings.signal_delay_s), folder, job)
        ids[job.name] = str(new.job_id)
        submitted[job.name] = new
        write_marker(folder, job, "submitted", slurm_job=ids[job.name])
        waits = f", after {', '.join(after)}" if after else ""
        if marker is None:
            say(f"[submitted] {job.name}: SLURM job {new.job_id}{waits}")
        else:
            why = _why(marker, old, state, states is not None, force, after_new)
            say(f"[resubmitted] {job.name}: SLURM job {new.job_id}{waits} ({why})")
    if unknown:
        say(f"squeue did not answer, so {len(unknown)} jobs that may still be queued or running (or wait for one "
            "that may) were not submitted again; run the same make paper once squeue answers, or with FORCE=1 to "
            "submit them anyway (which may duplicate a job that is still running)")
    if force and submitted:
        say("FORCE=1: every job that was not done was submitted, also those still queued or running: a duplicate "
            "training finds its run's lock held and leaves the run to the job that holds it; a duplicate "
            "evaluation runs twice into the same folder")
    if report is not None and submitted:
        executor = _executor(folder, cluster, settings)
        executor.update_parameters(name="report", slurm_partition=settings.partition, nodes=1, tasks_per_node=1,
                                   cpus_per_task=1, timeout_min=30,
                                   slurm_additional_parameters={"dependency": "afterany:" + ":".join(ids.values())})
        submitted["report"] = executor.submit(report)
        say(f"[submitted] report: SLURM job {submitted['report'].job_id}, after every other job")
    return Submission(submitted, queued, unknown)
