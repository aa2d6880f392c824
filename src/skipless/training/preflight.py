"""Checks of what a run will write to and resume from, made before it writes or loads anything.

``check_run_folder`` finds the nearest existing folder of ``runs/<name>`` and refuses one that is
not a folder or not writable (mkdir would fail later, after the data was loaded).
``read_resume_checkpoint`` opens ``last.ckpt`` (memory-mapped: its tensors are not read) and turns
a truncated or foreign file into one sentence that names it and says what to do;
``check_resume_world`` refuses to resume it with another number of processes than wrote it.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from ..config import ConfigError
from ..errors import SkiplessError
from ..devices.world import devices_of, world_size
from .run_folder import ResumeMismatchError


class CheckpointUnreadableError(SkiplessError, ValueError):
    """The checkpoint a run would resume from is truncated or is not a Lightning checkpoint."""


def check_run_folder(run_dir: Path, key: str = "run.root") -> None:
    """Refuse a run folder that cannot be created or written, naming ``key`` and the blocking path."""
    run_dir = Path(run_dir).absolute()
    existing = next(p for p in (run_dir, *run_dir.parents) if os.path.lexists(p))
    if not existing.is_dir():
        raise ConfigError(f"{key} cannot hold the run folder {run_dir}: {existing} is a file, not a folder; "
                          f"expected a path whose parts are folders (set {key}= elsewhere)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{key} cannot hold the run folder {run_dir}: {existing} is not writable by this "
                          f"user; expected a writable folder (set {key}= elsewhere)")


def read_resume_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint a resumed run starts from (tensors memory-mapped), or one clear error."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception as err:  # truncated (no zip directory), not a torch file, or unpicklable
        text = str(err).strip()
        reason = text.splitlines()[0].split(". ")[0] if text else type(err).__name__  # torch adds advice
        raise CheckpointUnreadableError(
            f"the checkpoint to resume, {path}, cannot be read ({reason}); restore a good copy of it, "
            f"or start anew without RESUME=1 under another run.name=") from err
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "global_step" not in ckpt:
        raise CheckpointUnreadableError(
            f"the checkpoint to resume, {path}, is not a Lightning checkpoint of a pretraining (no state_dict "
            f"and global_step); restore a good copy of it, or start anew without RESUME=1 under another run.name=")
    return ckpt


def check_resume_world(ckpt: Mapping[str, Any], cfg: DictConfig, path: Path) -> None:
    """Refuse to resume ``ckpt`` with another world size than the one that wrote it (``RNGState`` records
    it): the global batch, hence the peak lr and the steps of every schedule, and each process's random
    state belong to it, so no other world size continues the run exactly. A checkpoint written before
    the world size was recorded is not checked."""
    saved, world = ckpt.get("world_size"), world_size(cfg)
    if saved is None or int(saved) == world:
        return
    devices = f"{devices_of(cfg)} (auto)" if cfg.train.devices == "auto" else cfg.train.devices
    raise ResumeMismatchError(
        f"the checkpoint to resume, {path}, was written by {saved} processes and this resume would run {world} "
        f"(train.devices={devices} x train.num_nodes={cfg.train.num_nodes}); expected {saved} again, since the "
        f"global batch, the lr, the schedules and each process's random state belong to it: resume with GPUS= "
        f"and NODES= (train.devices x train.num_nodes) giving {saved}, or start a new run under another run.name")
