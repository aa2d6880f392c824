"""Colour augmentation of a whole batch of images on their own device, each image with its own random
parameters: DINO's colour jitter, grayscale, Gaussian blur and solarisation (``data.augment_on=device``;
the crops that DINO composes from these ops are ``ssl/dino/self_distillation.py``).

Why here, and why written out. At ImageNet scale DINO's multi-crop costs 16-36 ms of CPU per image in the
loader's workers, two thirds of it these colour ops, while a GPU step takes 1,100-1,800 images a second
(issue 48). Run on the batch on the GPU they cost a few kernels per op. The ops are written here, a few
lines each, rather than taken from a library: torchvision's tensor functions take one parameter per call
(one image at a time, or one draw for the whole batch), and a batched library (kornia) would be a new
dependency whose ops differ from torchvision's in their details (its hue, its blur kernel and padding).
Each op below is torchvision's tensor op (``torchvision.transforms.v2.functional``) with its parameter a
tensor of one value per image; ``tests/test_batched_augment.py`` compares each with torchvision applied
image by image.

**The images** are float32 in [0, 1], shape (B, 3, H, W): ``to_unit`` makes them from the uint8 crops the
workers send, as ``ToTensor`` does (``x / 255``). The official DINO applies these ops to 8-bit PIL images,
rounding to 8 bits after each; here nothing is rounded between the ops (a difference below 1/255 per op).

**The random draws** (``draw_colour``) come from one ``torch.rand`` on the images' device per batch, from
the device's default generator unless one is given: the training process's, which the checkpoints keep for
every rank (``training/callbacks.py``, ``RNGState``), so a resumed run draws what an uninterrupted one
does. Under DDP every rank's generator starts from the same seed, so each rank draws the rows of the whole
global batch and keeps its own: the images of different ranks get different parameters.

**The ops**, and the ranges and probabilities of the official DINO (``main_dino.py``,
``DataAugmentationDINO``; ``ColourRecipe``'s defaults):

- colour jitter with p 0.8: brightness, contrast, saturation and hue factors uniform in [0.6, 1.4],
  [0.6, 1.4], [0.8, 1.2] and [-0.1, 0.1], applied in a random order per image (torchvision's
  ``ColorJitter``: ``randperm(4)``); brightness ``x f``, contrast a blend with the mean of the image's
  grayscale, saturation a blend with its grayscale, all clamped to [0, 1]; hue a rotation in HSV;
- grayscale with p 0.2: ``0.2989 R + 0.587 G + 0.114 B`` in all three channels;
- Gaussian blur with sigma uniform in [0.1, 2] and a per-crop probability (DINO: 1.0, 0.1, 0.5). The
  official blurs with PIL's ``GaussianBlur(radius=sigma)`` (three box blurs whose variance is sigma^2,
  reaching 5 px at sigma 2); here torchvision's ``gaussian_blur`` (a sampled Gaussian, reflect padding)
  with kernel ``BLUR_KERNEL`` = 13 px, 2 ceil(3 sigma_max) + 1: at sigma 2 its edge spread has the
  variance of PIL's to 1% (4.20 against PIL's 4.23; ``test_blur_kernel_spreads_edges_as_pils_blur_does``).
  DINOv2's ``GaussianBlur`` uses kernel 9, which cuts the Gaussian at 2 sigma: 13% less spread at sigma
  2; SimCLR's and BYOL's 23 px (a tenth of 224) gives 4.25, no closer to PIL's, at 1.8 times the work;
- solarisation with a per-crop probability (DINO: 0.2 on the second global crop): ``1 - x`` where
  ``x >= 128/255``, which on the values of an 8-bit image is PIL's ``solarize(threshold=128)`` exactly;
- then ImageNet normalisation (``normalize``).

Every op runs on every image and a mask picks the images it applies to (``torch.where``, or a factor of 1,
which leaves an image exactly as it is): no host-device synchronisation, at the cost of computing an op on
images that do not take it (the jitter's random order costs six blends and one hue turn per batch:
``colour_jitter``).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# torchvision's rgb_to_grayscale weights (ITU-R 601-2, as PIL's "L" conversion)
GRAY_WEIGHTS = (0.2989, 0.587, 0.114)
BRIGHTNESS, CONTRAST, SATURATION, HUE = range(4)  # torchvision's ColorJitter op indices (fn_idx)
BLUR_SIGMA = (0.1, 2.0)  # DINO's radius range
BLUR_KERNEL = 2 * math.ceil(3 * BLUR_SIGMA[1]) + 1  # 13 (module docstring)
SOLARIZE_THRESHOLD = 128 / 255  # PIL's 128 on 8-bit values, in [0, 1]


@dataclass(frozen=True)
class ColourRecipe:
    """The ranges and probabilities of one crop's colour augmentation; the defaults are the official
    DINO's, with no blur and no solarisation (each crop sets its own probabilities)."""

    jitter_p: float = 0.8
    brightness: float = 0.4    # factor uniform in [1 - 0.4, 1 + 0.4]
    contrast: float = 0.4
    saturation: float = 0.2
    hue: float = 0.1           # shift uniform in [-0.1, 0.1] of a full turn
    grayscale_p: float = 0.2
    blur_p: float = 0.0
    blur_sigma: tuple[float, float] = BLUR_SIGMA
    solarize_p: float = 0.0


@dataclass(frozen=True)
class ColourDraw:
    """One batch's random parameters, one row per image, on the images' device.

    ``order[i, k]`` is the jitter op (``BRIGHTNESS``, ``CONTRAST``, ``SATURATION``, ``HUE``) applied k-th to
    image i (torchvision's ``fn_idx``); the factors are used only where ``jitter`` is true, the sigma only
    where ``blur`` is."""

    jitter: torch.Tensor       # (B,) bool
    order: torch.Tensor        # (B, 4) long, a permutation of 0..3 per row
    brightness: torch.Tensor   # (B,) float
    contrast: torch.Tensor
    saturation: torch.Tensor
    hue: torch.Tensor
    grayscale: torch.Tensor    # (B,) bool
    blur: torch.Tensor         # (B,) bool
    sigma: torch.Tensor        # (B,) float
    solarize: torch.Tensor     # (B,) bool

    def __len__(self) -> int:
        return self.jitter.shape[0]


_UNIFORMS = 13  # per image: jitter gate, 4 order keys, 4 factors, grayscale gate, blur gate, sigma, solarize gate


def _uniform(u: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    return u * (hi - lo) + lo


def _draw_rows(u: torch.Tensor, r: ColourRecipe) -> ColourDraw:
    """The parameters of ``recipe`` from a (n, 13) block of U(0, 1) draws."""
    return ColourDraw(
        jitter=u[:, 0] < r.jitter_p,
        order=u[:, 1:5].argsort(dim=1),  # iid keys: every permutation equally likely (as randperm)
        brightness=_uniform(u[:, 5], max(0.0, 1 - r.brightness), 1 + r.brightness),
        contrast=_uniform(u[:, 6], max(0.0, 1 - r.contrast), 1 + r.contrast),
        saturation=_uniform(u[:, 7], max(0.0, 1 - r.saturation), 1 + r.saturation),
        hue=_uniform(u[:, 8], -r.hue, r.hue),
        grayscale=u[:, 9] < r.grayscale_p,
        blur=u[:, 10] < r.blur_p,
        sigma=_uniform(u[:, 11], *r.blur_sigma),
        solarize=u[:, 12] < r.solarize_p)


def draw_colour(recipes: Sequence[ColourRecipe], n: int, device: torch.device | str,
                generator: torch.Generator | None = None, rank: int = 0, world: int = 1) -> ColourDraw:
    """The parameters of ``len(recipes) * n`` images: ``n`` rows for each recipe in turn (one crop position
    of a batch of ``n`` images each). Each recipe's rows are drawn for the ``world * n`` images of the global
    batch and this ``rank`` keeps its ``n`` (module docstring); one ``torch.rand`` in all, no host read."""
    u = torch.rand(len(recipes), world * n, _UNIFORMS, device=device, generator=generator)
    u = u[:, rank * n:(rank + 1) * n]
    parts = [_draw_rows(u[i], r) for i, r in enumerate(recipes)]
    return ColourDraw(**{name: torch.cat([getattr(p, name) for p in parts])
                         for name in ColourDraw.__dataclass_fields__})


# ---- the ops, with one parameter per image: torchvision's tensor ops (module docstring) ----------------

def _per_image(v: torch.Tensor) -> torch.Tensor:
    return v.view(-1, 1, 1, 1)


def to_unit(x: torch.Tensor) -> torch.Tensor:
    """uint8 images -> float32 in [0, 1], as ``ToTensor`` (``x / 255``)."""
    return x.to(torch.float32).div(255)


def luminance(x: torch.Tensor) -> torch.Tensor:
    """(B, 1, H, W): torchvision's ``rgb_to_grayscale`` of each image, one channel, the same arithmetic."""
    r, g, b = x.unbind(dim=-3)
    return r.mul(GRAY_WEIGHTS[0]).add_(g, alpha=GRAY_WEIGHTS[1]).add_(b, alpha=GRAY_WEIGHTS[2]).unsqueeze(-3)


def rgb_to_grayscale(x: torch.Tensor) -> torch.Tensor:
    """``rgb_to_grayscale(x, num_output_channels=3)``: the luminance in all three channels."""
    return luminance(x).expand_as(x)


def blend(x: torch.Tensor, target: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """torchvision's ``_blend``: ``x f + target (1 - f)`` clamped to [0, 1], ``f`` one factor per image.
    A factor of exactly 1 returns ``x`` unchanged (``x + 0``)."""
    f = _per_image(factor)
    return (x * f).add_(target * (1 - f)).clamp_(0, 1)


def adjust_brightness(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``adjust_brightness``: ``x f`` clamped to [0, 1]."""
    return blend(x, torch.zeros_like(x[:, :1]), factor)


def adjust_contrast(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``adjust_contrast``: a blend with the mean of the image's grayscale."""
    return blend(x, luminance(x).mean(dim=(-3, -2, -1), keepdim=True), factor)


def adjust_saturation(x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """``adjust_saturation``: a blend with the image's grayscale."""
    return blend(x, luminance(x), factor)


def adjust_hue(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``adjust_hue``: the hue of HSV turned by ``shift`` (a fraction of a turn in [-0.5, 0.5]), saturation
    and value kept. torchvision's HSV (Pillow's), written with the chroma ``max - min`` instead of
    saturation times value and without its lookup table: the same values to float rounding (a few 1e-7)."""
    r, g, b = x.unbind(dim=-3)
    low, high = torch.aminmax(x, dim=-3)
    chroma = high - low
    safe = torch.where(chroma > 0, chroma, torch.ones_like(chroma))  # grey pixels: any hue, chroma 0
    # the hue in sixths of a turn, in [-1, 5): which channel is the largest decides the sector (r, then g)
    hue6 = torch.where(high == r, (g - b) / safe, torch.where(high == g, (b - r) / safe + 2, (r - g) / safe + 4))
    hue6 = (hue6 + 6 * shift.view(-1, 1, 1)).remainder_(6)
    # HSV -> RGB: channel n (R 5, G 3, B 1) is max - chroma * clamp(min(k, 4 - k), 0, 1), k = (n + hue6) mod 6
    n = torch.arange(5, 0, -2, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)  # 5, 3, 1, made on the device
    k = (n + hue6.unsqueeze(-3)).remainder_(6)
    return high.unsqueeze(-3) - chroma.unsqueeze(-3) * torch.minimum(k, 4 - k).clamp_(0, 1)


def gaussian_kernels(sigma: torch.Tensor, size: int) -> torch.Tensor:
    """(B, size): torchvision's 1-D Gaussian kernel for each sigma (``_get_gaussian_kernel1d``)."""
    lim = (size - 1) / (2.0 * math.sqrt(2.0))
    x = torch.linspace(-lim, lim, steps=size, dtype=sigma.dtype, device=sigma.device)
    return torch.softmax(x.div(sigma.unsqueeze(-1)).pow(2).neg(), dim=-1)


def gaussian_blur(x: torch.Tensor, sigma: torch.Tensor, kernel_size: int = BLUR_KERNEL) -> torch.Tensor:
    """``gaussian_blur(x, [k, k], [sigma, sigma])``: reflect padding, torchvision's kernel; applied as two
    1-D passes (torchvision convolves once with their outer product: the same to float rounding).
    ``kernel_size`` is odd and at most ``2 * side - 1`` (reflect padding needs a pad below the side)."""
    b, c, h, w = x.shape
    kernels = gaussian_kernels(sigma.to(x.dtype), kernel_size).repeat_interleave(c, dim=0)  # (B*C, k)
    pad = kernel_size // 2
    y = F.pad(x.reshape(1, b * c, h, w), [pad, pad, pad, pad], mode="reflect")
    y = F.conv2d(y, kernels.view(b * c, 1, 1, kernel_size), groups=b * c)
    y = F.conv2d(y, kernels.view(b * c, 1, kernel_size, 1), groups=b * c)
    return y.view(b, c, h, w)


def blur_kernel_size(side: int, kernel_size: int = BLUR_KERNEL) -> int:
    """``kernel_size``, or the largest odd size reflect padding allows on a crop of ``side`` px."""
    return min(kernel_size, 2 * int(side) - 1)


def solarize(x: torch.Tensor, threshold: float = SOLARIZE_THRESHOLD) -> torch.Tensor:
    """``solarize``: ``1 - x`` where ``x >= threshold``."""
    return torch.where(x >= threshold, 1.0 - x, x)


def normalize(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``normalize`` with ``mean`` and ``std`` already on the device, shaped (1, 3, 1, 1)."""
    return x.sub(mean).div_(std)


# ---- the random composition ------------------------------------------------------------------------------

def _where(mask: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.where(_per_image(mask), a, b)


def _blend_slot(x: torch.Tensor, op: torch.Tensor, draw: ColourDraw) -> torch.Tensor:
    """One blend per image: its brightness, contrast or saturation factor where ``op`` names that op, a
    factor of 1 elsewhere (``op`` -1), which leaves the image exactly as it is."""
    gray = luminance(x)
    target = torch.where(_per_image(op == CONTRAST), gray.mean(dim=(-3, -2, -1), keepdim=True),
                         torch.where(_per_image(op == SATURATION), gray, torch.zeros_like(gray)))
    factor = torch.where(op == BRIGHTNESS, draw.brightness, torch.where(
        op == CONTRAST, draw.contrast, torch.where(op == SATURATION, draw.saturation, torch.ones_like(draw.brightness))))
    return blend(x, target, factor)


def colour_jitter(x: torch.Tensor, draw: ColourDraw) -> torch.Tensor:
    """torchvision's ``ColorJitter`` where ``draw.jitter``, each image in its own order. Arranged around the
    hue turn, the one costly op, so that it runs once: each image's ops before its hue go into three blend
    slots (right-aligned, the empty ones a factor of 1), then the hue turn, then its ops after the hue in
    three more slots (left-aligned). Six blends and one hue for the batch, where one pass per position of
    the order would take four of each."""
    hue_at = (draw.order == HUE).long().argmax(dim=1, keepdim=True)  # (B, 1): where the hue is in the order
    slots = torch.arange(3, device=x.device)
    before, after = hue_at - 3 + slots, hue_at + 1 + slots  # (B, 3) positions in the order
    none = torch.full_like(before, -1)
    jitter = draw.jitter.unsqueeze(1)
    ops_before = torch.where(jitter & (before >= 0), draw.order.gather(1, before.clamp(min=0)), none)
    ops_after = torch.where(jitter & (after <= 3), draw.order.gather(1, after.clamp(max=3)), none)
    for j in range(3):
        x = _blend_slot(x, ops_before[:, j], draw)
    x = _where(draw.jitter, adjust_hue(x, draw.hue), x)
    for j in range(3):
        x = _blend_slot(x, ops_after[:, j], draw)
    return x


def apply_colour(x: torch.Tensor, draw: ColourDraw, kernel_size: int = BLUR_KERNEL) -> torch.Tensor:
    """DINO's colour ops in the official order on float images in [0, 1]: jitter, grayscale, blur,
    solarisation, each where ``draw`` says so."""
    x = colour_jitter(x, draw)
    x = _where(draw.grayscale, rgb_to_grayscale(x), x)
    x = _where(draw.blur, gaussian_blur(x, draw.sigma, blur_kernel_size(min(x.shape[-2:]), kernel_size)), x)
    return _where(draw.solarize, solarize(x), x)
