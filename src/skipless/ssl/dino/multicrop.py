"""DINO's multi-crop augmentation (Caron et al. 2021, Appendix; the official ViT-S/16 recipe).

Two global crops (224 px, scale (0.4, 1.0)) and ``local_crops_number`` local crops (96 px,
scale (0.05, 0.4)), bicubic resizing, all with horizontal flip, colour jitter (0.4, 0.4, 0.2, 0.1)
with p 0.8 and grayscale with p 0.2. Gaussian blur (radius in [0.1, 2]) with p 1.0 on the first
global crop, 0.1 on the second and 0.5 on the locals; solarisation (threshold 128) with p 0.2 on
the second global crop only; ImageNet normalisation.

All random draws use torch's generator, so ``seed_everything`` and the checkpointed RNG state make
the crops of a resumed run identical to those of an uninterrupted one.
"""
from __future__ import annotations

from typing import Sequence

import torch
from PIL import Image, ImageFilter
from torchvision import transforms

from ...data.conventions import IMAGENET_MEAN, IMAGENET_STD



class RandomGaussianBlur:
    """PIL Gaussian blur with probability ``p`` and a radius drawn uniformly in [lo, hi] (DINO)."""

    def __init__(self, p: float, radius: tuple[float, float] = (0.1, 2.0)) -> None:
        self.p, self.radius = p, radius

    def __call__(self, img: Image.Image) -> Image.Image:
        if torch.rand(()) >= self.p:
            return img
        r = float(torch.empty(()).uniform_(*self.radius))
        return img.filter(ImageFilter.GaussianBlur(radius=r))

    def __repr__(self) -> str:
        return f"RandomGaussianBlur(p={self.p}, radius={self.radius})"


class MultiCropAugmentation:
    """Maps one PIL image to ``[global_1, global_2, local_1, ..., local_n]`` normalised tensors."""

    def __init__(self, global_crops_scale: Sequence[float] = (0.4, 1.0),
                 local_crops_scale: Sequence[float] = (0.05, 0.4), local_crops_number: int = 8,
                 global_size: int = 224, local_size: int = 96) -> None:
        bicubic = transforms.InterpolationMode.BICUBIC
        flip_and_jitter = transforms.Compose([
            transforms.RandomHorizontalFlip(p=0.5),
            transforms.RandomApply([transforms.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
            transforms.RandomGrayscale(p=0.2),
        ])
        normalize = transforms.Compose([transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])

        def crop(size, scale):
            return transforms.RandomResizedCrop(size, scale=tuple(scale), interpolation=bicubic)

        self.global_1 = transforms.Compose([crop(global_size, global_crops_scale), flip_and_jitter,
                                            RandomGaussianBlur(1.0), normalize])
        self.global_2 = transforms.Compose([crop(global_size, global_crops_scale), flip_and_jitter,
                                            RandomGaussianBlur(0.1), transforms.RandomSolarize(128, p=0.2),
                                            normalize])
        self.local = transforms.Compose([crop(local_size, local_crops_scale), flip_and_jitter,
                                         RandomGaussianBlur(0.5), normalize])
        self.local_crops_number = local_crops_number

    def __call__(self, image: Image.Image) -> list[torch.Tensor]:
        image = image.convert("RGB")
        return [self.global_1(image), self.global_2(image)] + [self.local(image) for _ in range(self.local_crops_number)]


def collate_multicrop(batch: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """A batch of per-image crop lists -> one (B, 3, H, W) tensor per crop position."""
    return [torch.stack(crops) for crops in zip(*batch)]


def denormalize(x: torch.Tensor) -> torch.Tensor:
    """Undo the ImageNet normalisation (for pictures of crops in TensorBoard), clamped to [0, 1]."""
    mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(-1, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=x.device).view(-1, 1, 1)
    return (x * std + mean).clamp(0, 1)


def multicrop_from_config(cfg) -> MultiCropAugmentation:
    """The multi-crop augmentation of a pretraining config's ``dino:`` section."""
    d = cfg.dino
    return MultiCropAugmentation(
        global_crops_scale=tuple(d.global_crops_scale), local_crops_scale=tuple(d.local_crops_scale),
        local_crops_number=d.local_crops_number, global_size=d.global_crop_size, local_size=d.local_crop_size)
