"""MAE's pretraining view (He et al. 2022, ``main_pretrain.py``; Zhang et al. App 8.1: "random
resizing, cropping, and horizontal flipping"): one random resized crop (scale (0.2, 1), bicubic), a
horizontal flip, ImageNet normalisation. No colour augmentation: masking is MAE's augmentation.

Every random draw uses torch's generator, so the checkpointed RNG state makes a resumed run's views
those of an uninterrupted one (as DINO's multi-crop).
"""
from __future__ import annotations

from typing import Callable

from omegaconf import DictConfig
from torchvision import transforms

from ...data.conventions import IMAGENET_MEAN, IMAGENET_STD


def mae_view(size: int, scale: tuple[float, float]) -> Callable:
    """PIL image -> (3, size, size) normalised tensor."""
    return transforms.Compose([
        transforms.RandomResizedCrop(size, scale=scale, interpolation=transforms.InterpolationMode.BICUBIC),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


def view_from_config(cfg: DictConfig) -> Callable:
    """The view of a pretraining config's ``mae:`` section."""
    return mae_view(int(cfg.mae.input_size), tuple(cfg.mae.crop_scale))
