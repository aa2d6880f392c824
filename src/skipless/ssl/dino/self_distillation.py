"""DINO's mathematics (Caron et al. 2021), as plain modules with no training loop and no config reading
beyond ``multicrop_from_config``: the views, the head and the loss, in the order of the paper's Algorithm 1.

**Multi-crop** (Appendix; the official ViT-S/16 recipe). Two global crops (224 px, scale (0.4, 1.0)) and
``local_crops_number`` local crops (96 px, scale (0.05, 0.4)), bicubic resizing, all with horizontal flip,
colour jitter (0.4, 0.4, 0.2, 0.1) with p 0.8 and grayscale with p 0.2. Gaussian blur (radius in [0.1, 2])
with p 1.0 on the first global crop, 0.1 on the second and 0.5 on the locals; solarisation (threshold 128)
with p 0.2 on the second global crop only; ImageNet normalisation. Every random draw uses torch's
generator, so ``seed_everything`` and the checkpointed RNG state make the crops of a resumed run those of
an uninterrupted one.

Where the colour work runs (``data.augment_on``, resolved by ``devices.world.augment_on``): ``workers``,
the whole of the above in the loader's workers on PIL images, as the official DINO; ``device``, the workers
only crop and flip (``MultiCropAugmentation(colour=False)``: uint8 tensors) and ``MultiCropColour`` runs the
jitter, grayscale, blur, solarisation and normalisation on the whole batch on the training device
(``skipless/data/batched_augment.py``: the ops, their fidelity to torchvision's, the blur kernel), called by
the module's ``on_after_batch_transfer``; ``device_crops``, the workers only decode and draw the crop boxes
and flips (``MultiCropBoxes``) and the device also cuts, resizes and flips (``MultiCropCuts``) before the
colour work. The probabilities of each crop are ``GLOBAL_1``, ``GLOBAL_2`` and ``LOCAL``, which every path
reads.

**The projection head** (Section 3 and Appendix): an MLP to a bottleneck, L2 normalisation, then a
weight-normalised, bias-free linear layer to ``out_dim`` prototypes. ViT-S/16: 384 -> 2048 -> 2048 -> 256,
GELU, last layer 256 -> 65536. With ``norm_last_layer`` the weight-norm gain ``weight_g`` is fixed at 1
(DINO's default, which it notes stabilises training; its README's 300-epoch ViT-S run turns it off). Inits
as in DINO's ``vision_transformer.py``: the MLP's linears truncated normal (std 0.02), biases 0; the last
layer is built after that init, so it keeps ``nn.Linear``'s default. Under mixed precision the MLP runs
under autocast and the L2 normalisation and last layer in fp32: the teacher's targets are not rounded to
bf16 before the sharpened softmax of the loss.

**The loss and its centering** (Algorithm 1, Section 3.1). Teacher probabilities
``P_t = softmax((t - c) / T_t)`` of the 2 global views; student log-probabilities ``log softmax(s / T_s)``
of all views. The loss is the cross-entropy ``-sum_k P_t log P_s`` averaged over the batch and then over
every (teacher view, student view) pair of different views. The center ``c`` follows the batch mean of the
teacher outputs by EMA (momentum 0.9); the mean is over the **global** batch, all-reduced across DDP ranks,
so the center is the same at any world size.

The student, the EMA teacher and the step that ties these together are ``module.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from PIL import Image, ImageFilter
from torch import nn
from torchvision import transforms

from ...data.batched_augment import ColourRecipe, apply_colour, draw_colour, normalize, to_unit
from ...data.conventions import IMAGENET_MEAN, IMAGENET_STD
from ...devices.full_precision import at_least_float32, full_precision
from ...devices.world import augment_on


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


# The colour augmentation of each crop (the official DataAugmentationDINO): jitter 0.8 and grayscale 0.2 on
# every crop; blur 1.0 on the first global crop, 0.1 on the second, 0.5 on the locals; solarisation 0.2 on
# the second global crop only.
GLOBAL_1 = ColourRecipe(blur_p=1.0)
GLOBAL_2 = ColourRecipe(blur_p=0.1, solarize_p=0.2)
LOCAL = ColourRecipe(blur_p=0.5)


class MultiCropAugmentation:
    """Maps one PIL image to ``[global_1, global_2, local_1, ..., local_n]`` normalised tensors; with
    ``colour=False``, to the crops flipped and nothing more, uint8 tensors, whose colour work
    ``MultiCropColour`` does on the batch (``data.augment_on=device``)."""

    def __init__(self, global_crops_scale: Sequence[float] = (0.4, 1.0),
                 local_crops_scale: Sequence[float] = (0.05, 0.4), local_crops_number: int = 8,
                 global_size: int = 224, local_size: int = 96, colour: bool = True) -> None:
        bicubic = transforms.InterpolationMode.BICUBIC

        def crop(size, scale):
            return transforms.RandomResizedCrop(size, scale=tuple(scale), interpolation=bicubic)

        def colour_ops(r: ColourRecipe) -> list:
            """``r`` as the official PIL transforms, ending in normalised float tensors; or, with
            ``colour=False``, only the flip and the uint8 tensor."""
            flip = transforms.RandomHorizontalFlip(p=0.5)
            if not colour:
                return [flip, transforms.PILToTensor()]
            ops = [flip,
                   transforms.RandomApply([transforms.ColorJitter(r.brightness, r.contrast, r.saturation, r.hue)],
                                          p=r.jitter_p),
                   transforms.RandomGrayscale(p=r.grayscale_p), RandomGaussianBlur(r.blur_p, r.blur_sigma)]
            if r.solarize_p:
                ops.append(transforms.RandomSolarize(128, p=r.solarize_p))
            return ops + [transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)]

        self.global_1 = transforms.Compose([crop(global_size, global_crops_scale), *colour_ops(GLOBAL_1)])
        self.global_2 = transforms.Compose([crop(global_size, global_crops_scale), *colour_ops(GLOBAL_2)])
        self.local = transforms.Compose([crop(local_size, local_crops_scale), *colour_ops(LOCAL)])
        self.local_crops_number = local_crops_number

    def __call__(self, image: Image.Image) -> list[torch.Tensor]:
        image = image.convert("RGB")
        return [self.global_1(image), self.global_2(image)] + [self.local(image) for _ in range(self.local_crops_number)]


class MultiCropColour(nn.Module):
    """The colour half of ``MultiCropAugmentation`` on a batch, on its device: the uint8 crops of
    ``MultiCropAugmentation(colour=False)``, collated (``collate_multicrop``), -> the normalised float crops
    the workers would have made, each image with its own draws (``GLOBAL_1``, ``GLOBAL_2``, ``LOCAL``).

    The two global crops are one batch of ``2 B`` images for the ops, the local crops another of ``n B``.
    ``generator`` None draws from the device's default generator (which the checkpoints keep); ``rank`` and
    ``world`` give each DDP rank its own rows of the global batch's draws (``batched_augment.draw_colour``).
    No host-device synchronisation. Buffers only (ImageNet's mean and std, not saved): it moves with the
    module that holds it."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    @torch.no_grad()
    def forward(self, crops: list[torch.Tensor], generator: torch.Generator | None = None, rank: int = 0,
                world: int = 1) -> list[torch.Tensor]:
        """``crops`` uint8 (the workers' crops), or float in [0, 1] (``MultiCropCuts``' device crops)."""
        n = crops[0].shape[0]
        groups = [(crops[:2], [GLOBAL_1, GLOBAL_2])]
        if len(crops) > 2:
            groups.append((crops[2:], [LOCAL] * (len(crops) - 2)))
        out: list[torch.Tensor] = []
        for group, recipes in groups:
            x = torch.cat(group)
            x = to_unit(x) if x.dtype == torch.uint8 else x
            draw = draw_colour(recipes, n, x.device, generator, rank, world)
            out.extend(normalize(apply_colour(x, draw), self.mean, self.std).chunk(len(group)))
        return out
class MultiCropBoxes:
    """The workers' half of ``data.augment_on=device_crops``: one PIL image -> ``(image, boxes)``, the image
    whole as a uint8 (3, H, W) tensor and ``boxes`` a (2 + n, 5) int64 tensor of ``top, left, height, width,
    flip`` for ``[global_1, global_2, local_1, ..., local_n]``. ``MultiCropCuts`` cuts, resizes and flips them
    on the device.

    The boxes are torchvision's ``RandomResizedCrop.get_params`` with the scales and ratio of
    ``MultiCropAugmentation``, and each flip is ``RandomHorizontalFlip``'s ``torch.rand(1) < 0.5``, drawn in
    the order that transform draws them (crop, flip, crop, flip, ...) from the worker's generator: with the
    same seed the boxes and flips are those ``MultiCropAugmentation(colour=False)`` cuts (exact resume as
    before). An image whose shorter side is ``2 x max_side`` or more is first reduced by the integer factor
    ``floor(shorter / max_side)`` (PIL ``reduce``, a box average: cheap), its shorter side then in
    [``max_side``, ``2 x max_side``), so a micro-batch's host memory stays bounded (``measure_side``: the
    largest square kept, which ``training/data.loader_memory`` measures); the boxes are drawn on the reduced
    image. ``max_side`` 2 x the global crop (448 px at 224): on a reduced image every global crop (at least
    40% of the area) is still a downscale, as on the full image. Images of ImageNet's common sizes (500 x 375,
    640 x 480, 800 x 600) are not reduced."""

    def __init__(self, global_crops_scale: Sequence[float] = (0.4, 1.0),
                 local_crops_scale: Sequence[float] = (0.05, 0.4), local_crops_number: int = 8,
                 global_size: int = 224, local_size: int = 96, max_side: int | None = None) -> None:
        self.scales = [tuple(global_crops_scale)] * 2 + [tuple(local_crops_scale)] * local_crops_number
        self.sizes = [global_size] * 2 + [local_size] * local_crops_number
        self.ratio = (3.0 / 4.0, 4.0 / 3.0)  # RandomResizedCrop's default, as MultiCropAugmentation uses
        self.max_side = int(max_side or 2 * global_size)
        self.measure_side = 2 * self.max_side - 1

    def __call__(self, image: Image.Image) -> tuple[torch.Tensor, torch.Tensor]:
        image = image.convert("RGB")
        shorter = min(image.size)
        if shorter >= 2 * self.max_side:
            image = image.reduce(shorter // self.max_side)
        boxes = []
        for scale in self.scales:
            top, left, h, w = transforms.RandomResizedCrop.get_params(image, scale, self.ratio)
            flip = int(torch.rand(1) < 0.5)
            boxes.append((top, left, h, w, flip))
        return transforms.functional.pil_to_tensor(image), torch.tensor(boxes, dtype=torch.int64)


class WholeImages(list):
    """A micro-batch of ``data.augment_on=device_crops``: ``[boxes, image_0, ..., image_{B-1}]``, ``boxes`` the
    images' ``MultiCropBoxes`` boxes as a plain nested list of ints (B x (2 + n) x 5), each image a uint8
    (3, H_i, W_i) tensor of its own size. A list, so that torch's pin-memory helper and Lightning's transfer
    move each image and keep the type; the boxes stay Python ints on the host, made so by the collate in the
    worker, so cutting them on the device reads nothing back from it (``tests/test_host_syncs.py``)."""


def collate_multicrop(batch: list) -> list[torch.Tensor] | WholeImages:
    """A batch of per-image crop lists -> one (B, 3, H, W) tensor per crop position; of ``MultiCropBoxes``'
    ``(image, boxes)`` pairs -> a ``WholeImages``."""
    if isinstance(batch[0], tuple):
        return WholeImages([[boxes.tolist() for _, boxes in batch], *(image for image, _ in batch)])
    return [torch.stack(crops) for crops in zip(*batch)]


def cut_and_resize(image: torch.Tensor, box: Sequence[int], size: int) -> torch.Tensor:
    """One crop on the image's device: ``box`` (top, left, height, width, flip) of the uint8 (3, H, W)
    ``image``, resized to ``size`` x ``size`` by ``interpolate(bicubic, antialias=True, align_corners=False)``
    (PIL's bicubic in torch's arithmetic), clamped to [0, 255], divided by 255 and not rounded: float (3, size,
    size) in [0, 1]; flipped after the resize (the kernel is symmetric: a flip commutes with it)."""
    top, left, h, w, flip = (int(v) for v in box)
    cut = image[None, :, top:top + h, left:left + w].to(torch.float32)
    out = F.interpolate(cut, size=(size, size), mode="bicubic", antialias=True, align_corners=False)[0]
    out = out.clamp_(0, 255).div_(255)
    return out.flip(-1) if flip else out


class MultiCropCuts(nn.Module):
    """The device's half of ``data.augment_on=device_crops``: a ``WholeImages``' boxes and images -> the float crops in [0, 1] per crop position, ``[(B, 3, g, g)] * 2 + [(B, 3, l, l)] * n``, which
    ``MultiCropColour`` then colours. One ``interpolate`` per crop (the boxes differ in size): B (2 + n)
    small calls."""

    def __init__(self, global_size: int, local_size: int) -> None:
        super().__init__()
        self.global_size, self.local_size = int(global_size), int(local_size)

    @torch.no_grad()
    def forward(self, boxes: Sequence[Sequence[Sequence[int]]], images: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        positions = len(boxes[0])
        return [torch.stack([cut_and_resize(image, image_boxes[c], self.global_size if c < 2 else self.local_size)
                             for image, image_boxes in zip(images, boxes)]) for c in range(positions)]


def denormalize(x: torch.Tensor) -> torch.Tensor:
    """Undo the ImageNet normalisation (for pictures of crops in TensorBoard), clamped to [0, 1]."""
    mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(-1, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=x.device).view(-1, 1, 1)
    return (x * std + mean).clamp(0, 1)


def multicrop_from_config(cfg) -> MultiCropAugmentation | MultiCropBoxes:
    """The multi-crop augmentation of a pretraining config's ``dino:`` section; its colour work in the
    loader's workers, or left to ``MultiCropColour`` on the device (``data.augment_on``); with
    ``device_crops`` the workers only draw the boxes (``MultiCropBoxes``)."""
    d = cfg.dino
    if augment_on(cfg) == "device_crops":
        return MultiCropBoxes(global_crops_scale=tuple(d.global_crops_scale),
                              local_crops_scale=tuple(d.local_crops_scale), local_crops_number=d.local_crops_number,
                              global_size=d.global_crop_size, local_size=d.local_crop_size)
    return MultiCropAugmentation(
        global_crops_scale=tuple(d.global_crops_scale), local_crops_scale=tuple(d.local_crops_scale),
        local_crops_number=d.local_crops_number, global_size=d.global_crop_size, local_size=d.local_crop_size,
        colour=augment_on(cfg) == "workers")


class WeightNormLinear(nn.Module):
    """``y = x (g * v / ||v||)^T``, one gain per output row, no bias.

    Written out instead of ``torch.nn.utils.weight_norm`` (deprecated) or its parametrization (which
    renames the parameters): ``weight_g`` / ``weight_v`` are the names in DINO's released checkpoints.
    """

    def __init__(self, in_features: int, out_features: int, fix_gain: bool) -> None:
        super().__init__()
        self.weight_v = nn.Parameter(torch.empty(out_features, in_features))
        # nn.Linear's default (reset_parameters): kaiming_uniform_ with a = sqrt(5), i.e.
        # U(-1/sqrt(in), 1/sqrt(in)), rows of expected squared norm 1/3 whatever in_features is.
        # The norm of v sets the size of the steps on the direction v/||v||, so it matters even
        # with the gain fixed at 1.
        nn.init.kaiming_uniform_(self.weight_v, a=math.sqrt(5))
        self.weight_g = nn.Parameter(torch.ones(out_features, 1), requires_grad=not fix_gain)

    def weight(self) -> torch.Tensor:
        return self.weight_g * self.weight_v / self.weight_v.norm(dim=1, keepdim=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight())


class DINOHead(nn.Module):
    """MLP (``n_layers`` linear layers, GELU) -> L2-normalise -> ``WeightNormLinear``."""

    def __init__(self, in_dim: int, out_dim: int = 65536, hidden_dim: int = 2048, bottleneck_dim: int = 256,
                 n_layers: int = 3, use_bn: bool = False, norm_last_layer: bool = True) -> None:
        super().__init__()
        dims = [in_dim] + [hidden_dim] * (n_layers - 1) + [bottleneck_dim]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(a, b))
            if i < n_layers - 1:
                if use_bn:
                    layers.append(nn.BatchNorm1d(b))
                layers.append(nn.GELU())
        self.mlp = nn.Sequential(*layers)
        for m in self.mlp.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
        self.last_layer = WeightNormLinear(bottleneck_dim, out_dim, fix_gain=norm_last_layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mlp(x)
        # The normalisation and the prototypes' logits in fp32 under any autocast: the loss divides the
        # logits by T_t = 0.04 (0.02 in the CPU demo) before its softmax, so a logit rounded to bf16
        # (error ~2e-3 at init) moves single teacher probabilities by several percent (LOGIT_PRECISION in
        # tests/test_ssl_head.py measures it). 256 x 65536 weights: a small part of a step's work.
        with full_precision():
            return self.last_layer(F.normalize(at_least_float32(x), dim=-1, p=2))


class DINOLoss(nn.Module):
    """Cross-entropy between centred, sharpened teacher outputs and student outputs.

    Args:
        out_dim: number of prototypes (the head's output size).
        n_global: number of global views (the teacher's inputs).
        student_temp: ``T_s`` (0.1).
        center_momentum: EMA momentum of the center (0.9).
    """

    def __init__(self, out_dim: int, n_global: int = 2, student_temp: float = 0.1,
                 center_momentum: float = 0.9) -> None:
        super().__init__()
        self.n_global = n_global
        self.student_temp = student_temp
        self.center_momentum = center_momentum
        self.register_buffer("center", torch.zeros(1, out_dim))

    def forward(self, student_out: torch.Tensor, teacher_out: torch.Tensor,
                teacher_temp: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and mean teacher entropy (nats).

        Args:
            student_out: (n_views * B, K), views stacked view-major (all of view 0, then view 1, ...),
                the global views first.
            teacher_out: (n_global * B, K), same order.
            teacher_temp: ``T_t`` at this epoch.

        Returns:
            ``(loss, teacher_entropy)``. ``loss - teacher_entropy`` is the mean KL divergence from
            teacher to student over the pairs (every teacher view meets the same number of student
            views), which is how collapse shows: both fall to 0 when all outputs agree.
        """
        n_views = student_out.shape[0] // (teacher_out.shape[0] // self.n_global)
        student_logp = F.log_softmax(at_least_float32(student_out) / self.student_temp, dim=-1).chunk(n_views)
        teacher_p = F.softmax((at_least_float32(teacher_out) - self.center) / teacher_temp, dim=-1).detach().chunk(self.n_global)
        total, pairs = student_logp[0].new_zeros(()), 0
        for t, p in enumerate(teacher_p):
            for s, logq in enumerate(student_logp):
                if s == t:
                    continue
                total = total + torch.sum(-p * logq, dim=-1).mean()
                pairs += 1
        with torch.no_grad():
            probs = torch.cat(teacher_p)
            entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1).mean()
        return total / pairs, entropy

    @torch.no_grad()
    def update_center(self, teacher_out: torch.Tensor | Sequence[torch.Tensor]) -> None:
        """EMA of the center towards the mean teacher output of the global batch (all ranks). ``teacher_out``
        is one batch's, or the list of an accumulated step's micro-batches: their mean over every row is
        that of one batch of them all (``module.py``)."""
        outs = [teacher_out] if isinstance(teacher_out, torch.Tensor) else list(teacher_out)
        batch_sum = at_least_float32(outs[0]).sum(dim=0, keepdim=True)
        for more in outs[1:]:
            batch_sum += at_least_float32(more).sum(dim=0, keepdim=True)
        # written by a kernel: torch.tensor(..., device=) would copy from the host, a sync on a GPU
        count = torch.full((1,), float(sum(t.shape[0] for t in outs)), dtype=torch.float32, device=outs[0].device)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(batch_sum)
            dist.all_reduce(count)
        self.center.mul_(self.center_momentum).add_(batch_sum / count, alpha=1 - self.center_momentum)
