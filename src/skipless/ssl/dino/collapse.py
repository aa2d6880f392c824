"""DINO's collapse rule, read while it trains (``training/collapse.py`` reports it).

DINO (Caron et al. 2021, Section 5.3 and Figure 7): the cross-entropy splits into the teacher's
entropy and the divergence, ``H(P_t, P_s) = h(P_t) + KL(P_t || P_s)``. "A KL equal to zero indicates a
constant output, and hence a collapse"; without sharpening the entropy goes to ``log K`` (the teacher
is uniform), without centering to 0 (one prototype wins); both forms end with KL 0. ``DINO`` logs both
per step (``watch/dino/teacher_entropy``, ``watch/dino/kl_teacher_student``: under ``watch/``, so that
``train/`` opens on the loss); the rule reads their mean over a window of steps (``DINO_WINDOW``, and
the end of each epoch), so one noisy batch decides nothing:

- *uniform teacher*: entropy at least ``UNIFORM_FRACTION`` of ``log K``. Uniform targets carry no
  information about the image, whatever the student does.
- *constant output*: KL at most ``KL_FLOOR`` nats, named by the entropy as going uniform (above
  ``log K / 2``) or to one prototype (below).

A low entropy alone is not a rule: a sharp teacher that picks a different prototype for each image
is what DINO wants (the tests' 1-block model starts at 2-16% of log K with KL 2.6-5.3 nats); it is a
collapse when the student matches it on every crop, and then KL is 0.
"""
from __future__ import annotations

import math
from typing import Any

import lightning.pytorch as pl
import torch

from ...training.collapse import CollapseMonitor

# DINO: training steps averaged before the rule is read (and the last steps of each epoch, read at its
# end). 50: most of a CPU demo epoch (62 steps), 4% of an ImageNet epoch at batch 1024, and one host
# read of two numbers per 50 steps.
DINO_WINDOW = 50
# Uniform teacher: entropy >= 99% of log K, the floor without sharpening (Figure 7). Measured on the CPU
# demo (K 1024, docs/results.md "Collapse"): its recipe's teacher stays at 36-63% of log K; with DINO's
# T_t 0.04 instead of the demo's 0.02 it sits at 90-94% (KL 0.34 at the end of 2 epochs) and its
# teacher's k-NN still beats its random init (34.3 against 29.0): a soft teacher, not a collapsed one.
UNIFORM_FRACTION = 0.99
# Constant output: KL(teacher || student) <= 0.05 nats, the floor of both forms (Figure 7). The demo
# recipe's KL falls from 2.9 to 0.66-0.92 (docs/results.md); the soft T_t 0.04 run above, 0.9 -> 0.34.
KL_FLOOR = 0.05
ENTROPY_KEY, KL_KEY = "watch/dino/teacher_entropy", "watch/dino/kl_teacher_student"


def dino_collapse(entropy: float, kl: float, out_dim: int) -> str | None:
    """The reason a DINO run with this mean teacher entropy and KL (nats) over ``out_dim`` prototypes
    has collapsed, or None."""
    top = math.log(out_dim)
    share = f"teacher entropy {entropy:.3f} of log K = {top:.3f} ({entropy / top:.0%})"
    if entropy >= UNIFORM_FRACTION * top:
        return f"the teacher's output is uniform: {share}"
    if kl <= KL_FLOOR:
        form = "uniform" if entropy > top / 2 else "one prototype"
        return (f"student and teacher agree on every crop, a constant output going to {form}: "
                f"KL(teacher||student) {kl:.4f} nats, {share}")
    return None


class DINOCollapse(CollapseMonitor):
    """``dino_collapse`` on the mean of the logged teacher entropy and KL over each ``window`` steps
    and over the last steps of each epoch (read before the epoch-end checkpoint and summary). The sums
    stay on the device: one host read per window."""

    def __init__(self, out_dim: int, window: int = DINO_WINDOW) -> None:
        super().__init__()
        self.out_dim, self.window = int(out_dim), int(window)
        self._sum: torch.Tensor | None = None
        self._count = 0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._sum, self._count = None, 0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        metrics = trainer.callback_metrics
        missing = [k for k in (ENTROPY_KEY, KL_KEY) if k not in metrics]
        if missing:
            raise KeyError(f"the collapse monitor reads {missing} from the DINO module's logs; "
                           "the training step no longer logs them")
        values = torch.stack([metrics[ENTROPY_KEY].detach().float(), metrics[KL_KEY].detach().float()])
        self._sum = values if self._sum is None else self._sum + values
        self._count += 1
        last_of_epoch = batch_idx + 1 >= trainer.num_training_batches
        last_step = 0 < trainer.max_steps <= trainer.global_step
        if self._count >= self.window or last_of_epoch or last_step:
            entropy, kl = (self._sum / self._count).tolist()
            self._sum, self._count = None, 0
            self.report(trainer, dino_collapse(entropy, kl, self.out_dim),
                        {"watch/health/teacher_entropy_share": entropy / math.log(self.out_dim)})
