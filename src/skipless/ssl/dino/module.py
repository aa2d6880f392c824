"""DINO as one flat LightningModule (Caron et al. 2021) wrapping the plain modules of
``self_distillation.py`` (multi-crop, head, loss) and the backbone; its collapse rule; its ``METHOD`` entry.

Student = backbone + ``DINOHead`` on all crops; teacher = an EMA copy (no drop-path) on the 2 global
crops; ``DINOLoss`` between them. Optimisation is manual so that the recipe reads in order in
``training_step``: per-step lr / weight-decay / momentum from the schedules, loss, divergence guard,
backward, per-parameter gradient clipping, last layer frozen during the first epoch(s), optimizer
step, center update, EMA of the teacher. Under mixed precision only the forward passes and the loss
run under autocast; clipping, the freeze, the step, the center and the EMA run in fp32 (the official
DINO's scope; ``skipless.devices.full_precision``, ``training/precision.py``).

Recipe values live in ``configs/ssl/dino.yaml`` (a scale's changes in ``configs/recipe/``). The
schedules are defined on the **global** batch: lr = base_lr * global batch / 256, so any world size trains
the same recipe; the center is all-reduced (``DINOLoss.update_center``).

Gradient accumulation (``train.global_batch``; ``training/micro_batches.py``): a step's crops come from the
loader in micro-batches of ``train.batch_size_per_device``; each runs the teacher, the student and the loss, and
backpropagates its share of the loss (its images / the step's), so the gradients add up to those of one
batch of them all. Everything that follows the backward pass runs once per optimizer step, as DINO's
loop does per batch: clipping, the last-layer freeze, the step, the center, the EMA; the schedules are
indexed by the optimizer step. Every micro-batch of a step sees the same teacher, center and teacher
temperature, and the center moves towards the mean teacher output over all of them, so a step of
``k`` micro-batches of ``b`` computes what one batch of ``k x b`` does, to float rounding
(``tests/test_accumulation.py``). A BatchNorm head (``dino.use_bn_in_head``) normalises each micro-batch
on its own (over all ranks under DDP), the one part that differs.

With ``data.augment_on=device`` the loader's workers send the crops cropped and flipped only, as uint8;
``on_after_batch_transfer`` runs their colour augmentation and normalisation on the whole batch on the
training device (``MultiCropColour``, ``self_distillation.py``) before the step sees them. With
``data.augment_on=device_crops`` the workers send each image whole with its crop boxes (``WholeImages``, the
boxes as Python ints): ``on_after_batch_transfer`` cuts, resizes and flips them on the device
(``MultiCropCuts``) before the colour work.

The parts of the step run inside ``torch.profiler.record_function`` ranges named in ``RANGES``, so
that ``bench/profile_step.py`` can say where a step's time goes; without a profiler running they
cost a few microseconds per step.

**The collapse rule** (``DINOCollapse``), read while it trains (``training/collapse.py`` reports it).
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

**Registration.** ``METHOD`` hands the module, the multi-crop views, the rules (``schema.py``), the
collapse monitor and the header lines to ``make pretrain`` (``ssl=dino``, the default; ``skipless.ssl.METHODS``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable

import lightning.pytorch as pl
import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn
from torch.profiler import record_function

from ...training.divergence import stop_if_diverged
from ...devices.full_precision import full_precision
from ...models.compile import compile_in_place
from ...optim import optimizer_from_config
from ...optim.param_groups import clip_gradients_per_parameter, param_groups
from ...optim.schedules import cosine_schedule, linear_then_constant
from ...devices.step_scalars import device_scalars
from ...devices.world import augment_on
from ...reports.summary import module_peak_lr, number_text
from ...training.collapse import CollapseMonitor
from ...training.micro_batches import MicroBatches, each_micro_batch, micro_steps, rows
from ...training.module_contract import start_step, steps_per_epoch
from ...training.run_plan import refuse_unsynced_batchnorm
from ..method import Method
from .schema import RELATIONS, RULES
from .self_distillation import (DINOHead, DINOLoss, MultiCropColour, MultiCropCuts, WholeImages, collate_multicrop,
                                denormalize, multicrop_from_config)


# The profiler ranges of a step, by part (bench/profile_step.py reads them; backbone and head nest in
# teacher and student).
RANGES = {"teacher": "dino.teacher", "student": "dino.student", "backbone": "dino.backbone", "head": "dino.head",
          "loss": "dino.loss", "backward": "dino.backward", "clip": "dino.clip_grad", "optimizer": "dino.optimizer",
          "center": "dino.center", "ema": "dino.ema", "log": "dino.log"}


class MultiCropNet(nn.Module):
    """Backbone + head over a list of crops: crops of equal size share one backbone pass (as DINO's
    ``MultiCropWrapper``), then the head runs once on every CLS feature. Output rows are view-major."""

    def __init__(self, backbone: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, crops: list[torch.Tensor]) -> torch.Tensor:
        feats, start = [], 0
        with record_function(RANGES["backbone"]):
            while start < len(crops):
                end = start
                while end < len(crops) and crops[end].shape[-2:] == crops[start].shape[-2:]:
                    end += 1
                feats.append(self.backbone(torch.cat(crops[start:end])))
                start = end
        with record_function(RANGES["head"]):
            return self.head(torch.cat(feats))


class DINO(pl.LightningModule):
    """DINO self-distillation of a skipless-family ViT.

    Args:
        cfg: the resolved pretraining config (``configs/pretrain.yaml`` + groups).
        backbone_factory: ``drop_path_rate -> backbone``; called twice, for the student (with
            ``cfg.model.drop_path_rate``) and the teacher (0).
    """

    def __init__(self, cfg: DictConfig, backbone_factory: Callable[[float], nn.Module]) -> None:
        super().__init__()
        self.cfg = cfg
        self.schedules: dict[str, np.ndarray] = {}  # per optimizer step, from configure_optimizers
        self.automatic_optimization = False
        d = cfg.dino
        student = backbone_factory(float(cfg.model.drop_path_rate))
        teacher = backbone_factory(0.0)
        teacher.load_state_dict(student.state_dict())

        def head():
            return DINOHead(student.embed_dim, d.out_dim, d.hidden_dim, d.bottleneck_dim,
                            use_bn=d.use_bn_in_head, norm_last_layer=d.norm_last_layer)

        self.student = MultiCropNet(student, head())
        self.teacher = MultiCropNet(teacher, head())
        self.teacher.load_state_dict(self.student.state_dict())
        self.teacher.requires_grad_(False)
        compile_in_place((self.student.backbone, self.teacher.backbone), cfg.train.compile)
        self.student.backbone.set_grad_checkpointing(bool(cfg.model.grad_checkpointing))  # the teacher has no backward
        self.loss_fn = DINOLoss(d.out_dim, n_global=2, student_temp=d.student_temp,
                                center_momentum=d.center_momentum)
        self.colour = MultiCropColour()  # data.augment_on=device: on_after_batch_transfer
        self.cuts = MultiCropCuts(d.global_crop_size, d.local_crop_size)  # data.augment_on=device_crops

    # ---- the pieces other code uses -------------------------------------------------------------
    def teacher_backbone(self) -> nn.Module:
        """The teacher's backbone, the model evaluators use (DINO evaluates the teacher)."""
        return self.teacher.backbone

    def trained_backbone(self) -> nn.Module:
        """The backbone the optimiser trains, which the diagnostics measure: the student's."""
        return self.student.backbone

    def exported_backbone(self) -> nn.Module:
        """What ``backbone.pt`` holds and the k-NN monitor scores: the teacher's backbone."""
        return self.teacher_backbone()

    # ---- Lightning hooks ------------------------------------------------------------------------
    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Crops that arrive as uint8 were only cropped and flipped by the loader's workers
        (``data.augment_on=device``): their colour augmentation and normalisation run here, on the whole
        batch on the training device, in fp32 (``MultiCropColour``). Float crops are the workers' finished
        ones and pass unchanged. A ``WholeImages`` (``data.augment_on=device_crops``) is first cut, resized
        and flipped here (``MultiCropCuts``). With accumulation the step arrives as its micro-batches
        (``MicroBatches``), each coloured on its own."""
        def coloured(crops: list[torch.Tensor]) -> list[torch.Tensor]:
            cut = isinstance(crops, WholeImages)
            if cut or (crops and crops[0].dtype == torch.uint8):
                with full_precision():
                    if cut:  # data.augment_on=device_crops: cut, resize and flip here first (floats in [0, 1])
                        crops = self.cuts(crops[0], crops[1:])
                    return self.colour(crops, rank=self.global_rank, world=self.trainer.world_size)
            return crops

        return each_micro_batch(batch, coloured)

    def configure_optimizers(self):
        o, t = self.cfg.optim, self.cfg.train
        steps, epochs = steps_per_epoch(self), int(t.epochs)
        d = self.cfg.dino
        self.schedules = {
            # DINO's linear scaling rule: optim.lr x lr_scale x global batch / 256 (summary.peak_lr)
            "lr": cosine_schedule(module_peak_lr(self), o.min_lr, epochs, steps, warmup_epochs=o.warmup_epochs),
            "wd": cosine_schedule(o.weight_decay, o.weight_decay_end, epochs, steps),
            "momentum": cosine_schedule(d.momentum_teacher, 1.0, epochs, steps),
            "teacher_temp": linear_then_constant(d.warmup_teacher_temp, d.teacher_temp,
                                                 d.warmup_teacher_temp_epochs, epochs, steps),
        }
        return optimizer_from_config(o, param_groups(self.student), lr=float(self.schedules["lr"][0]))

    def training_step(self, crops: list[torch.Tensor] | MicroBatches, batch_idx: int) -> torch.Tensor:
        step, values, opt = start_step(self)
        epoch = self.current_epoch
        lr, wd, momentum, temp = (values[k] for k in ("lr", "wd", "momentum", "teacher_temp"))
        if step == 0 and self.global_rank == 0:
            self._log_crops(crops[0] if isinstance(crops, MicroBatches) else crops)  # the first micro-batch's
        loss = entropy = 0.0
        teacher_outs = []  # of every micro-batch, for the center (one mean over them all)
        for part, weight in micro_steps(self, crops, int(self.cfg.train.batch_size_per_device)):
            with torch.no_grad(), record_function(RANGES["teacher"]):
                teacher_out = self.teacher(part[:2])
            with record_function(RANGES["student"]):
                student_out = self.student(part)
            with record_function(RANGES["loss"]):
                part_loss, part_entropy = self.loss_fn(student_out, teacher_out, temp)
            with record_function(RANGES["backward"]):
                self.manual_backward(part_loss * weight)  # 16-mixed: unscaled after the last (training/precision.py)
            loss, entropy = loss + part_loss.detach() * weight, entropy + part_entropy * weight
            teacher_outs.append(teacher_out)
        # Only the forward passes and the loss run under the autocast Lightning opened for this step:
        # from here on everything runs in fp32, as in DINO's main_dino.py.
        with full_precision():
            with record_function(RANGES["clip"]):
                if self.cfg.optim.clip_grad:
                    clip_gradients_per_parameter(self.student.parameters(), self.cfg.optim.clip_grad)
                if epoch < self.cfg.dino.freeze_last_layer_epochs:
                    for p in self.student.head.last_layer.parameters():
                        p.grad = None
            with record_function(RANGES["optimizer"]):
                opt.step()  # 16-mixed: skipped by the loss scaler when a gradient is not finite
            with record_function(RANGES["center"]):
                self.loss_fn.update_center(teacher_outs)
            with record_function(RANGES["ema"]):
                self._ema_update(momentum)
        # Recorded on the device, read every train.log_every_n_steps and before each epoch end's saves
        # (skipless/training/divergence.py): nothing after a non-finite loss is ever saved.
        stop_if_diverged(self, loss, step)
        with record_function(RANGES["log"]):
            schedule = {"watch/schedule/lr": lr, "watch/schedule/weight_decay": wd, "watch/schedule/momentum": momentum,
                        "watch/schedule/teacher_temp": temp}
            self.log_dict({"train/loss": loss, "watch/dino/kl_teacher_student": loss - entropy,
                           "watch/dino/teacher_entropy": entropy, **device_scalars(schedule, self.device)},
                          on_step=True, prog_bar=False, batch_size=rows(crops))
        return loss

    # ---- internals ------------------------------------------------------------------------------
    @torch.no_grad()
    def _ema_update(self, momentum: float) -> None:
        """teacher <- m * teacher + (1 - m) * student, over every parameter (DINO Eq. 2)."""
        t = [p for p in self.teacher.parameters()]
        s = [p.detach() for p in self.student.parameters()]
        torch._foreach_mul_(t, momentum)
        torch._foreach_add_(t, s, alpha=1.0 - momentum)

    def _log_crops(self, crops: list[torch.Tensor]) -> None:
        experiment = getattr(self.logger, "experiment", None)
        if experiment is None or not hasattr(experiment, "add_images"):
            return
        experiment.add_images("crops/global", denormalize(torch.stack([c[0] for c in crops[:2]]).float()), 0)
        if len(crops) > 2:
            experiment.add_images("crops/local", denormalize(torch.stack([c[0] for c in crops[2:]]).float()), 0)


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

    def state_dict(self) -> dict[str, Any]:
        """The verdict and the window read so far, so that a run resumed mid-epoch reads its windows where an
        uninterrupted one would (rank 0's, which the checkpoint holds and every rank takes back)."""
        window = None if self._sum is None else self._sum.detach().cpu()
        return {**super().state_dict(), "window_sum": window, "window_count": self._count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self._sum, self._count = state.get("window_sum"), int(state.get("window_count", 0))

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        metrics = trainer.callback_metrics
        missing = [k for k in (ENTROPY_KEY, KL_KEY) if k not in metrics]
        if missing:
            raise KeyError(f"the collapse monitor reads {missing} from the DINO module's logs; "
                           "the training step no longer logs them")
        values = torch.stack([metrics[ENTROPY_KEY].detach().float(), metrics[KL_KEY].detach().float()])
        self._sum = values if self._sum is None else self._sum.to(values.device) + values
        self._count += 1
        last_of_epoch = batch_idx + 1 >= trainer.num_training_batches
        last_step = 0 < trainer.max_steps <= trainer.global_step
        if self._count >= self.window or last_of_epoch or last_step:
            entropy, kl = (self._sum / self._count).tolist()
            self._sum, self._count = None, 0
            self.report(trainer, dino_collapse(entropy, kl, self.out_dim),
                        {"watch/health/teacher_entropy_share": entropy / math.log(self.out_dim)})


def header(cfg: Mapping) -> list[str]:
    """``crops 2 x 224 px + 8 x 96 px, colour on the device; head 65536 prototypes, norm_last_layer true;
    teacher temp 0.04``."""
    d = cfg["dino"]
    temp = f"teacher temp {number_text(d['warmup_teacher_temp'])}"
    if d["warmup_teacher_temp_epochs"]:
        temp += f" -> {number_text(d['teacher_temp'])} over {d['warmup_teacher_temp_epochs']} epochs"
    where = {"device": "colour on the device", "device_crops": "crops and colour on the device",
             "workers": "colour in the loader's workers"}[augment_on(cfg)]
    return [f"crops    2 x {d['global_crop_size']} px + {d['local_crops_number']} x {d['local_crop_size']} px, "
            f"{where}; head {d['out_dim']} prototypes, norm_last_layer {number_text(d['norm_last_layer'])}; {temp}"]


def check(cfg: DictConfig) -> None:
    """A BatchNorm head that DDP on the CPU cannot synchronise is refused (``training/run_plan.py``)."""
    if cfg.dino.use_bn_in_head:
        refuse_unsynced_batchnorm(cfg, "dino.use_bn_in_head")


METHOD = Method(
    name="dino",
    module=DINO,
    transform=multicrop_from_config,
    collate=collate_multicrop,
    view_size=lambda cfg: int(cfg.dino.global_crop_size),
    rules=RULES,
    relations=RELATIONS,
    header=header,
    callbacks=lambda cfg: [DINOCollapse(cfg.dino.out_dim)],
    check=check,
    exported="teacher",
    colour_on_device=True,
)
