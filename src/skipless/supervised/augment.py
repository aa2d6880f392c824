"""The training and validation transforms and the batch mixing of supervised training, from ``cfg.aug``.

Built from timm's components (``timm.data.create_transform``, ``timm.data.Mixup``) as the recipe the
paper follows does (Xu et al. 2024, a timm/ConvNeXt training script): RandomResizedCrop + flip +
RandAugment + random erasing for training, resize by ``1 / eval_crop_pct`` and a centre crop for
validation, mixup/cutmix with label smoothing on each batch.
"""
from __future__ import annotations

from typing import Callable

from omegaconf import DictConfig
from PIL import Image, ImageOps
from timm.data import Mixup, auto_augment, create_transform

from ..data.conventions import IMAGENET_MEAN, IMAGENET_STD


def posterize_any_bits(img: Image.Image, bits_to_keep: int, **_) -> Image.Image:
    """timm's ``posterize`` for every ``bits_to_keep`` its RandAugment draws: keep the top ``bits_to_keep`` bits of
    each 8-bit value. The recipe's ``rand-m9-mstd0.5-inc1`` draws its magnitude from N(9, 0.5^2) clipped to
    [0, 10], and at 10 ``PosterizeIncreasing`` asks for 0 bits (4 - 4), an all-black image, which Pillow up to
    12 made and Pillow 13 refuses (``bits must be between or equal to 1 and 8``, about one image in 40 of those
    that draw the op: a training run stopped at random). 0 bits is made here as Pillow made it, 8 or more keep
    the image, 1-7 are Pillow's own."""
    if bits_to_keep >= 8:
        return img
    if bits_to_keep <= 0:
        return img.point([0] * 256 * len(img.getbands()))
    return ImageOps.posterize(img, bits_to_keep)


# Every posterize variant of timm's RandAugment / AutoAugment, looked up when a policy is built.
for _name in ("Posterize", "PosterizeIncreasing", "PosterizeOriginal"):
    auto_augment.NAME_TO_OP[_name] = posterize_any_bits


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
