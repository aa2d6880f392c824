"""Encoder-to-decoder skips of the UNet MAE (Zhang et al., seed 002: Sec. 3.2, Sec. 4, Fig. 6, App. 8.2).

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

from collections.abc import Iterable, Sequence
from functools import partial

import torch
from torch import nn

from ...errors import ModelArgumentError

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
