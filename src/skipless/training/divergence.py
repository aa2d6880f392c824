"""The per-step loss check of every training module, and the sentence a diverged run ends with.

The rule, so that the check costs no host-device sync on the steps between (issue 26, item 14):

* every step, ``stop_if_diverged`` adds the loss to a record kept on the loss's device: the step and
  value of the FIRST non-finite loss (a few tiny kernels, nothing read back);
* the ranks read that record together, in one all-gather, every ``trainer.log_every_n_steps`` steps
  (the steps at which Lightning reads the logged metrics back anyway, ``train.log_every_n_steps``)
  and at every epoch end, where ``DivergenceGuard`` runs before anything is exported or
  checkpointed. Every rank reaches the same reads, so none waits alone in the collective.

A run whose loss turns non-finite therefore trains at most ``log_every_n_steps - 1`` more steps
before it stops, and none of them is ever saved (checkpoints and backbones are written at epoch
ends only, after the guard); its sentence names the first non-finite step and its loss, whichever
rank saw it. Without a trainer (a module stepped by hand) every step is read at once.

Every training module (DINO's, the supervised classifier) and the trainer's callbacks import this
module, which imports none of them: it sits below the methods and ``training/``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig

from ..errors import SkiplessError
from ..reports.summary import lr_key, lr_rule, module_peak_lr


class DivergenceError(SkiplessError, RuntimeError):
    """The loss or the parameters became non-finite: the run stopped, its last good checkpoint is kept."""


class LossWatch:
    """The first non-finite loss of a run, kept on the loss's device as float32 ``(step, loss)``,
    step -1 while every loss was finite (float32 holds every step below 2**24 exactly)."""

    def __init__(self) -> None:
        self.first: torch.Tensor | None = None

    def record(self, loss: torch.Tensor, step: int) -> None:
        """Queue the check of this step's loss; reads nothing back to the host."""
        loss = loss.detach().float().reshape(())
        first = torch.full((2,), -1.0, device=loss.device) if self.first is None else self.first.to(loss.device)
        fresh = (first[0] < 0) & ~torch.isfinite(loss)
        self.first = torch.where(fresh, torch.stack((torch.full_like(loss, step), loss)), first)

    def first_bad(self, gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
                  device: torch.device | str = "cpu") -> tuple[int, float] | None:
        """The earliest ``(step, loss)`` recorded on any rank, or None: ``gather`` is the strategy's
        all-gather (every rank must call it at the same point); without it, this process's record."""
        mine = self.first if self.first is not None else torch.full((2,), -1.0, device=device)
        records = (gather(mine) if gather is not None else mine).reshape(-1, 2).tolist()  # the one host read
        bad = [(int(step), loss) for step, loss in records if step >= 0]
        return min(bad) if bad else None


def loss_watch(module: pl.LightningModule) -> LossWatch:
    """The module's ``LossWatch``, made at its first use."""
    watch = getattr(module, "_loss_watch", None)
    if watch is None:
        watch = module._loss_watch = LossWatch()
    return watch


def stop_if_diverged(module: pl.LightningModule, loss: torch.Tensor, step: int) -> None:
    """Record this step's loss (module docstring) and, at a reading step, raise ``DivergenceError`` (the
    sentence below) when any rank has seen a non-finite loss. ``module`` has ``cfg`` (its peak lr:
    ``summary.module_peak_lr``)."""
    loss_watch(module).record(loss, step)
    if module._trainer is None or (step + 1) % max(int(module.trainer.log_every_n_steps), 1) == 0:
        raise_if_loss_diverged(module)


def raise_if_loss_diverged(module: pl.LightningModule) -> None:
    """Read the module's loss record (on every rank together when a trainer runs it) and raise
    ``DivergenceError`` naming the first non-finite step and its loss."""
    attached = module._trainer is not None
    strategy = module.trainer.strategy if attached else None
    first = loss_watch(module).first_bad(strategy.all_gather if attached else None,
                                         strategy.root_device if attached else "cpu")
    if first is not None:
        run_dir = Path(module.trainer.default_root_dir) if attached else None
        step, value = first
        raise DivergenceError(divergence_message(module.cfg, step, f"loss {value}", module_peak_lr(module), run_dir))


def divergence_message(cfg: DictConfig, step: int, what: str, peak: float, run_dir: Path | None = None) -> str:
    """One sentence: where it diverged, with which model, the effective peak lr, the key that sets it,
    the checkpoint that is kept (only if ``<run_dir>/checkpoints/last.ckpt`` exists) and the next
    value to try: a third of the base lr, as the ``key=value`` to pass."""
    m, o = cfg.model, cfg.optim
    key, lower = lr_key(cfg), f"{float(o.lr) / 3:.2g}"
    last = run_dir / "checkpoints" / "last.ckpt" if run_dir is not None else None
    if last is not None and last.is_file():
        kept = f"the last good checkpoint {last} is kept"
    else:
        kept = "no checkpoint exists yet (one is written at each epoch end)"
    args = [f"{key}={lower}"] + ([f"run.name={run_dir.name}-lr{lower}"] if run_dir is not None else [])
    return (f"training diverged at step {step} ({what}) for model {m.name} (residual {m.residual}, init {m.init}) "
            f"with {o.name} at peak lr {peak:.3g} ({lr_rule(cfg)}); {kept}; lower {key} to a third and start anew, "
            f"adding to ARGS: {' '.join(args)}")
