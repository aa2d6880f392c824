"""What the dry run says of a training job's (a run's or a fine-tuning's) global batch: images per device x devices x accumulation steps
(``skipless.reports.summary.describe_batch``), as the job would run on the cluster ``make paper`` chose.

A training job's devices are part of its overrides on SLURM (``slurm.run_overrides``: ``slurm.nodes`` x
``slurm.gpus_per_node``); a local job trains on the devices of its config (one). At the full scale on
this machine the line also says how the SLURM allocation of ``configs/paper.yaml`` would make the same
global batch, since the paper's recipes set theirs (``train.global_batch``: Table 1's 4096 is 8
accumulation steps of 64 images on each of 8 GPUs, 64 on one).
"""
from __future__ import annotations

from omegaconf import DictConfig

from skipless.config import ConfigError
from skipless.reports.summary import describe_batch
from skipless.devices.world import global_batch, world_size
from skipless.language.module import lm_context

from .experiment import FINETUNE, STEP_ENTRIES
from .jobs import Job, job_config
from .slurm import run_overrides


def is_training(job: Job) -> bool:
    """A job that trains, on a SLURM job of ``slurm.nodes`` x ``slurm.gpus_per_node``: a run, or a fine-tuning
    evaluation (``slurm.py``)."""
    return job.kind == "run" or job.entry == FINETUNE


def _batch(entry: str, overrides: list[str]) -> str:
    cfg = job_config(entry, overrides)
    try:
        shown = describe_batch(cfg)
    except ConfigError as err:  # the run would refuse it: the dry run says why, and goes on
        return f"refused on {world_size(cfg)} devices: {err}"
    if entry in STEP_ENTRIES:  # a language model: its windows of context tokens, and its optimizer steps
        context = lm_context(cfg.model)
        sequences = global_batch(cfg, world_size(cfg))
        how = shown.split(" = ", 1)[-1]
        shown = (f"{sequences} sequences ({how}) x {context:,} tokens = {sequences * context:,} tokens per step, "
                 f"{int(cfg.train.steps):,} steps")
    return shown


def batch_line(job: Job, cluster: str, scale: str, slurm: DictConfig) -> str:
    """``global batch 4096 = 64/device x 8 devices x 8 accumulation steps`` for a training ``job`` (a run or a
    fine-tuning: ``is_training``); on the local cluster at the full scale, followed by the same for the SLURM
    allocation of ``slurm``."""
    line = f"global batch {_batch(job.entry, list(job.overrides))}"
    if cluster == "local" and scale == "full":
        there = _batch(job.entry, [*job.overrides, *run_overrides(slurm)])
        nodes, gpus = int(slurm.nodes), int(slurm.gpus_per_node)
        line += (f" on this machine; on SLURM ({nodes} node{'s' if nodes > 1 else ''} x {gpus} GPUs, "
                 f"configs/paper.yaml slurm:): {there}")
    return line
