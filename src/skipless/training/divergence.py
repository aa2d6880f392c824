"""The sentence a diverged run ends with, shared by every training module and the divergence guard."""
from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig

from ..ssl.errors import DivergenceError
from ..summary import lr_key


def stop_if_diverged(module: pl.LightningModule, loss: torch.Tensor, step: int) -> None:
    """Raise ``DivergenceError`` (the sentence below) when ``loss`` is not finite on any rank; every
    rank decides together, so none hangs in an all-reduce. ``module`` has ``cfg`` and ``base_lr()``."""
    finite = bool(torch.isfinite(loss))
    attached = module._trainer is not None
    if attached:
        finite = module.trainer.strategy.reduce_boolean_decision(finite, all=True)
    if not finite:
        run_dir = Path(module.trainer.default_root_dir) if attached else None
        raise DivergenceError(divergence_message(module.cfg, step, f"loss {float(loss.detach())}", module.base_lr(),
                                                 run_dir))


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
            f"with {o.name} at peak lr {peak:.3g} ({key}={float(o.lr):g} x optim.lr_scale {float(o.lr_scale):g} "
            f"x global batch / 256); {kept}; lower {key} to a third and start anew, adding to ARGS: {' '.join(args)}")
