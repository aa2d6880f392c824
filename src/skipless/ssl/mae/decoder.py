"""MAE's lightweight decoder (He et al. 2022, Section 3, "MAE decoder"), with the seed's optional
encoder-to-decoder skips (Zhang et al., seed 002, Sec. 4 and Fig. 6; the wiring below).

The decoder takes the encoder's output for CLS and the visible patches, maps it to its own width
(``decoder_embed``), puts a shared learnable ``mask_token`` at every masked position (unshuffled
with ``ids_restore``), adds a fixed 2-D sin-cos position embedding (``decoder_pos_embed``, frozen,
a zero row for CLS as in MAE), runs ``dec_depth`` standard pre-norm transformer blocks (timm
``Block``: MLP ratio 4, qkv bias, LayerNorm eps 1e-6, as MAE), a final LayerNorm and a linear head
to the ``p * p * 3`` pixel values of each patch. CLS is carried through the blocks and dropped after
the head. MAE's defaults, which the seed keeps: 8 blocks of width 512 with 16 heads.

The names (``decoder_embed``, ``mask_token``, ``decoder_pos_embed``, ``decoder_blocks``,
``decoder_norm``, ``decoder_pred``) are MAE's, so its released decoder weights map by name.

Initialisation is MAE's ``initialize_weights`` for the decoder: mask tokens normal std .02, every
Linear xavier-uniform with zero bias, every LayerNorm weight 1 and bias 0; the seed's skips take the
same rules (it states none of its own).

**Encoder-to-decoder skips of the UNet MAE (Zhang et al., seed 002: Sec. 3.2, Sec. 4, Fig. 6, App. 8.2).**

The seed decays the encoder's identity shortcuts so its last layer learns abstract features, and
gives the decoder the low-level detail through U-Net-style skips instead (Ronneberger et al. 2015):
"we inject output from every other encoder layer into the corresponding decoder layer. To match
spatial dimensions, injected encoder features are combined with learnable masked tokens before
channel-wise concatenation." Without them its ImageNet-100 probe falls from 83.6 to 61.5 (Table 3a).

The seed says no more: not which layers "correspond" (ViT-B has 12 encoder and 8 decoder blocks,
so "every other" gives 6 taps for 8 blocks), nor how the widths (768 vs 512) meet, nor what happens
to CLS, norms or the mask tokens. The suite's reading, implemented exactly:

- Pairs (``mirror_skip_pairs``): ``S = min(dec_depth, enc_depth // 2)`` skips. The tapped encoder
  blocks are every other block ending at the last one, shallowest first:
  ``enc_depth-1-2(S-1), ..., enc_depth-3, enc_depth-1`` (ViT-B, decoder 8: blocks 1, 3, 5, 7, 9, 11).
  As in a U-Net the shallowest tap feeds the last decoder block: the j-th shallowest tap (j from 0)
  feeds decoder block ``dec_depth-1-j`` (1->7, 3->6, 5->5, 7->4, 9->3, 11->2; decoder blocks 0 and 1
  get none). Indices are 0-based block numbers; a tap is the block's output.
- Each skip (``EncoderSkip``) has its own LayerNorm(enc_dim) (eps 1e-6, MAE's norm) then
  Linear(enc_dim, dec_dim) on the tapped block's whole output, CLS row included, since the raw block
  outputs of a decayed encoder have no common scale and the decoder's width differs from the
  encoder's; its own learnable mask token (dec_dim, normal std .02 as MAE's) fills the masked
  positions, and the tokens are put back in patch order with ``ids_restore``, exactly as MAE's
  decoder does with its input. No position embedding is added to the skip: the decoder stream it
  is concatenated to carries it.
- Fusion: before decoder block ``d`` the stream ``x`` becomes ``Linear(2 dec_dim, dec_dim)(cat([x,
  skip], -1))`` (one linear per skip), then block ``d`` runs on it; the CLS row is fused like the
  others.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import partial

import torch
from timm.models import checkpoint
from timm.models.vision_transformer import Block
from torch import nn

from ...errors import ModelArgumentError
from ...models.init import mae_linear_and_norm_init_
from ...models.sincos import sincos_2d


LayerNorm = partial(nn.LayerNorm, eps=1e-6)  # MAE's norm_layer


def mirror_skip_pairs(enc_depth: int, dec_depth: int) -> list[tuple[int, int]]:
    """The suite's U-Net pairs ``(encoder block, decoder block)``, shallowest tap first (see above).

    ``(12, 8)`` -> ``[(1, 7), (3, 6), (5, 5), (7, 4), (9, 3), (11, 2)]``; ``(12, 4)`` ->
    ``[(5, 3), (7, 2), (9, 1), (11, 0)]``; ``(4, 8)`` -> ``[(1, 7), (3, 6)]``.
    """
    count = min(dec_depth, enc_depth // 2)
    taps = [enc_depth - 1 - 2 * (count - 1 - j) for j in range(count)]
    return [(tap, dec_depth - 1 - j) for j, tap in enumerate(taps)]


def check_skip_pairs(pairs: Iterable[Sequence[int]] | None, enc_depth: int, dec_depth: int
                     ) -> list[tuple[int, int]]:
    """``pairs`` as a list of ``(encoder block, decoder block)`` int tuples, or a one-sentence
    ``ModelArgumentError``: each index must be a block that exists, counted from 0 (negative
    indices are refused, not read from the end), and no decoder block may receive two skips. One
    encoder block may feed several decoder blocks. None means no skip."""
    checked: list[tuple[int, int]] = []
    for pair in pairs or ():
        if (isinstance(pair, (str, bytes)) or len(pair) != 2
                or not all(isinstance(i, int) and not isinstance(i, bool) for i in pair)):
            raise ModelArgumentError(f"skip pair {pair!r} is not two block indices (encoder block, decoder block)")
        enc, dec = pair
        if not (0 <= enc < enc_depth and 0 <= dec < dec_depth):
            raise ModelArgumentError(
                f"skip pair ({enc}, {dec}) names a block that does not exist: the encoder has blocks "
                f"0..{enc_depth - 1} and the decoder 0..{dec_depth - 1} (negative indices are not allowed)")
        if any(dec == d for _, d in checked):
            raise ModelArgumentError(f"decoder block {dec} receives two skips; each decoder block takes at most one")
        checked.append((enc, dec))
    return checked


def unshuffle(tokens: torch.Tensor, mask_token: torch.Tensor, ids_restore: torch.Tensor) -> torch.Tensor:
    """(B, 1 + K, D) CLS + visible tokens in shuffled order -> (B, 1 + N, D) in patch order, the
    masked positions filled with ``mask_token`` (1, 1, D): MAE's decoder input step."""
    B, N = ids_restore.shape
    cls, visible = tokens[:, :1], tokens[:, 1:]
    fill = mask_token.to(tokens.dtype).expand(B, N - visible.shape[1], -1)
    patches = torch.cat([visible, fill], dim=1)
    patches = patches.gather(1, ids_restore[..., None].expand(-1, -1, tokens.shape[-1]))
    return torch.cat([cls, patches], dim=1)


class EncoderSkip(nn.Module):
    """One skip: LayerNorm -> Linear(enc_dim, dec_dim) on a tapped encoder output, its own mask token
    at the masked positions, and the Linear(2 dec_dim, dec_dim) that fuses it into the decoder stream."""

    def __init__(self, enc_dim: int, dec_dim: int) -> None:
        super().__init__()
        self.norm = LayerNorm(enc_dim)
        self.embed = nn.Linear(enc_dim, dec_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dec_dim))
        self.fuse = nn.Linear(2 * dec_dim, dec_dim)

    def expand(self, tap: torch.Tensor, ids_restore: torch.Tensor) -> torch.Tensor:
        """(B, 1 + K, enc_dim) tapped output -> (B, 1 + N, dec_dim) in patch order."""
        return unshuffle(self.embed(self.norm(tap)), self.mask_token, ids_restore)

    def forward(self, x: torch.Tensor, tap: torch.Tensor, ids_restore: torch.Tensor) -> torch.Tensor:
        """The decoder stream ``x`` (B, 1 + N, dec_dim) with this skip fused in."""
        return self.fuse(torch.cat([x, self.expand(tap, ids_restore)], dim=-1))


class MAEDecoder(nn.Module):
    """MAE's decoder over a ``grid`` of ``patch_size`` patches, optionally with encoder skips.

    Args:
        enc_dim: the encoder's width.
        grid: (rows, cols) of the patch grid the position table is built for (another grid gets
            its own sin-cos table at call time: the table is a formula, not a learnt thing).
        patch_size: the patch side ``p``; the head predicts ``p * p * in_chans`` values per patch.
        dec_dim, dec_depth, dec_heads: width, number of blocks and heads (MAE: 512, 8, 16).
        in_chans: image channels (3).
        skip_pairs: ``(encoder block, decoder block)`` pairs (``check_skip_pairs``); None or
            empty is the plain MAE decoder.
        enc_depth: the encoder's number of blocks, to check ``skip_pairs`` against.
    """

    def __init__(self, enc_dim: int, grid: tuple[int, int], patch_size: int, dec_dim: int = 512,
                 dec_depth: int = 8, dec_heads: int = 16, in_chans: int = 3,
                 skip_pairs: Iterable[Sequence[int]] | None = None, enc_depth: int | None = None) -> None:
        super().__init__()
        if dec_dim % 4 or dec_dim % dec_heads:
            raise ModelArgumentError(
                f"decoder width {dec_dim} must be a multiple of 4 (the 2-D sin-cos table) and of the "
                f"{dec_heads} heads")
        if skip_pairs and enc_depth is None:
            raise ModelArgumentError("skip_pairs need the encoder's depth (enc_depth) to be checked")
        pairs = check_skip_pairs(skip_pairs, enc_depth or 0, dec_depth)
        self.grid = (int(grid[0]), int(grid[1]))
        self.patch_size = patch_size
        self.decoder_embed = nn.Linear(enc_dim, dec_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dec_dim))
        self.decoder_pos_embed = nn.Parameter(sincos_2d(dec_dim, *self.grid, cls_token=True), requires_grad=False)
        self.decoder_blocks = nn.ModuleList(
            Block(dec_dim, dec_heads, mlp_ratio=4.0, qkv_bias=True, norm_layer=LayerNorm) for _ in range(dec_depth))
        self.decoder_norm = LayerNorm(dec_dim)
        self.decoder_pred = nn.Linear(dec_dim, patch_size * patch_size * in_chans)
        self.skip_pairs = pairs
        self._skip_source = {dec: enc for enc, dec in pairs}  # decoder block -> the encoder block it receives
        # Keyed by the decoder block a skip feeds (a str: ModuleDict keys), so the state dict says where it goes.
        self.skips = nn.ModuleDict({str(dec): EncoderSkip(enc_dim, dec_dim) for _, dec in pairs})
        self.grad_checkpointing = False  # recompute each block in the backward pass (model.set_grad_checkpointing)
        self._init_weights()

    @property
    def tapped_blocks(self) -> list[int]:
        """The encoder blocks whose outputs the skips need, sorted."""
        return sorted({enc for enc, _ in self.skip_pairs})

    def _init_weights(self) -> None:
        """MAE's decoder initialisation (``models_mae.py``: ``initialize_weights`` / ``_init_weights``)."""
        nn.init.normal_(self.mask_token, std=0.02)
        for skip in self.skips.values():
            nn.init.normal_(skip.mask_token, std=0.02)
        mae_linear_and_norm_init_(self)

    def pos_embed(self, grid: tuple[int, int]) -> torch.Tensor:
        """(1, 1 + rows * cols, dec_dim): the stored table for the built grid, else a fresh one."""
        if tuple(grid) == self.grid:
            return self.decoder_pos_embed
        table = sincos_2d(self.decoder_pos_embed.shape[-1], *grid, cls_token=True)
        return table.to(self.decoder_pos_embed.device)

    def forward(self, latent: torch.Tensor, ids_restore: torch.Tensor,
                taps: Mapping[int, torch.Tensor] | None = None, grid: tuple[int, int] | None = None) -> torch.Tensor:
        """Predict every patch's pixels.

        Args:
            latent: (B, 1 + K, enc_dim) the encoder's output, CLS first, visible tokens shuffled.
            ids_restore: (B, N) from ``autoencoder.random_masking``.
            taps: encoder block index -> that block's output (B, 1 + K, enc_dim), for each tapped block.
            grid: (rows, cols) of the images' patch grid; None is the built grid.

        Returns:
            (B, N, p * p * in_chans), patches in grid order (CLS dropped).
        """
        taps = taps or {}
        missing = [enc for enc in self.tapped_blocks if enc not in taps]
        if missing:
            raise ModelArgumentError(f"the decoder's skips need the outputs of encoder blocks {missing}")
        grid = self.grid if grid is None else (int(grid[0]), int(grid[1]))
        if grid[0] * grid[1] != ids_restore.shape[1]:
            raise ModelArgumentError(
                f"{ids_restore.shape[1]} patches do not fill a {grid[0]}x{grid[1]} grid; pass the images' grid")
        x = unshuffle(self.decoder_embed(latent), self.mask_token, ids_restore)
        x = x + self.pos_embed(grid).to(x.dtype)
        recompute = self.grad_checkpointing and torch.is_grad_enabled()
        for d, block in enumerate(self.decoder_blocks):
            if d in self._skip_source:
                x = self.skips[str(d)](x, taps[self._skip_source[d]], ids_restore)
            x = checkpoint(block, x) if recompute else block(x)
        x = self.decoder_pred(self.decoder_norm(x))
        return x[:, 1:]
