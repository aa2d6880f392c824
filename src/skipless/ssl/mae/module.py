"""MAE (He et al. 2022) with the seed's encoder-to-decoder skips as one flat LightningModule.

The network is ``model.MaskedAutoencoder`` (masking, encoder on the visible patches, decoder, loss); this
module runs its recipe in order in ``training_step``, on the shared parts DINO's module uses: per-step lr
and weight decay from the schedules (``optim/schedules.py``: MAE's linear warm-up from 0, ``base x s / W``
at step s of W, then cosine to ``optim.min_lr``; weight decay from ``optim.weight_decay`` to ``optim.weight_decay_end``, which the MAE
recipes set equal, so it is constant as in Zhang et al. App 8.1), the loss, the divergence guard, the
backward pass, optional clipping (``optim.clip_grad``; 0 in MAE's recipes: MAE clips nothing), the step.
Under mixed precision only the forward pass and the loss run under autocast; clipping and the step run
in fp32 (``skipless.full_precision``, ``training/precision.py``).

Gradient accumulation (``train.global_batch``, MAE's ``accum_iter``; ``training/micro_batches.py``): the
step's images are cut into micro-batches of ``train.batch_size_per_device``, each masked, encoded, decoded
and backpropagated with its share of the loss (MAE divides by ``accum_iter``); the step, and the
schedules indexed by it, come once per optimizer step. Every image draws its own mask either way, so
a step of ``k`` micro-batches computes what one batch of them all does when the masks are the same.
An epoch's trailing micro-batches that fill no step are dropped: MAE's ``engine_pretrain.py`` runs them
and zeroes their gradients when the next epoch begins (``optimizer.zero_grad()`` in ``train_one_epoch``);
here the loader never deals them (``drop_last``).

It logs ``train/loss`` and, beside it, ``train/mean_patch_loss``: the loss of predicting each masked
patch's own mean (with the normalised target: 0, a loss of about 1), the floor a model that learned
nothing about the image sits at (``loss.mean_patch_baseline``).

``exported_backbone()`` is the encoder: ``backbone.pt`` holds it in timm's names, and every evaluator
reads it as it reads a DINO teacher.
"""
from __future__ import annotations

from typing import Callable

import lightning.pytorch as pl
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from ...divergence import stop_if_diverged
from ...full_precision import full_precision
from ...models.compile import compile_in_place
from ...optim import optimizer_from_config
from ...optim.param_groups import clip_gradients_per_parameter, param_groups, set_step_values
from ...optim.schedules import cosine_schedule
from ...step_scalars import device_scalars
from ...summary import peak_lr
from ...training.micro_batches import micro_steps
from .loss import mean_patch_baseline
from .model import MaskedAutoencoder
from .skips import mirror_skip_pairs


def skip_pairs_of(cfg: DictConfig, encoder_depth: int) -> list[tuple[int, int]]:
    """The (encoder block, decoder block) pairs of ``cfg.mae``: none without ``unet_skips``, the explicit
    ``skip_pairs`` when given, else the suite's U-Net mirror (``skips.mirror_skip_pairs``)."""
    m = cfg.mae
    if not m.unet_skips:
        return []
    if m.skip_pairs is not None:
        return [(int(e), int(d)) for e, d in m.skip_pairs]
    return mirror_skip_pairs(encoder_depth, int(m.decoder.depth))


class MAE(pl.LightningModule):
    """Masked autoencoding of a skipless-family ViT encoder.

    Args:
        cfg: the resolved pretraining config (``configs/pretrain.yaml`` + ``ssl/mae.yaml`` + groups).
        backbone_factory: ``drop_path_rate -> encoder`` (the ``model:`` section; MAE's encoder is built
            once, with ``model.drop_path_rate``).
    """

    def __init__(self, cfg: DictConfig, backbone_factory: Callable[[float], nn.Module]) -> None:
        super().__init__()
        self.cfg = cfg
        self.automatic_optimization = False
        m = cfg.mae
        encoder = backbone_factory(float(cfg.model.drop_path_rate))
        self.net = MaskedAutoencoder(
            encoder, decoder_dim=int(m.decoder.dim), decoder_depth=int(m.decoder.depth),
            decoder_heads=int(m.decoder.heads), mask_ratio=float(m.mask_ratio), norm_pix_loss=bool(m.norm_pix_loss),
            skip_pairs=skip_pairs_of(cfg, len(encoder.blocks)))
        compile_in_place((self.net.encoder,), bool(cfg.train.compile))
        self.net.set_grad_checkpointing(bool(cfg.model.grad_checkpointing))
        self.schedules: dict[str, np.ndarray] = {}  # per-step values, built in configure_optimizers

    # ---- the pieces other code uses -------------------------------------------------------------
    def trained_backbone(self) -> nn.Module:
        """The backbone the optimiser trains, which the diagnostics measure: the encoder."""
        return self.net.encoder

    def exported_backbone(self) -> nn.Module:
        """What ``backbone.pt`` holds and the k-NN monitor scores: the encoder."""
        return self.net.encoder

    def base_lr(self) -> float:
        """Peak lr for the global batch: ``optim.lr * lr_scale * global batch / 256`` (MAE's rule too)."""
        return peak_lr(self.cfg, self.trainer.world_size if self._trainer is not None else None)

    # ---- Lightning hooks ------------------------------------------------------------------------
    def configure_optimizers(self):
        o, t = self.cfg.optim, self.cfg.train
        if self.trainer.train_dataloader is None:  # its length defines the per-step schedules
            self.trainer.fit_loop.setup_data()
        steps, epochs = int(self.trainer.num_training_batches), int(t.epochs)
        self.schedules = {
            "lr": cosine_schedule(self.base_lr(), o.min_lr, epochs, steps, warmup_epochs=o.warmup_epochs,
                                  warmup_reaches_base=False),  # MAE's lr_sched: base x s / W in the warm-up
            "wd": cosine_schedule(o.weight_decay, o.weight_decay_end, epochs, steps),
        }
        return optimizer_from_config(o, param_groups(self.net), lr=float(self.schedules["lr"][0]))

    def training_step(self, images: torch.Tensor, batch_idx: int) -> torch.Tensor:
        step = self.global_step
        i = min(step, len(self.schedules["lr"]) - 1)
        lr, wd = float(self.schedules["lr"][i]), float(self.schedules["wd"][i])
        opt = self.optimizers()
        set_step_values(opt, lr, wd)

        opt.zero_grad(set_to_none=True)
        loss, masks = 0.0, []
        for part, weight in micro_steps(self, images, int(self.cfg.train.batch_size_per_device)):
            part_loss, _, mask = self.net(part)
            self.manual_backward(part_loss * weight)  # 16-mixed: unscaled after the last (training/precision.py)
            loss = loss + part_loss.detach() * weight
            masks.append(mask)
        with full_precision():
            if self.cfg.optim.clip_grad:
                clip_gradients_per_parameter(self.net.parameters(), self.cfg.optim.clip_grad)
            opt.step()
        stop_if_diverged(self, loss, step)
        scalars = {"train/loss": loss,
                   **device_scalars({"watch/schedule/lr": lr, "watch/schedule/weight_decay": wd}, self.device)}
        if step % int(self.cfg.train.log_every_n_steps) == 0:  # the floor only where a step is written
            with torch.no_grad():
                scalars["train/mean_patch_loss"] = mean_patch_baseline(images.float(), self.net.patch_size,
                                                                       torch.cat(masks), self.net.norm_pix_loss)
        self.log_dict(scalars, on_step=True, prog_bar=False, batch_size=images.shape[0])
        return loss

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["skipless_config"] = OmegaConf.to_container(self.cfg, resolve=True)
