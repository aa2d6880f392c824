"""MAE's mathematics (He et al. 2022) with the seed's options (Zhang et al., seed 002; SPEC 3b), as plain
modules and functions with no training loop and no config reading beyond ``view_from_config``: the view,
the masking, the patches and their target, the loss, and ``MaskedAutoencoder`` around a suite ViT (its
decoder and the encoder-to-decoder skips are ``decoder.py``; the training step is ``module.py``).

**The view.** MAE's pretraining view (He et al. 2022, ``main_pretrain.py``; Zhang et al. App 8.1: "random
resizing, cropping, and horizontal flipping"): one random resized crop (scale (0.2, 1), bicubic), a
horizontal flip, ImageNet normalisation. No colour augmentation: masking is MAE's augmentation.

Every random draw uses torch's generator, so the checkpointed RNG state makes a resumed run's views
those of an uninterrupted one (as DINO's multi-crop).

**Masking.** MAE's per-sample random masking (He et al. 2022, Section 3, "Masking"; seed 002 follows MAE).

Each image gets its own uniformly random subset of patches to keep: one ``U(0, 1)`` noise value per
patch, an argsort, and the ``int(N * (1 - mask_ratio))`` patches with the lowest noise stay visible.
The count is MAE's formula, truncated, in floating point: ViT-B/16 at 224 px keeps 49 of 196
patches at ``mask_ratio = 0.75``. Truncation in floating point can leave one patch fewer than the
exact product suggests (``N = 10, mask_ratio = 0.9`` gives ``int(0.999...) = 0``), so a ratio that
leaves no visible patch, or no masked one, is refused rather than silently run.

Masking happens on the patch tokens after their position embedding is added (MAE's
``random_masking`` runs after ``x + pos_embed[:, 1:]``), so a visible token keeps its position.

**Patches and the target.** Images to patch vectors and back, and MAE's per-patch normalised pixel target (He et al. 2022).

``patchify`` follows MAE's layout (``models_mae.py``): patches row-major over the grid, and within a
patch the pixels row-major with the channels innermost, i.e. the vector of a patch is indexed
``(py, px, channel)``. The decoder's linear head predicts in this layout, so a decoder trained here
reads the same as MAE's.

``normalized_target`` is MAE's ``norm_pix_loss`` (Section 4, "Reconstruction target"): each patch
is standardised by its own mean and variance. MAE computes ``x.var(dim=-1)``, the unbiased estimate,
and divides by ``(var + 1e-6) ** .5``; both are kept here (SPEC 3b).

**The loss.** MAE's reconstruction loss and the reference a trained MAE must beat (He et al. 2022, Section 3).

The loss is the mean squared error between predicted and target pixels of each patch, averaged over
the masked patches only ("we compute the loss only on masked patches, similar to BERT"). It is
computed in float32 outside autocast: the mask sum of a large batch (1024 x 147 masked patches) is
not an exact bfloat16 number, and the per-patch statistics of the target want full precision.

**The network.** The masked autoencoder (He et al. 2022) around a suite ViT, with the seed's optional UNet skips
(Zhang et al., seed 002, Sec. 4, Fig. 6; SPEC 3b).

The encoder is any ``SkiplessViT`` from ``create_vit``: its residual mode (the seed's ``decayed``
shortcuts), attention, position embedding and initialisation are its own, and this module never
re-initialises it. To work for every variant, ``forward_encoder`` goes through the timm encoder's own
pieces rather than re-writing them: ``patch_embed``, then ``_pos_embed`` (which prepends CLS and adds
the position embedding, resampled for another image size, to CLS and patches, so that positions are
added before masking as in MAE), masking of the patch rows only, ``patch_drop``, ``norm_pre``, the
blocks, ``norm``. Only CLS and the ``int(N (1 - mask_ratio))`` visible patches enter the blocks.
The latent is the output of ``encoder.norm``: with ``global_pool='avg'`` or ``final_norm=False``
timm makes that an identity and the decoder sees the last block's raw output.

``set_grad_checkpointing`` (``model.grad_checkpointing``) recomputes each encoder and decoder block in the
backward pass (timm's ``checkpoint``, as the encoder's own ``forward_features`` would with timm's
``set_grad_checkpointing``, which this module's loop over the visible tokens does not go through).

The loss is MAE's: per-patch MSE on the masked patches, against per-patch normalised
pixels with ``norm_pix_loss`` (the seed's setting for its probes; its Figure 2 used plain pixels).
"""
from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import Callable, NamedTuple

import torch
from omegaconf import DictConfig
from timm.models import checkpoint
from torch import nn
from torchvision import transforms

from ...data.conventions import IMAGENET_MEAN, IMAGENET_STD
from ...errors import ModelArgumentError
from ...devices.full_precision import at_least_float32, full_precision
from ...models.vit import SkiplessViT
from .decoder import MAEDecoder


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


def visible_count(num_patches: int, mask_ratio: float) -> int:
    """How many of ``num_patches`` stay visible at ``mask_ratio``: MAE's ``int(N * (1 - r))``.

    Raises ``ModelArgumentError`` when ``mask_ratio`` is not strictly between 0 and 1 or leaves no
    visible or no masked patch (the loss averages over masked patches, so it needs at least one).
    """
    if isinstance(mask_ratio, bool) or not isinstance(mask_ratio, numbers.Real) or not 0.0 < mask_ratio < 1.0:
        raise ModelArgumentError(f"mask_ratio must be a number strictly between 0 and 1, got {mask_ratio!r}")
    keep = int(num_patches * (1 - mask_ratio))
    if not 0 < keep < num_patches:
        raise ModelArgumentError(
            f"mask_ratio {mask_ratio} keeps int({num_patches} * (1 - {mask_ratio})) = {keep} of {num_patches} "
            f"patches; it must leave at least one visible and one masked patch")
    return keep


def random_masking(x: torch.Tensor, mask_ratio: float, generator: torch.Generator | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keep a random ``int(N * (1 - mask_ratio))`` of each sample's ``N`` patch tokens.

    Args:
        x: (B, N, C) patch tokens (no CLS).
        mask_ratio: fraction of patches to mask, strictly between 0 and 1.
        generator: the random source of the noise (on ``x``'s device); None uses torch's global one.

    Returns:
        visible: (B, K, C) the kept tokens, in the order of increasing noise (a random order).
        mask: (B, N) float32, 1 where a patch is masked, 0 where it is visible, in the original
            patch order (row-major over the grid).
        ids_restore: (B, N) long; ``ids_restore[b, n]`` is where patch ``n`` sits in the shuffled
            order, so ``cat([visible, fill], 1).gather(1, ids_restore)`` puts tokens back in place.
    """
    B, N, C = x.shape
    keep = visible_count(N, mask_ratio)
    noise = torch.rand(B, N, device=x.device, generator=generator)
    ids_shuffle = noise.argsort(dim=1)
    ids_restore = ids_shuffle.argsort(dim=1)
    visible = x.gather(1, ids_shuffle[:, :keep, None].expand(-1, -1, C))
    # Rank < keep means visible; ranks are ids_restore, so the mask needs no second gather.
    mask = (ids_restore >= keep).to(torch.float32)
    return visible, mask, ids_restore


def patchify(images: torch.Tensor, p: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/p) * (W/p), p * p * C), in MAE's (py, px, channel) order per patch.

    H and W must be multiples of ``p`` (they need not be equal).
    """
    B, C, H, W = images.shape
    if H % p or W % p:
        raise ModelArgumentError(f"image size {H}x{W} is not a multiple of the patch size {p}")
    rows, cols = H // p, W // p
    x = images.reshape(B, C, rows, p, cols, p)
    x = x.permute(0, 2, 4, 3, 5, 1)  # (B, rows, cols, py, px, C)
    return x.reshape(B, rows * cols, p * p * C)


def unpatchify(patches: torch.Tensor, p: int, grid: tuple[int, int] | None = None) -> torch.Tensor:
    """The inverse of ``patchify``: (B, N, p * p * C) -> (B, C, rows * p, cols * p).

    ``grid`` is (rows, cols); None means a square grid (N must then be a square number).
    """
    B, N, D = patches.shape
    if D % (p * p):
        raise ModelArgumentError(f"a patch vector of {D} values is not p * p * channels for patch size {p}")
    C = D // (p * p)
    if grid is None:
        side = round(N ** 0.5)
        grid = (side, side)
    rows, cols = grid
    if rows * cols != N:
        raise ModelArgumentError(f"{N} patches do not fill a {rows}x{cols} grid; pass the grid (rows, cols)")
    x = patches.reshape(B, rows, cols, p, p, C).permute(0, 5, 1, 3, 2, 4)  # (B, C, rows, py, cols, px)
    return x.reshape(B, C, rows * p, cols * p)


def normalized_target(patches: torch.Tensor, eps: float = 1e-6
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MAE's normalised pixel target: ``(t - mean) / (var + eps) ** .5`` per patch.

    Returns ``(target, mean, std)``, ``mean`` and ``std`` of shape (B, N, 1) with
    ``std = (var + eps) ** .5`` (unbiased ``var``), so ``target * std + mean`` gives back the pixels:
    a prediction in target space de-normalises the same way (the reconstruction panel does so).
    """
    mean = patches.mean(dim=-1, keepdim=True)
    var = patches.var(dim=-1, keepdim=True, unbiased=True)
    std = (var + eps) ** 0.5
    return (patches - mean) / std, mean, std


def masked_mse(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``sum_n mask_n * mean_pixels (pred_n - target_n)^2 / sum_n mask_n`` over all samples' patches.

    Args:
        pred, target: (B, N, D) patch vectors.
        mask: (B, N), 1 on masked patches (the ones that count), 0 on visible ones.
    """
    with full_precision():
        per_patch = (at_least_float32(pred) - at_least_float32(target)).pow(2).mean(dim=-1)
        mask = mask.to(per_patch.dtype)
        return (per_patch * mask).sum() / mask.sum()


def reconstruction_target(images: torch.Tensor, p: int, norm_pix: bool) -> torch.Tensor:
    """The patch vectors a prediction is scored against: normalised per patch with ``norm_pix``
    (MAE's ``norm_pix_loss``, the seed's setting for its probes), else the plain pixels."""
    with full_precision():
        target = patchify(at_least_float32(images), p)
        return normalized_target(target)[0] if norm_pix else target


def mean_patch_baseline(images: torch.Tensor, p: int, mask: torch.Tensor, norm_pix: bool) -> torch.Tensor:
    """The loss of predicting every masked patch as its own mean colour, flat over the patch.

    It knows each patch's true mean, which no model is told, and nothing of its structure: a loss at
    or above it means the decoder learnt no more than a patch's average. With the normalised target
    the prediction is 0 and the loss is ``(D - 1) / D * var / (var + eps)`` averaged over masked
    patches (``D = p * p * 3``; the ``(D - 1) / D`` from the unbiased variance), just under 1 by
    construction; with plain pixels it is each patch's (biased) variance, averaged.
    """
    target = reconstruction_target(images, p, norm_pix)
    pred = torch.zeros_like(target) if norm_pix else target.mean(dim=-1, keepdim=True).expand_as(target)
    return masked_mse(pred, target, mask)


class EncoderOutput(NamedTuple):
    """What ``forward_encoder`` returns."""
    latent: torch.Tensor                 # (B, 1 + K, enc_dim): CLS, then the visible tokens (shuffled order)
    mask: torch.Tensor                   # (B, N) float32, 1 = masked, grid order
    ids_restore: torch.Tensor            # (B, N) long, see random_masking
    taps: dict[int, torch.Tensor]        # encoder block -> its output (B, 1 + K, enc_dim), for the skips
    grid: tuple[int, int]                # (rows, cols) of the images' patch grid


class MAEOutput(NamedTuple):
    """What ``forward`` returns: ``loss, pred, mask = mae(images)``."""
    loss: torch.Tensor                   # scalar, float32
    pred: torch.Tensor                   # (B, N, p * p * 3), in target space (normalised with norm_pix_loss)
    mask: torch.Tensor                   # (B, N) float32, 1 = masked


class MaskedAutoencoder(nn.Module):
    """MAE: ``encoder`` on the visible patches, ``MAEDecoder`` predicts the pixels of all patches.

    Args:
        encoder: a ``SkiplessViT`` with a class token and no register tokens, square patches.
        decoder_dim, decoder_depth, decoder_heads: MAE's 512, 8, 16 by default.
        mask_ratio: the default fraction of masked patches (MAE's 0.75); ``forward`` may override it.
        norm_pix_loss: score against per-patch normalised pixels (MAE's and the seed's choice).
        skip_pairs: (encoder block, decoder block) pairs for the seed's encoder-to-decoder skips,
            e.g. ``decoder.mirror_skip_pairs(12, 8)``; None or empty is the plain MAE.
    """

    def __init__(self, encoder: SkiplessViT, decoder_dim: int = 512, decoder_depth: int = 8,
                 decoder_heads: int = 16, mask_ratio: float = 0.75, norm_pix_loss: bool = True,
                 skip_pairs: Iterable[Sequence[int]] | None = None) -> None:
        super().__init__()
        if getattr(encoder, "cls_token", None) is None or encoder.num_prefix_tokens != 1:
            raise ModelArgumentError(
                "the MAE encoder needs exactly one prefix token, a class token (class_token=True, reg_tokens=0)")
        ph, pw = encoder.patch_embed.patch_size
        if ph != pw:
            raise ModelArgumentError(f"the MAE encoder needs square patches, got {ph}x{pw}")
        grid = tuple(encoder.patch_embed.grid_size)
        visible_count(grid[0] * grid[1], mask_ratio)  # refuse a bad default now, not at the first step
        self.encoder = encoder
        self.patch_size = ph
        self.mask_ratio = float(mask_ratio)
        self.norm_pix_loss = bool(norm_pix_loss)
        self.decoder = MAEDecoder(
            encoder.embed_dim, grid, ph, dec_dim=decoder_dim, dec_depth=decoder_depth, dec_heads=decoder_heads,
            in_chans=encoder.patch_embed.proj.in_channels, skip_pairs=skip_pairs, enc_depth=len(encoder.blocks))

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute every encoder and decoder block in the backward pass instead of keeping its activations."""
        self.encoder.set_grad_checkpointing(enable)
        self.decoder.grad_checkpointing = enable

    def forward_encoder(self, images: torch.Tensor, mask_ratio: float | None = None,
                        generator: torch.Generator | None = None) -> EncoderOutput:
        """Embed, add positions, mask, and encode CLS plus the visible patches (see the module doc)."""
        enc = self.encoder
        x = enc.patch_embed(images)
        if x.ndim == 4:  # dynamic_img_size: (B, rows, cols, C)
            grid = (x.shape[1], x.shape[2])
        else:
            grid = tuple(enc.patch_embed.grid_size)
        x = enc._pos_embed(x)  # (B, 1 + N, C): CLS prepended, positions added to all rows
        visible, mask, ids_restore = random_masking(
            x[:, 1:], self.mask_ratio if mask_ratio is None else mask_ratio, generator)
        x = torch.cat([x[:, :1], visible], dim=1)
        x = enc.norm_pre(enc.patch_drop(x))
        tapped = set(self.decoder.tapped_blocks)
        taps: dict[int, torch.Tensor] = {}
        recompute = enc.grad_checkpointing and torch.is_grad_enabled()
        for i, block in enumerate(enc.blocks):
            x = checkpoint(block, x) if recompute else block(x)
            if i in tapped:
                taps[i] = x
        return EncoderOutput(enc.norm(x), mask, ids_restore, taps, grid)

    def forward_decoder(self, latent: torch.Tensor, ids_restore: torch.Tensor,
                        taps: dict[int, torch.Tensor] | None = None,
                        grid: tuple[int, int] | None = None) -> torch.Tensor:
        """(B, N, p * p * 3) predicted patches; ``grid`` None is the encoder's native grid."""
        return self.decoder(latent, ids_restore, taps, grid)

    def target(self, images: torch.Tensor) -> torch.Tensor:
        """(B, N, p * p * 3) float32: what ``pred`` is scored against (normalised with ``norm_pix_loss``)."""
        return reconstruction_target(images, self.patch_size, self.norm_pix_loss)

    def forward_loss(self, images: torch.Tensor, pred: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """MAE's loss: per-patch MSE averaged over the masked patches (``masked_mse``)."""
        return masked_mse(pred, self.target(images), mask)

    def forward(self, images: torch.Tensor, mask_ratio: float | None = None,
                generator: torch.Generator | None = None) -> MAEOutput:
        """Mask, encode, decode, score: ``(loss, pred, mask)``."""
        enc = self.forward_encoder(images, mask_ratio, generator)
        pred = self.forward_decoder(enc.latent, enc.ids_restore, enc.taps, enc.grid)
        return MAEOutput(self.forward_loss(images, pred, enc.mask), pred, enc.mask)
