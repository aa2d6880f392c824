"""The masked autoencoder (He et al. 2022) around a suite ViT, with the seed's optional UNet skips
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

The loss (``loss.py``) is MAE's: per-patch MSE on the masked patches, against per-patch normalised
pixels with ``norm_pix_loss`` (the seed's setting for its probes; its Figure 2 used plain pixels).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import torch
from timm.models import checkpoint
from torch import nn

from ...errors import ModelArgumentError
from ...models.vit import SkiplessViT
from .decoder import MAEDecoder
from .loss import masked_mse, reconstruction_target
from .masking import random_masking, visible_count


class EncoderOutput(NamedTuple):
    """What ``forward_encoder`` returns."""
    latent: torch.Tensor                 # (B, 1 + K, enc_dim): CLS, then the visible tokens (shuffled order)
    mask: torch.Tensor                   # (B, N) float32, 1 = masked, grid order
    ids_restore: torch.Tensor            # (B, N) long, see masking.random_masking
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
            e.g. ``skips.mirror_skip_pairs(12, 8)``; None or empty is the plain MAE.
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
        """MAE's loss: per-patch MSE averaged over the masked patches (``loss.masked_mse``)."""
        return masked_mse(pred, self.target(images), mask)

    def forward(self, images: torch.Tensor, mask_ratio: float | None = None,
                generator: torch.Generator | None = None) -> MAEOutput:
        """Mask, encode, decode, score: ``(loss, pred, mask)``."""
        enc = self.forward_encoder(images, mask_ratio, generator)
        pred = self.forward_decoder(enc.latent, enc.ids_restore, enc.taps, enc.grid)
        return MAEOutput(self.forward_loss(images, pred, enc.mask), pred, enc.mask)
