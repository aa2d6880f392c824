"""Callbacks of a training run, for any method: the divergence guard, RNG state in checkpoints, epoch-end
checkpoints, the backbone export, the k-NN monitor (pretraining's), the progress bar, the run summary (skipped and
small images, final loss, collapse: ``run_summary.py``, imported here). None reads a tensor back to
the host on the steps between two logging steps (``train.log_every_n_steps``): such a read waits for
the device to finish its queued work."""
from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable

import lightning.pytorch as pl
import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import OmegaConf

from ..analysis.knn import knn_accuracy
from ..atomic import DiskFullError, atomic_write, size_text
from .divergence import DivergenceError, divergence_message, raise_if_loss_diverged
from ..models import create_vit, save_backbone
from ..reports.summary import module_peak_lr
from ..devices.world import isolated_rng
from .run_summary import RunSummary  # noqa: F401  (the run summary lives in its own module; imported from here)


class DivergenceGuard(pl.Callback):
    """Stops the run at an epoch end when a loss since the last reading step or a parameter is
    non-finite, before anything is exported or checkpointed (it must come first in the callback
    list), so the last good checkpoint survives. The losses are recorded by ``stop_if_diverged``
    in each module's ``training_step`` (``skipless/training/divergence.py`` states the rule)."""

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        raise_if_diverged(trainer, pl_module)


def raise_if_diverged(trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
    """``DivergenceError`` when a loss since the last reading step or a parameter is non-finite on any rank: read
    before every checkpoint (epoch ends, and mid-epoch ones: ``preemption.py``), by every rank together."""
    raise_if_loss_diverged(pl_module)
    bad = next((n for n, p in pl_module.named_parameters() if not torch.isfinite(p).all()), None)
    if trainer.strategy.reduce_boolean_decision(bad is not None, all=False):
        raise DivergenceError(divergence_message(pl_module.cfg, trainer.global_step,
                                                 f"non-finite parameter {bad or 'on another rank'}",
                                                 module_peak_lr(pl_module), Path(trainer.default_root_dir)))


class RNGState(pl.Callback):
    """Stores every process's Python, NumPy, torch CPU and own-GPU RNG states in every checkpoint, and
    on resume each process restores its own, so a resumed run draws the same crops and shuffles on
    every rank as an uninterrupted one.

    ``state_dict`` runs on every rank (Lightning's ``dump_checkpoint``, called by ``EpochCheckpoint``
    on all of them), so the ranks' states are gathered there, in rank order, for rank 0 to write. The
    checkpoint also records the world size they were gathered at (``checkpoint["world_size"]``): a
    resume at another world size is refused before it starts (``preflight.check_resume_world``), since
    the states, the global batch, the lr and the schedules all belong to that world size. A checkpoint
    written before per-rank states holds one state (rank 0's), which every rank restores.
    """

    def __init__(self) -> None:
        self.device = torch.device("cpu")

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.device = trainer.strategy.root_device  # this rank's GPU, whose CUDA state is its own

    def state_dict(self) -> dict[str, Any]:
        # Only tensors, ints, strings, lists and tuples: Lightning loads checkpoints with weights_only=True.
        name, keys, pos, has_gauss, cached = np.random.get_state()
        own = {"python": random.getstate(), "torch": torch.get_rng_state(),
               "numpy": (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached))}
        if self.device.type == "cuda":
            own["cuda"] = torch.cuda.get_rng_state(self.device)
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return {"ranks": [own]}
        ranks: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(ranks, own)
        return {"ranks": ranks}

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        checkpoint["world_size"] = trainer.world_size

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "ranks" not in state:  # an older checkpoint: rank 0's state, CUDA states of every visible GPU
            own = dict(state)
            cuda = own.pop("cuda", [])
            if self.device.type == "cuda" and (self.device.index or 0) < len(cuda):
                own["cuda"] = cuda[self.device.index or 0]
        else:
            own = state["ranks"][dist.get_rank() if dist.is_available() and dist.is_initialized() else 0]
        random.setstate(own["python"])
        name, keys, pos, has_gauss, cached = own["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
        torch.set_rng_state(own["torch"])
        if "cuda" in own and self.device.type == "cuda":
            torch.cuda.set_rng_state(own["cuda"], self.device)


class ExportBackbone:
    """The module's ``exported_backbone()`` (DINO: the teacher's; supervised: the classifier's backbone, timm
    names + create_vit arguments) for ``<run>/backbone.pt`` at every epoch end, and also for
    ``<run>/backbone-epoch<N>.pt`` at each of ``epochs`` (the paper evaluates epochs 200 and 300:
    ``train.export_epochs``). ``EpochCheckpoint`` calls it: the files are staged before the epoch's
    checkpoint and put in place only once the checkpoint is written, so ``backbone.pt`` always holds the
    epoch of ``last.ckpt``, also when the disk fills in between."""

    def __init__(self, run_dir: str | Path, epochs: Iterable[int] = ()) -> None:
        self.run_dir = Path(run_dir)
        self.epochs = {int(e) for e in epochs}

    def stage(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> list[tuple[Path, Path]]:
        """Write this epoch's backbone files under staging names; returns (staged, final) pairs (rank 0 only)."""
        if not trainer.is_global_zero:
            return []
        epoch = trainer.current_epoch + 1
        # and what the module records beside the weights (the language model: its tokenizer)
        extra = {"epoch": epoch, "step": trainer.global_step, **getattr(pl_module, "backbone_extra", dict)()}
        backbone = pl_module.exported_backbone()
        names = ["backbone.pt"] + ([f"backbone-epoch{epoch}.pt"] if epoch in self.epochs else [])
        staged: list[tuple[Path, Path]] = []
        try:
            for name in names:
                staged.append((self.run_dir / f".{name}.staged", self.run_dir / name))
                save_backbone(staged[-1][0], backbone, extra=extra)
        except DiskFullError as err:  # said of the file the user knows
            discard(staged)
            raise DiskFullError(str(err), staged[-1][1], err.needed, err.free) from None
        except BaseException:
            discard(staged)
            raise
        return staged


def discard(staged: list[tuple[Path, Path]]) -> None:
    for tmp, _ in staged:
        tmp.unlink(missing_ok=True)


class EpochCheckpoint(pl.Callback):
    """Writes ``<dir>/last.ckpt`` at every epoch end (and ``epoch<N>.ckpt`` when ``keep_all``), and with it
    the backbone files of ``exports`` (``ExportBackbone``), which are put in place only after the checkpoint;
    ``save_mid_epoch`` writes ``last.ckpt`` in the middle of an epoch (``preemption.py``: every
    ``train.checkpoint_every_minutes`` and on a signal), without exports: ``backbone.pt`` stays the teacher of
    the last finished epoch.

    Lightning's ``ModelCheckpoint`` only refreshes ``last.ckpt`` together with a top-k save; this
    states the rule plainly. Files are written atomically by ``AtomicCheckpointIO``; every rank
    calls ``save_checkpoint`` (rank 0 writes). A full disk (``atomic.DiskFullError``) ends the run with
    one sentence: what could not be written, the space it needs, the last good checkpoint and how to go on.
    """

    def __init__(self, dirpath: str | Path, keep_all: bool = False, exports: ExportBackbone | None = None) -> None:
        self.dirpath, self.keep_all, self.exports = Path(dirpath), keep_all, exports
        self.good: str | None = None  # where the last checkpoint written stands ("epoch 3"; None: none yet)
        self.exported_epoch: int | None = None  # the epoch backbone.pt holds

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        """Every Lightning checkpoint carries the run's resolved config, whatever the method (``skipless_config``;
        a module without a ``cfg``, a test's, writes none)."""
        cfg = getattr(pl_module, "cfg", None)
        if cfg is not None:
            checkpoint["skipless_config"] = OmegaConf.to_container(cfg, resolve=True)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if (self.dirpath / "last.ckpt").is_file():
            self.good = f"step {trainer.global_step}"
            self.exported_epoch = trainer.current_epoch

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        last, epoch = self.dirpath / "last.ckpt", trainer.current_epoch + 1
        try:
            staged = self.exports.stage(trainer, pl_module) if self.exports else []
            try:
                trainer.save_checkpoint(last, weights_only=False)
            except BaseException:
                discard(staged)
                raise
            for tmp, final in staged:  # renames: they need no space
                os.replace(tmp, final)
            self.good, self.exported_epoch = f"epoch {epoch}", epoch
            if self.keep_all and trainer.is_global_zero:  # a copy: the state is serialised only once
                atomic_write(self.dirpath / f"epoch{epoch:03d}.ckpt", lambda tmp: shutil.copyfile(last, tmp),
                             needed=last.stat().st_size)
        except DiskFullError as err:  # the space free now, once the staged files are gone too
            err.free = shutil.disk_usage(err.path.parent).free if err.path else err.free
            raise DiskFullError(self._disk_full(err, f"epoch {epoch}"), err.path, err.needed, err.free) from None

    def save_mid_epoch(self, trainer: pl.Trainer) -> None:
        """``last.ckpt`` now, in the middle of an epoch (every rank calls it; the class docstring)."""
        where = f"step {trainer.global_step} (in epoch {trainer.current_epoch + 1})"
        try:
            trainer.save_checkpoint(self.dirpath / "last.ckpt", weights_only=False)
        except DiskFullError as err:
            raise DiskFullError(self._disk_full(err, where), err.path, err.needed, err.free) from None
        self.good = where

    def _disk_full(self, err: DiskFullError, where: str) -> str:
        what = f"could not write {err.path} of {where} (it needs about {size_text(err.needed)}, " \
               f"{size_text(err.free)} is free there)"
        if self.good is None:
            return (f"the disk is full: {what}; no checkpoint was written yet, so there is nothing to resume: free "
                    "space, then start the run again with the same command (this attempt's files move to attempts/)")
        exported = ("backbone.pt is of the same epoch" if self.good.startswith("epoch") else
                    f"backbone.pt is of epoch {self.exported_epoch}, the last finished one" if self.exported_epoch
                    else "no backbone.pt was exported yet")
        return (f"the disk is full: {what}; the last good checkpoint is {self.dirpath / 'last.ckpt'} of "
                f"{self.good}, and {exported}: free space, then continue with RESUME=1")


class KNNMonitor(pl.Callback):
    """k-NN top-1 accuracy of the exported backbone's CLS features (``watch/knn/<label>``: DINO's teacher,
    MAE's encoder), every ``every`` epochs
    and at the last one; a freshly initialised backbone of the same architecture is scored once
    at the start, and drawn on the same chart: the same tag in the sub-run ``tb/random-init``, at the start
    and again at every step the backbone is scored (a flat line under the curve; TensorBoard overlays
    the runs of a tag, not two tags). ``random_backbone`` builds
    that backbone (the pretraining's own factory, so the floor has the init training starts from);
    without it, ``create_vit`` of the teacher's arguments."""

    def __init__(self, train_batches: Callable[[], Iterable], val_batches: Callable[[], Iterable],
                 every: int = 1, k: int = 20, num_classes: int | None = None,
                 random_backbone: Callable[[], torch.nn.Module] | None = None, label: str = "teacher") -> None:
        self.train_batches, self.val_batches = train_batches, val_batches
        self.label = label  # what exported_backbone() is, in the tag and the line (DINO: teacher; MAE: encoder)
        self.random_backbone = random_backbone
        self.every, self.k, self.num_classes = every, k, num_classes
        self.history: list[tuple[int, float]] = []
        self.random_accuracy: float | None = None
        self._floor_writer: Any = None

    def _score(self, backbone, device) -> float:
        # On forked generators: the monitor must not change the crops or masks the training draws next, or
        # a resumed run (which skips this epoch's monitor) would see other ones than a straight one.
        with isolated_rng(device):
            return knn_accuracy(backbone, self.train_batches, self.val_batches, device, k=self.k,
                            num_classes=self.num_classes)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or self.random_accuracy is not None:
            return
        args = dict(pl_module.exported_backbone().skipless_args)
        with isolated_rng(pl_module.device):  # the seed must not reach the training's CPU or GPU draws
            torch.manual_seed(0)
            fresh = self.random_backbone() if self.random_backbone else create_vit(args.pop("arch"), **args)
            fresh = fresh.to(pl_module.device)
        self.random_accuracy = self._score(fresh, pl_module.device)
        self._log_floor(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch = trainer.current_epoch + 1
        last = epoch == trainer.max_epochs
        if not trainer.is_global_zero or not (last or (self.every and epoch % self.every == 0)):
            return
        acc = self._score(pl_module.exported_backbone(), pl_module.device)
        self.history.append((epoch, acc))
        _log_scalar(trainer, f"watch/knn/{self.label}", acc)
        self._log_floor(trainer)
        rnd = f" (random init: {self.random_accuracy:.3f})" if self.random_accuracy is not None else ""
        # Through the bar (tqdm.write): on a line of its own above it, not onto the end of its last redraw.
        pl_module.print(f"epoch {epoch}: k-NN top-1 of the {self.label} {acc:.3f}{rnd}")


    def _log_floor(self, trainer: pl.Trainer) -> None:
        """The random init's score under this monitor's tag, in ``<TensorBoard folder>/random-init``."""
        if self.random_accuracy is None:
            return
        folder = next((logger.log_dir for logger in trainer.loggers if isinstance(logger, TensorBoardLogger)), None)
        if folder is None:  # no TensorBoard: a tag of its own in whatever logs
            _log_scalar(trainer, "watch/knn/random", self.random_accuracy)
            return
        if self._floor_writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._floor_writer = SummaryWriter(str(Path(folder) / "random-init"))
        self._floor_writer.add_scalar(f"watch/knn/{self.label}", self.random_accuracy, trainer.global_step)
        self._floor_writer.flush()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._floor_writer is not None:
            self._floor_writer.close()
            self._floor_writer = None


def _log_scalar(trainer: pl.Trainer, name: str, value: float) -> None:
    for logger in trainer.loggers:
        logger.log_metrics({name: value}, step=trainer.global_step)


class ProgressBar(TQDMProgressBar):
    """Lightning's bar, moved every step, showing the logged ``train/loss``, read back from the device
    only at the steps Lightning logs (every ``train.log_every_n_steps``) and at an epoch's last batch.

    Lightning converts every ``prog_bar=True`` value to a number after each batch, whether shown or
    not: a host-device sync per step, which is why the modules log no ``prog_bar`` value."""

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch,
                           batch_idx: int) -> None:
        bar = self.train_progress_bar
        if bar.disable:
            return
        bar.update(batch_idx + 1 - bar.n)
        if trainer.global_step % max(trainer.log_every_n_steps, 1) == 0 or batch_idx + 1 == bar.total:
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, int | str | float]:
        metrics = super().get_metrics(trainer, pl_module)
        loss = trainer.callback_metrics.get("train/loss")
        if loss is not None:
            metrics["loss"] = float(loss)
        return metrics
