"""The training and validation transforms and the batch mixing of supervised training, from ``cfg.aug``.

Built from timm's components (``timm.data.create_transform``, ``timm.data.Mixup``) as the recipe the
paper follows does (Xu et al. 2024, a timm/ConvNeXt training script): RandomResizedCrop + flip +
RandAugment + random erasing for training, resize by ``1 / eval_crop_pct`` and a centre crop for
validation, mixup/cutmix with label smoothing on each batch.
"""
from __future__ import annotations

from typing import Callable

from omegaconf import DictConfig
from timm.data import Mixup, create_transform

from ..data.conventions import IMAGENET_MEAN, IMAGENET_STD


def train_transform(aug: DictConfig) -> Callable:
    """PIL image -> augmented, normalised tensor (``aug.image_size`` square)."""
    return create_transform(int(aug.image_size), is_training=True, scale=tuple(aug.scale), hflip=float(aug.hflip),
                            color_jitter=float(aug.color_jitter), auto_augment=aug.auto_augment or None,
                            interpolation=str(aug.interpolation), re_prob=float(aug.re_prob), re_mode="pixel",
                            mean=IMAGENET_MEAN, std=IMAGENET_STD)


def eval_transform(aug: DictConfig) -> Callable:
    """PIL image -> resized (shorter side ``image_size / eval_crop_pct``), centre-cropped, normalised tensor."""
    return create_transform(int(aug.image_size), is_training=False, crop_pct=float(aug.eval_crop_pct),
                            interpolation=str(aug.interpolation), mean=IMAGENET_MEAN, std=IMAGENET_STD)


def batch_mixer(aug: DictConfig, num_classes: int) -> Mixup | None:
    """timm's Mixup (mixup/cutmix per batch, smoothed one-hot targets), or None when both alphas are 0:
    the loss is then a cross-entropy with ``aug.label_smoothing`` on the hard labels."""
    if not (aug.mixup > 0 or aug.cutmix > 0):
        return None
    return Mixup(mixup_alpha=float(aug.mixup), cutmix_alpha=float(aug.cutmix), prob=float(aug.mixup_prob),
                 switch_prob=float(aug.mixup_switch_prob), mode="batch", label_smoothing=float(aug.label_smoothing),
                 num_classes=num_classes)
