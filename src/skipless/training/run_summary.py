"""``RunSummary``: what a run says of its data and how it ended, in its log and in ``<run>/summary.json``.

The files come from the training loader's ``SkipTally`` (``training/data.py``): a flag per image, set in
whichever worker met it, combined over ranks by their maximum. Each unreadable file (skipped) and each
small one (``data.min_image_side``: trained on) is named once in the run, at the end of the epoch that
met it, with the reason. The lists live in every checkpoint (``state_dict``), so a resumed run neither
forgets the files named before it stopped nor names them again: a checkpoint first names what was met
since the last naming, so that it records only named files and the log never says more than it. The
epoch-end checkpoint (``EpochCheckpoint``, before this callback in the list) thus names the epoch's files;
a mid-epoch one (``train.checkpoint_every_minutes``) names those met so far in its epoch.

The run's wall time (``wall``: seconds, hours, days, and the hardware it ran on, ``<world size> x <device
name>``) counts from the start of fitting (after the model, data and checkpoint are set up) to the summary,
summed over resumes: a checkpoint holds the seconds up to its own writing, so the time after a run's last
checkpoint before it was stopped is not counted (its steps are trained again, and counted then). Seeds/003's
Table 1 compares these days with the paper's (``configs/experiments/graying-eps.yaml``).
"""
from __future__ import annotations

import json
from pathlib import Path
from time import monotonic
from typing import Any

import lightning.pytorch as pl
import torch

from ..atomic import atomic_write
from .collapse import CollapseMonitor
from .data import SMALL, SkipTally


class RunSummary(pl.Callback):
    """Names each unreadable image skipped and each small image trained on, once (over every worker, epoch,
    rank and resume), at the end of the epoch that met it, says the totals at the end of the run, and
    writes ``<run>/summary.json`` (atomically) when the fit ends or stops on an error: status, epochs
    done, steps, skipped images with their files and reasons, small images and their files, final loss, the
    precision that ran with the reason it was chosen, ``collapsed``: the reason the run's ``CollapseMonitor``
    gave at its last check, or null, a supervised run's last validation (``val``), the rank monitor's last
    measurement (``rank``) when it ran, and ``wall``: the fit's wall time summed over resumes and the hardware
    (module docstring).
    """

    def __init__(self, run_dir: str | Path, precision: str | None = None) -> None:
        self.path = Path(run_dir) / "summary.json"
        self.precision = precision  # the precision that ran and why (training/precision.py)
        self.epochs_done, self.final_loss = 0, None
        self.skipped_files: list[str] = []  # unreadable, in the order they were named
        self.skipped_reasons: dict[str, str] = {}  # file -> why it was skipped
        self.small_files: list[str] = []  # readable but small, in the order they were named
        self.small_reason = ""  # "smaller than data.min_image_side=32 px on a side"
        self._trainer: pl.Trainer | None = None
        self.seconds_before = 0.0  # the wall seconds of the attempts before this one, from the checkpoint
        self._started: float | None = None  # monotonic() at this attempt's start of fitting

    @property
    def skipped(self) -> int:
        return len(self.skipped_files)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = trainer  # state_dict has no trainer argument, and needs the loader's flags

    def _met_so_far(self, trainer: pl.Trainer, collective: bool = True) -> list[tuple[str, str, bool]]:
        """(file, reason, small?) of every file flagged so far, sorted by index (all ranks with ``collective``)."""
        tally = getattr(trainer.train_dataloader, "dataset", None)
        met: list[tuple[str, str, bool]] = []
        if isinstance(tally, SkipTally):
            flags = tally.flags
            if collective:  # a file's flag is the same wherever it was met (SkipTally): the maximum combines
                flags = trainer.strategy.reduce(flags.to(trainer.strategy.root_device, torch.int32), reduce_op="max")
            flags = flags.cpu()
            for i in torch.nonzero(flags).flatten().tolist():
                met.append((tally.name(int(i)), tally.reason(int(flags[i])), int(flags[i]) == SMALL))
        return met

    def _name_new(self, found: list[tuple[str, str, bool]]) -> tuple[list[str], list[str]]:
        """Record the files of ``found`` not named yet; returns (new unreadable, new small) files."""
        known = set(self.skipped_files) | set(self.small_files)
        new_bad, new_small = [], []
        for name, reason, small in found:
            if name in known:
                continue
            known.add(name)
            if small:
                new_small.append(name)
                self.small_reason = reason
            else:
                new_bad.append(name)
                self.skipped_reasons[name] = reason
        self.skipped_files += new_bad
        self.small_files += new_small
        return new_bad, new_small

    def _name_and_say(self, trainer: pl.Trainer) -> None:
        """Name the files met since the last naming, in the epoch's lines (rank 0 prints; every rank reduces)."""
        bad, small = self._name_new(self._met_so_far(trainer))
        if not trainer.is_global_zero:
            return
        epoch = trainer.current_epoch + 1
        if bad:
            print(f"epoch {epoch}: {len(bad)} unreadable images skipped ({self.skipped} in this run so far), each "
                  "counted and named once:\n" + self._lines(bad), flush=True)
        if small:
            print(f"epoch {epoch}: {len(small)} images {self.small_reason} met ({len(self.small_files)} in this run "
                  "so far), trained on, each named once:\n" + "\n".join(f"  {f}" for f in small), flush=True)

    def state_dict(self) -> dict[str, Any]:
        """The files named so far, after naming those met since the last naming (module docstring), as lists
        of strings: Lightning may load checkpoints with ``weights_only=True``. Every rank writes a checkpoint
        together (``EpochCheckpoint``), so the flags are reduced over ranks here as at an epoch end."""
        if self._trainer is not None:
            self._name_and_say(self._trainer)
        return {"skipped": [[f, self.skipped_reasons.get(f, "")] for f in self.skipped_files],
                "small": list(self.small_files), "small_reason": self.small_reason, "wall_seconds": self.wall_seconds()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.skipped_files = [f for f, _ in state.get("skipped", [])]
        self.skipped_reasons = {f: reason for f, reason in state.get("skipped", [])}
        self.small_files = list(state.get("small", []))
        self.small_reason = state.get("small_reason", "")
        self.seconds_before = float(state.get("wall_seconds", 0.0))  # 0: a checkpoint from before it was kept

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.epochs_done = trainer.current_epoch  # a resumed run starts after its finished epochs
        self._started = monotonic()

    def wall_seconds(self) -> float:
        """The fit's wall seconds so far: the earlier attempts' (from the checkpoint) and this one's."""
        return self.seconds_before + (monotonic() - self._started if self._started is not None else 0.0)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if isinstance(loss, torch.Tensor):
            self.final_loss = loss.detach()  # read once, when the summary is written

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._name_and_say(trainer)  # what the epoch's checkpoint did not name already
        self.epochs_done = trainer.current_epoch + 1
        for logger in trainer.loggers:
            logger.log_metrics({"watch/data/skipped_images": float(self.skipped)}, step=trainer.global_step)

    def _lines(self, files: list[str]) -> str:
        return "\n".join(f"  {f} ({self.skipped_reasons[f]})" for f in files)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        bad, small = self._name_new(self._met_so_far(trainer))
        if trainer.is_global_zero:
            for f in bad:  # met after the last epoch end (workers prefetching past a stopped epoch)
                print(f"  unreadable image skipped: {f} ({self.skipped_reasons[f]})", flush=True)
            for f in small:
                print(f"  image {self.small_reason} trained on: {f}", flush=True)
            if self.skipped:
                print(f"run end: {self.skipped} unreadable images skipped in all, each once (named above and in "
                      f"{self.path})", flush=True)
            if self.small_files:
                print(f"run end: {len(self.small_files)} images {self.small_reason} trained on, each named once (above "
                      f"and in {self.path})", flush=True)
            self._write(trainer, "finished")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if trainer.is_global_zero:  # no collective here: another rank may be gone
            self._name_new(self._met_so_far(trainer, collective=False))
            try:
                self._write(trainer, "interrupted" if isinstance(exception, KeyboardInterrupt)
                            else getattr(exception, "summary_status", "failed"))  # preemption.RunPreempted: preempted
            except OSError:  # a full disk: the run's own error says so, and must not be hidden by this one
                pass

    def _write(self, trainer: pl.Trainer, status: str) -> None:
        summary = {"status": status, "epochs_done": self.epochs_done, "epochs": trainer.max_epochs,
                   "steps": trainer.global_step, "skipped_images": self.skipped, "skipped_files": self.skipped_files,
                   "skipped_reasons": self.skipped_reasons, "small_images": len(self.small_files),
                   "small_files": self.small_files, "final_loss": self._final_loss()}
        if self.precision:
            summary["precision"] = self.precision
        monitor = next((c for c in trainer.callbacks if isinstance(c, CollapseMonitor)), None)
        summary["collapsed"] = monitor.reason if monitor is not None else None
        last_val = getattr(trainer.lightning_module, "last_val", None)  # a supervised run's last validation
        if last_val:
            summary["val"] = last_val
        rank = next((c.last_rank for c in trainer.callbacks if getattr(c, "last_rank", None)), None)
        if rank:  # the rank monitor's last measurement (rank_monitor.py): seeds/002 Fig. 4a reads it at convergence
            summary["rank"] = rank
        seconds = round(self.wall_seconds(), 1)
        summary["wall"] = {"seconds": seconds, "hours": round(seconds / 3600, 4), "days": round(seconds / 86400, 5),
                           "hardware": _hardware(trainer)}
        text = json.dumps(summary, indent=1) + "\n"
        atomic_write(self.path, lambda tmp: Path(tmp).write_text(text))

    def _final_loss(self) -> float | None:
        if self.final_loss is None:
            return None
        try:
            return float(self.final_loss)
        except RuntimeError:  # a device that failed (the run's error) cannot be read: the summary still says so
            return None


def _hardware(trainer: pl.Trainer) -> str:
    """``8 x NVIDIA H100 80GB HBM3``: the run's world size and its device's name (``1 x CPU`` on a CPU)."""
    device = getattr(getattr(trainer, "strategy", None), "root_device", torch.device("cpu"))
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type.upper()
    return f"{getattr(trainer, 'world_size', 1)} x {name}"
