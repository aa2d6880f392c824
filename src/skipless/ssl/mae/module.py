"""MAE (He et al. 2022) with the seed's encoder-to-decoder skips as one flat LightningModule.

The network is ``autoencoder.MaskedAutoencoder`` (masking, encoder on the visible patches, decoder, loss); this
module runs its recipe in order in ``training_step``, on the shared parts DINO's module uses: per-step lr
and weight decay from the schedules (``optim/schedules.py``: MAE's linear warm-up from 0, ``base x s / W``
at step s of W, then cosine to ``optim.min_lr``; weight decay from ``optim.weight_decay`` to ``optim.weight_decay_end``, which the MAE
recipes set equal, so it is constant as in Zhang et al. App 8.1), the loss, the divergence guard, the
backward pass, optional clipping (``optim.clip_grad``; 0 in MAE's recipes: MAE clips nothing), the step.
Under mixed precision only the forward pass and the loss run under autocast; clipping and the step run
in fp32 (``skipless.devices.full_precision``, ``training/precision.py``).

Gradient accumulation (``train.global_batch``, MAE's ``accum_iter``; ``training/micro_batches.py``): the
step's images come from the loader in micro-batches of ``train.batch_size_per_device``, each masked, encoded, decoded
and backpropagated with its share of the loss (MAE divides by ``accum_iter``); the step, and the
schedules indexed by it, come once per optimizer step. Every image draws its own mask either way, so
a step of ``k`` micro-batches computes what one batch of them all does when the masks are the same.
An epoch's trailing micro-batches that fill no step are dropped: MAE's ``engine_pretrain.py`` runs them
and zeroes their gradients when the next epoch begins (``optimizer.zero_grad()`` in ``train_one_epoch``);
here the loader never deals them (``drop_last``).

It logs ``train/loss`` and, beside it, ``train/mean_patch_loss``: the loss of predicting each masked
patch's own mean (with the normalised target: 0, a loss of about 1), the floor a model that learned
nothing about the image sits at (``autoencoder.mean_patch_baseline``).

``exported_backbone()`` is the encoder: ``backbone.pt`` holds it in timm's names, and every evaluator
reads it as it reads a DINO teacher.

**Reconstructions**: MAE's reconstructions in TensorBoard, as the seed's Figure 2 (Zhang et al.; He et al. 2022, Fig. 2).

At the start of training and every ``mae.reconstructions_every_n_epochs`` epochs, the image
``reconstructions`` shows one row per fixed validation image: the original, the masked input, the
reconstruction, and the reconstruction with the visible patches pasted back
(``reconstruction_panel`` below). The images (centre crops at ``mae.input_size``) and their
masks (a generator seeded with ``run.seed``) are the same at every call, so the rows show training
progress and nothing else. With the normalised-pixel target each predicted patch is de-normalised with
its target patch's own mean and variance; the seed's Figure 2 was trained with the plain pixel loss.
Each panel is also written as ``<run>/reconstructions/epoch<NNN>.png`` (epoch 000: the start), which
``make paper``'s reports show side by side (``EXP=mae-figure2``).

**The panel**: The reconstruction panel of the seed's Figure 2 (Zhang et al., seed 002, Sec. 4 "Reconstruction").

One row per image: the original, the masked input (masked patches grey), the reconstruction, and the
reconstruction with the visible patches pasted back (MAE's Figures 2-4 show the last one).

A prediction in normalised-target space (``norm_pix_loss``) is turned back into pixels with each
target patch's own mean and std, as MAE's visualisation does. For a masked patch those come from the
original image, which the model never saw: the panel then shows the structure the model predicted
inside the patch's true brightness and contrast, and flatters it. The seed's Figure 2 avoids this:
its models for the figure were trained with a plain pixel loss (App. 8.1: "For visualization
purposes, as shown in Figure 2, we used L2 pixel-wise loss"), i.e. ``norm_pix_loss=False``.

Images arrive normalised with the ImageNet statistics (the suite's loaders); the panel undoes that
and clamps to [0, 1] for display.

**Registration.** ``METHOD`` hands the module, the view, the rules (``schema.py``), the reconstruction
monitor and the header lines to ``make pretrain SSL=mae`` (``skipless.ssl.METHODS``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Callable

import lightning.pytorch as pl
import numpy as np
import torch
from omegaconf import DictConfig
from torch import nn
from torch.utils.data import default_collate
from torchvision.utils import make_grid, save_image

from ...atomic import atomic_write
from ...data.conventions import IMAGENET_MEAN, IMAGENET_STD
from ...training.divergence import stop_if_diverged
from ...devices.full_precision import full_precision
from ...models.compile import compile_in_place
from ...models.decay import DEFAULT_ALPHA_MIN
from ...models.vit import ARCHS
from ...optim import optimizer_from_config
from ...optim.param_groups import clip_gradients_per_parameter, param_groups
from ...optim.schedules import cosine_schedule
from ...devices.step_scalars import device_scalars
from ...reports.summary import module_peak_lr, number_text
from ...training.data import diagnostic_images
from ...training.micro_batches import MicroBatches, joined, micro_steps, rows
from ...training.module_contract import start_step, steps_per_epoch
from ..method import Method
from .autoencoder import MaskedAutoencoder, mean_patch_baseline, normalized_target, patchify, unpatchify, view_from_config
from .decoder import mirror_skip_pairs
from .schema import RELATIONS, RULES


def skip_pairs_of(cfg: DictConfig, encoder_depth: int) -> list[tuple[int, int]]:
    """The (encoder block, decoder block) pairs of ``cfg.mae``: none without ``unet_skips``, the explicit
    ``skip_pairs`` when given, else the suite's U-Net mirror (``decoder.mirror_skip_pairs``)."""
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
        self.schedules: dict[str, np.ndarray] = {}  # per optimizer step, from configure_optimizers
        self.automatic_optimization = False
        m = cfg.mae
        encoder = backbone_factory(float(cfg.model.drop_path_rate))
        self.net = MaskedAutoencoder(
            encoder, decoder_dim=int(m.decoder.dim), decoder_depth=int(m.decoder.depth),
            decoder_heads=int(m.decoder.heads), mask_ratio=float(m.mask_ratio), norm_pix_loss=bool(m.norm_pix_loss),
            skip_pairs=skip_pairs_of(cfg, len(encoder.blocks)))
        compile_in_place((self.net.encoder,), cfg.train.compile)
        self.net.set_grad_checkpointing(bool(cfg.model.grad_checkpointing))

    # ---- the pieces other code uses -------------------------------------------------------------
    def trained_backbone(self) -> nn.Module:
        """The backbone the optimiser trains, which the diagnostics measure: the encoder."""
        return self.net.encoder

    def exported_backbone(self) -> nn.Module:
        """What ``backbone.pt`` holds and the k-NN monitor scores: the encoder."""
        return self.net.encoder

    # ---- Lightning hooks ------------------------------------------------------------------------
    def configure_optimizers(self):
        o, t = self.cfg.optim, self.cfg.train
        steps, epochs = steps_per_epoch(self), int(t.epochs)
        self.schedules = {
            "lr": cosine_schedule(module_peak_lr(self), o.min_lr, epochs, steps, warmup_epochs=o.warmup_epochs,
                                  warmup_reaches_base=False),  # MAE's lr_sched: base x s / W in the warm-up
            "wd": cosine_schedule(o.weight_decay, o.weight_decay_end, epochs, steps),
        }
        return optimizer_from_config(o, param_groups(self.net), lr=float(self.schedules["lr"][0]))

    def training_step(self, images: torch.Tensor | MicroBatches, batch_idx: int) -> torch.Tensor:
        step, values, opt = start_step(self)
        lr, wd = values["lr"], values["wd"]
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
                scalars["train/mean_patch_loss"] = mean_patch_baseline(joined(images).float(), self.net.patch_size,
                                                                       torch.cat(masks), self.net.norm_pix_loss)
        self.log_dict(scalars, on_step=True, prog_bar=False, batch_size=rows(images))
        return loss


GREY = 0.5  # a masked patch in the display image


def _display(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """Undo the per-channel normalisation and clamp to [0, 1]."""
    mean_t = torch.tensor(mean, dtype=images.dtype, device=images.device).view(1, -1, 1, 1)
    std_t = torch.tensor(std, dtype=images.dtype, device=images.device).view(1, -1, 1, 1)
    return (images * std_t + mean_t).clamp(0.0, 1.0)


def reconstruction_rows(images: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor, patch_size: int,
                        norm_pix: bool, mean: Sequence[float] = IMAGENET_MEAN,
                        std: Sequence[float] = IMAGENET_STD) -> torch.Tensor:
    """(B, 4, C, H, W) in [0, 1]: original, masked, reconstruction, visible patches pasted back.

    Args:
        images: (B, C, H, W) normalised with ``mean`` / ``std``.
        pred, mask: an MAE's output for these images ((B, N, p * p * C) and (B, N), 1 = masked).
        norm_pix: ``pred`` is in per-patch normalised space (de-normalised with each patch's statistics).
    """
    p = patch_size
    images = images.detach().float()
    grid = (images.shape[2] // p, images.shape[3] // p)
    pixels = pred.detach().float()
    if norm_pix:
        _, patch_mean, patch_std = normalized_target(patchify(images, p))
        pixels = pixels * patch_std + patch_mean
    recon = unpatchify(pixels, p, grid)
    masked_px = unpatchify(mask.detach().float()[..., None].expand(-1, -1, pixels.shape[-1]), p, grid)
    pasted = images * (1 - masked_px) + recon * masked_px
    original = _display(images, mean, std)
    masked = original * (1 - masked_px) + GREY * masked_px
    return torch.stack([original, masked, _display(recon, mean, std), _display(pasted, mean, std)], dim=1)


@torch.no_grad()
def reconstruction_panel(mae: torch.nn.Module, images: torch.Tensor, mask_ratio: float | None = None,
                         generator: torch.Generator | None = None, padding: int = 2) -> torch.Tensor:
    """(3, H', W') float grid, one row of four per image (see ``reconstruction_rows``), for ``mae``
    (a ``MaskedAutoencoder``) run in eval mode on ``images``; the module's mode is restored after."""
    was_training = mae.training
    mae.eval()
    try:
        _, pred, mask = mae(images, mask_ratio, generator)
    finally:
        mae.train(was_training)
    rows = reconstruction_rows(images, pred, mask, mae.patch_size, mae.norm_pix_loss)
    return make_grid(rows.flatten(0, 1), nrow=4, padding=padding, pad_value=1.0)


TAG = "reconstructions"


class Reconstructions(pl.Callback):
    """The Figure 2 panel of ``images()`` (fixed validation crops) every ``every`` epochs and at the start."""

    def __init__(self, images: Callable[[], torch.Tensor], every: int, seed: int) -> None:
        self.images_fn, self.every, self.seed = images, int(every), int(seed)
        self._images: torch.Tensor | None = None

    def _log(self, trainer: pl.Trainer, pl_module: pl.LightningModule, epoch: int) -> None:
        experiment = getattr(trainer.logger, "experiment", None)
        if not trainer.is_global_zero or experiment is None or not hasattr(experiment, "add_image"):
            return
        if self._images is None:
            self._images = self.images_fn()
        generator = torch.Generator(device=pl_module.device).manual_seed(self.seed)
        panel = reconstruction_panel(pl_module.net, self._images.to(pl_module.device, pl_module.dtype), generator=generator).float().cpu()
        experiment.add_image(TAG, panel, trainer.global_step)
        png = Path(trainer.default_root_dir) / TAG / f"epoch{epoch:03d}.png"
        atomic_write(png, lambda tmp: save_image(panel, tmp, format="png"))

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.global_step == 0:
            self._log(trainer, pl_module, 0)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch = trainer.current_epoch + 1
        if epoch % self.every == 0 or epoch == trainer.max_epochs:
            self._log(trainer, pl_module, epoch)


# Zhang et al. Sec 4.3: alpha_min <= 0.4 trained unstably with ViT-B; the header says so before such a run.
UNSTABLE_ALPHA_MIN = 0.4


def header(cfg: Mapping) -> list[str]:
    """``mae      224 px, mask 0.75, norm-pix target; decoder 8 x 512 (16 heads), U-Net skips 1->7, 3->6 ...``."""
    m = cfg["mae"]
    d = m["decoder"]
    skips = "no encoder-decoder skips"
    if m["unet_skips"]:
        depth = cfg["model"]["depth"] or ARCHS[cfg["model"]["arch"]]["depth"]
        pairs = m["skip_pairs"] if m["skip_pairs"] is not None else mirror_skip_pairs(int(depth), int(d["depth"]))
        skips = "U-Net skips (encoder->decoder block) " + ", ".join(f"{e}->{k}" for e, k in pairs)
    target = "norm-pix target" if m["norm_pix_loss"] else "pixel target"
    model = cfg["model"]
    alpha_min = DEFAULT_ALPHA_MIN if model.get("alpha_min") is None else float(model["alpha_min"])
    unstable = ([f"note     alpha_min {number_text(alpha_min)} <= {number_text(UNSTABLE_ALPHA_MIN)}: the seed found these "
                 "unstable for ViT-B (Sec 4.3); a run that diverges stops with its last good checkpoint"]
                if model["residual"] == "decayed" and alpha_min <= UNSTABLE_ALPHA_MIN else [])
    return [f"mae      {m['input_size']} px, crop scale {list(m['crop_scale'])}, mask {number_text(m['mask_ratio'])}, "
            f"{target}; decoder {d['depth']} x {d['dim']} ({d['heads']} heads), {skips}", *unstable]


def callbacks(cfg: DictConfig) -> list[pl.Callback]:
    every = int(cfg.mae.reconstructions_every_n_epochs)
    if not every:
        return []
    images = partial(diagnostic_images, cfg, int(cfg.mae.input_size), int(cfg.mae.reconstruction_images), "val")
    return [Reconstructions(images, every, int(cfg.run.seed))]


METHOD = Method(
    name="mae",
    module=MAE,
    transform=view_from_config,
    collate=default_collate,
    view_size=lambda cfg: int(cfg.mae.input_size),
    rules=RULES,
    relations=RELATIONS,
    header=header,
    callbacks=callbacks,
    run_prefix="mae-",
    exported="encoder",
)
