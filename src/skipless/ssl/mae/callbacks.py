"""MAE's reconstructions in TensorBoard, as the seed's Figure 2 (Zhang et al.; He et al. 2022, Fig. 2).

At the start of training and every ``mae.reconstructions_every_n_epochs`` epochs, the image
``reconstructions`` shows one row per fixed validation image: the original, the masked input, the
reconstruction, and the reconstruction with the visible patches pasted back
(``reconstruction.reconstruction_panel``). The images (centre crops at ``mae.input_size``) and their
masks (a generator seeded with ``run.seed``) are the same at every call, so the rows show training
progress and nothing else. With the normalised-pixel target each predicted patch is de-normalised with
its target patch's own mean and variance; the seed's Figure 2 was trained with the plain pixel loss.
Each panel is also written as ``<run>/reconstructions/epoch<NNN>.png`` (epoch 000: the start), which
``make paper``'s reports show side by side (``EXP=mae-figure2``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import lightning.pytorch as pl
import torch
from torchvision.utils import save_image

from ...atomic import atomic_write
from .reconstruction import reconstruction_panel

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
        panel = reconstruction_panel(pl_module.net, self._images.to(pl_module.device), generator=generator).float().cpu()
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
