"""Supervised classification of a skipless-family ViT as one flat LightningModule.

backbone (``vit_args`` of ``cfg.model``, timm's init plus the residual mode's) -> CLS token after the
final norm -> a linear head. Optimisation is manual so that the recipe reads in order in
``training_step``, as in ``ssl/dino/module.py``: per-step lr and weight decay from the schedules,
batch mixing (mixup/cutmix), loss, divergence check, backward, optional global-norm clipping, step.
Gradient accumulation (``train.global_batch``; ``training/micro_batches.py``): the loader deals the step's
images in micro-batches of ``train.batch_size_per_device``, each backpropagated with its share of the loss;
with mixup/cutmix they are first joined on the device and mixed as one batch (the step's images paired as
they would be in one batch of them all), then cut again. Clipping and the step come once, after the last
(Xu et al.'s ``update_freq``, ConvNeXt's accumulation).
Validation: top-1 / top-5 accuracy (torchmetrics, reduced across ranks), the plain cross-entropy and
how often each class is predicted and labelled (``val_class_counts``, for the collapse monitor).

The backbone is exported in the backbone file format (``ExportBackbone``), without the head, so every
evaluator reads a supervised model as it reads a DINO teacher.
"""
from __future__ import annotations


import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from ..training.divergence import stop_if_diverged
from ..devices.full_precision import at_least_float32, full_precision
from ..models.from_config import vit_args
from ..models.compile import compile_in_place
from ..models.timm_family import create_timm_backbone
from ..models.vit import create_vit
from ..optim import optimizer_from_config
from ..optim.param_groups import layer_decay_groups, param_groups
from ..optim.schedules import cosine_schedule, step_schedule
from ..devices.step_scalars import device_scalars
from ..reports.summary import module_peak_lr
from ..training.collapse import ClassCounts
from ..training.micro_batches import MicroBatches, joined, micro_steps, rows
from ..training.module_contract import start_step, steps_per_epoch
from .augment import batch_mixer


def classifier_backbone(m: DictConfig, image_size: int) -> nn.Module:
    """The backbone of ``m`` with timm's init (CLS token included) and the residual mode's own init; for
    ``model.family=timm``, timm's model of ``model.timm_name`` at the training's ``image_size``."""
    if m.family == "timm":
        args = None if m.timm_args is None else OmegaConf.to_container(m.timm_args)
        return create_timm_backbone(m.timm_name, m.img_size or image_size, int(m.patch_size), dict(m.token_graying),
                                    float(m.drop_path_rate), args, m.residual, m.alpha_min, m.decay.indexing)
    args = vit_args(m)
    return create_vit(args.pop("arch"), drop_path_rate=float(m.drop_path_rate), **args)


class Supervised(pl.LightningModule):
    """Image classification with a linear head on the backbone's pooled feature.

    Args:
        cfg: the resolved ``configs/train.yaml`` config (or ``finetune.yaml``'s, built on it).
        num_classes: classes of the dataset (read from it by the entry point).
        backbone: the backbone to train, built as ``cfg.model`` says with the weights it starts from
            (fine-tuning: ``skipless/finetune.py``); None draws ``classifier_backbone(cfg.model, ...)`` (from scratch).
    """

    def __init__(self, cfg: DictConfig, num_classes: int, backbone: nn.Module | None = None) -> None:
        super().__init__()
        self.cfg, self.num_classes = cfg, int(num_classes)
        self.schedules: dict[str, np.ndarray] = {}  # per optimizer step, from configure_optimizers
        self.automatic_optimization = False
        self.backbone = classifier_backbone(cfg.model, int(cfg.aug.image_size)) if backbone is None else backbone
        compile_in_place((self.backbone,), cfg.train.compile)
        self.backbone.set_grad_checkpointing(bool(cfg.model.grad_checkpointing))
        self.head = nn.Linear(self.backbone.num_features, self.num_classes)
        # timm's init of a ViT's classifier (std 0.02); MAE's fine-tuning draws 2e-5 (model.head_init_std)
        nn.init.trunc_normal_(self.head.weight, std=float(cfg.model.head_init_std))
        nn.init.zeros_(self.head.bias)
        self.mixer = batch_mixer(cfg.aug, self.num_classes)
        top5 = min(5, self.num_classes)
        self.val_top1 = MulticlassAccuracy(self.num_classes, top_k=1, average="micro")
        self.val_top5 = MulticlassAccuracy(self.num_classes, top_k=top5, average="micro")
        self.val_counts = ClassCounts(self.num_classes)  # read by the collapse monitor (training/collapse.py)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(images))

    # ---- the pieces the shared callbacks use ------------------------------------------------------
    def exported_backbone(self) -> nn.Module:
        """What ``backbone.pt`` holds: the backbone without the head."""
        return self.backbone

    def trained_backbone(self) -> nn.Module:
        """The backbone the optimiser trains: the exported one (a classifier has no second copy)."""
        return self.backbone

    # ---- Lightning hooks ------------------------------------------------------------------------
    def configure_optimizers(self):
        o, t = self.cfg.optim, self.cfg.train
        steps, epochs = steps_per_epoch(self), int(t.epochs)
        self.schedules = {
            "lr": (step_schedule(module_peak_lr(self), epochs, steps, list(o.lr_drops), warmup_epochs=o.warmup_epochs)
                   if o.get("lr_drops") else  # a config saved before the key (issue 50) means the cosine
                   cosine_schedule(module_peak_lr(self), o.min_lr, epochs, steps, warmup_epochs=o.warmup_epochs)),
            "wd": cosine_schedule(o.weight_decay, o.weight_decay_end, epochs, steps),
        }
        groups = (param_groups(self) if float(o.layer_decay) == 1.0
                  else layer_decay_groups(self.backbone, self.head, float(o.layer_decay)))
        return optimizer_from_config(o, groups, lr=float(self.schedules["lr"][0]))

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor] | MicroBatches, batch_idx: int) -> torch.Tensor:
        step, values, opt = start_step(self)
        lr, wd = values["lr"], values["wd"]

        # the step's micro-batches mixed as one batch (smoothed, mixed one-hot targets), then cut again
        mixed = self.mixer(*joined(batch)) if self.mixer is not None else None
        parts = micro_steps(self, batch if mixed is None else mixed, int(self.cfg.train.batch_size_per_device))
        loss, top1 = 0.0, 0.0
        for part, weight in parts:
            logits = at_least_float32(self(part[0]))
            if mixed is not None:
                part_loss = torch.sum(-part[1] * F.log_softmax(logits, dim=-1), dim=-1).mean()
            else:
                part_loss = F.cross_entropy(logits, part[1], label_smoothing=float(self.cfg.aug.label_smoothing))
                # the batch's accuracy as trained (mixed images have no one label to score): the training
                # curve beside val/top1, as seeds/004's Figure 1 plots them
                top1 = top1 + (logits.detach().argmax(-1) == part[1]).float().mean() * 100 * weight
            self.manual_backward(part_loss * weight)  # 16-mixed: unscaled after the last (training/precision.py)
            loss = loss + part_loss.detach() * weight
        with full_precision():  # only the forward pass and the loss run under autocast
            if self.cfg.optim.clip_grad:
                torch.nn.utils.clip_grad_norm_(self.parameters(), float(self.cfg.optim.clip_grad))
            opt.step()
        stop_if_diverged(self, loss, step)  # read every N steps: skipless/training/divergence.py

        schedule = device_scalars({"watch/schedule/lr": lr, "watch/schedule/weight_decay": wd}, self.device)
        train_metrics = {"train/top1": top1} if mixed is None else {}
        self.log_dict({"train/loss": loss, **train_metrics, **schedule},
                      on_step=True, prog_bar=False, batch_size=rows(batch))
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        images, labels = batch
        logits = at_least_float32(self(images))
        self.val_top1.update(logits, labels)
        self.val_top5.update(logits, labels)
        self.val_counts.update(logits.argmax(-1), labels)
        self.log("val/loss", F.cross_entropy(logits, labels), on_epoch=True, sync_dist=True,
                 batch_size=images.shape[0])

    def on_validation_epoch_end(self) -> None:
        top1, top5 = self.val_top1.compute(), self.val_top5.compute()  # reduced over ranks by torchmetrics
        self.val_top1.reset()
        self.val_top5.reset()
        self.val_class_counts = self.val_counts.compute().clone()  # (2, C): predictions, labels per class
        self.val_counts.reset()
        self.log_dict({"val/top1": top1 * 100, "val/top5": top5 * 100})
        if self.trainer.is_global_zero and not self.trainer.sanity_checking:
            print(f"epoch {self.current_epoch + 1}: val top-1 {float(top1) * 100:.1f}%, top-5 {float(top5) * 100:.1f}%",
                  flush=True)
            self.last_val = {"epoch": self.current_epoch + 1, "top1": float(top1) * 100, "top5": float(top5) * 100}

