"""What a training run is, resolved once: the plan an entry point makes from its checked config and hands to
the trainer, its callbacks and its header, so none of them derives the devices, the strategy, the precision or the
threads again (issue 36: these facts were re-derived at 15 call sites in 7 files).

A plan is frozen and made before anything is written: the run folder it names is not created here (the
entry point takes it under its lock, ``run_lock.py``, and only then decides start or resume,
``run_start.prepare_run``, which needs the folder's contents). The config stays in the plan for the
method's own keys and the recipe values, which only the method and the trainer read.

- ``devices``, ``nodes``: processes per node (``world.devices_of``: ``train.devices=auto`` is every visible
  GPU) and nodes;
- ``strategy``, ``sync_batchnorm``: how Lightning joins the processes (``strategy_of``, ``sync_batchnorm_of``
  below);
- ``precision`` and ``precision_why``: the Lightning precision chosen for ``train.precision`` and the reason in
  words (``precision.choose_precision``), ``autocast_device`` its autocast device;
- ``threads``: torch's CPU threads per process (``world.training_threads``);
- ``loader``: the host memory of its training loader (``devices/host_memory.py``, measured by
  ``training.data.loader_memory``), which the header states; None where the entry point measured none.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from ..config import ConfigError
from ..devices.host_memory import LoaderMemory
from ..devices.world import devices_of, runs_on_cuda, training_threads, world_size
from .precision import autocast_device, choose_precision


def strategy_of(cfg: DictConfig) -> str:
    """``train.strategy``, or on ``auto`` DDP when more than one process trains."""
    if cfg.train.strategy != "auto":
        return str(cfg.train.strategy)
    return "ddp" if world_size(cfg) > 1 else "auto"


def sync_batchnorm_of(cfg: DictConfig) -> bool:
    """Whether Lightning turns every BatchNorm into a SyncBatchNorm: under DDP on GPUs, as the official
    DINO does (``main_dino.py``: ``convert_sync_batchnorm`` of student and teacher when they have
    BatchNorm, e.g. ``dino.use_bn_in_head``), so each layer normalises by the statistics of the global
    batch and not of one process's share. A model without BatchNorm is left as it is.

    torch's SyncBatchNorm runs on GPUs only (it raises on a CPU tensor once a process group exists),
    so DDP on the CPU keeps plain BatchNorm; ``refuse_unsynced_batchnorm`` refuses that case."""
    return world_size(cfg) > 1 and runs_on_cuda(cfg)


def refuse_unsynced_batchnorm(cfg: DictConfig, key: str) -> None:
    """Refuse the BatchNorm that ``key=true`` switches on where DDP cannot synchronise it (several CPU
    processes): called by an entry point whose key is true, before anything is written."""
    world = world_size(cfg)
    if world > 1 and not sync_batchnorm_of(cfg):
        raise ConfigError(f"{key}=true with {world} CPU processes (train.devices x train.num_nodes) would normalise "
                          "each process's share of the batch on its own, since torch's SyncBatchNorm runs on GPUs "
                          f"only; expected one process on the CPU (train.devices=1 train.num_nodes=1), GPUs, "
                          f"or {key}=false")


@dataclass(frozen=True)
class RunPlan:
    """One training run, resolved (module docstring)."""

    cfg: DictConfig
    run_dir: Path
    devices: int
    nodes: int
    strategy: str
    sync_batchnorm: bool
    precision: str
    precision_why: str
    autocast_device: str
    threads: int
    loader: LoaderMemory | None = None

    @property
    def described_precision(self) -> str:
        """``bf16-mixed (auto: ...)``: what the header and ``summary.json`` say."""
        return f"{self.precision} ({self.precision_why})"


def plan_run(cfg: DictConfig, run_dir: Path) -> RunPlan:
    """The plan of a checked config training into ``run_dir`` (its ``loader``, measured by the entry point, is
    set with ``dataclasses.replace``)."""
    precision, why = choose_precision(cfg)
    return RunPlan(cfg=cfg, run_dir=Path(run_dir), devices=devices_of(cfg), nodes=int(cfg.train.num_nodes),
                   strategy=strategy_of(cfg), sync_batchnorm=sync_batchnorm_of(cfg), precision=precision,
                   precision_why=why, autocast_device=autocast_device(cfg), threads=training_threads(cfg))
