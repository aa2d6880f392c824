"""Submitting an experiment's jobs to a SLURM cluster through submitit (as DINO's and DINOv2's
``run_with_submitit.py`` do), instead of a scheduler of our own.

Every job that is not done becomes one SLURM job running ``slurm_task.SlurmTask`` (``runner.run_job``, the
function the local runner calls, made checkpointable: a training stopped at its time limit or pre-empted is
requeued by submitit, ``slurm.max_requeues`` times at most, and continues from its checkpoint). A training run is a multi-node job: ``nodes`` x ``gpus_per_node`` tasks, one per
GPU, and Lightning reads the SLURM environment inside each task (``train.devices`` and
``train.num_nodes`` are set to match, and are part of the run's identity: they set the accumulation steps
of a recipe's ``train.global_batch``, or the global batch where it is null).
A fine-tuning evaluation (``make finetune``) is a training too and gets the same resources; any other
evaluation is a one-GPU job that waits for its training run (``--dependency=afterok:<id>``, and
``--kill-on-invalid-dep=yes``: SLURM cancels it if that training fails rather than leave it pending for
ever); a last, GPU-less job writes the report once every other job has ended (``afterany``). ``make paper``
returns after submitting; running it again later skips the jobs that are done, submits again the
ones that failed, and writes the report.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from .experiment import FINETUNE
from .jobs import Job, is_done, write_marker
from .slurm_task import SlurmTask


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


def submit_slurm(folder: Path, jobs: list[Job], settings: DictConfig, report: Callable[[], Any] | None = None,
                 cluster: str = "slurm", say: Callable[[str], None] = print) -> dict[str, Any]:
    """Submit every job that is not done, in dependency order; returns ``{job name: submitit job}``
    (``report``: the report job, when ``report`` is given). ``cluster``: submitit's (``slurm``, or
    ``debug`` to run the same functions in this process when each job's ``result()`` is asked)."""
    ids: dict[str, str] = {}
    submitted_jobs: dict[str, Any] = {}
    for job in jobs:
        if is_done(folder, job):
            continue
        executor = _executor(folder, cluster, settings)
        params = _resources(job, settings)
        after = [ids[d] for d in job.depends if d in ids]  # a dependency already done needs no wait
        if after:
            params["slurm_additional_parameters"] = {"dependency": "afterok:" + ":".join(after),
                                                     "kill-on-invalid-dep": "yes"}
        executor.update_parameters(**params)
        submitted = executor.submit(SlurmTask(settings.signal_delay_s), folder, job)
        ids[job.name], submitted_jobs[job.name] = str(submitted.job_id), submitted
        write_marker(folder, job, "submitted", slurm_job=ids[job.name])
        say(f"[submitted] {job.name}: SLURM job {submitted.job_id}"
            + (f", after {', '.join(after)}" if after else ""))
    if report is not None and ids:
        executor = _executor(folder, cluster, settings)
        executor.update_parameters(name="report", slurm_partition=settings.partition, nodes=1, tasks_per_node=1,
                                   cpus_per_task=1, timeout_min=30,
                                   slurm_additional_parameters={"dependency": "afterany:" + ":".join(ids.values())})
        submitted_jobs["report"] = executor.submit(report)
        say(f"[submitted] report: SLURM job {submitted_jobs['report'].job_id}, after every other job")
    return submitted_jobs
