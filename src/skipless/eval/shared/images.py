"""Images as the evaluators feed them to a backbone: ImageNet-normalised tensors, padded or cropped.

TokenCut keeps each image at its own size and pads it, after normalisation, with zeros at the right
and bottom up to a multiple of the patch size (the reference ``main_tokencut.py`` of
YangtaoWANG95/TokenCut, itself from LOST's ``main_lost.py``): no resizing, no cropping, so boxes
are in the image's own pixels and only their right and bottom edges need clipping. A zero after
normalisation is the ImageNet mean colour. PCA images use one square size for all images, so that
they line up in a grid: shorter side resized, then centre-cropped.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.transforms import functional as TF

from skipless.data.conventions import IMAGENET_MEAN as MEAN
from skipless.data.conventions import IMAGENET_STD as STD



def normalized(image: Image.Image) -> torch.Tensor:
    """(3, H, W) float32: ``ToTensor`` then ImageNet ``Normalize``, as DINO and TokenCut do."""
    return TF.normalize(TF.to_tensor(image.convert("RGB")), MEAN, STD)


def pad_to_multiple(x: torch.Tensor, patch: int) -> torch.Tensor:
    """Zero-pad (..., H, W) at the right and bottom to multiples of ``patch`` (TokenCut's padding)."""
    h, w = x.shape[-2:]
    return F.pad(x, (0, math.ceil(w / patch) * patch - w, 0, math.ceil(h / patch) * patch - h))


def square_crop(image: Image.Image, size: int) -> Image.Image:
    """Resize the shorter side to ``size`` (bicubic) and take the centre ``size`` x ``size`` square."""
    return TF.center_crop(TF.resize(image.convert("RGB"), size, interpolation=TF.InterpolationMode.BICUBIC), size)
