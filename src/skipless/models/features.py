"""The feature API every evaluator and diagnostic uses (STYLE habit 3).

``extract_features`` runs the backbone once and returns, for any set of blocks, the block outputs
and that block's attention queries, keys, values or probabilities. TokenCut reads keys of every
block in one pass; the probe reads block outputs; PCA reads either.
"""
from __future__ import annotations

from typing import Iterable, Sequence

import torch
from torch import nn

from .attention import SoftmaxAttention

KINDS = ("out", "q", "k", "v", "attn")


def _resolve_layers(layers: Iterable[int] | str, depth: int) -> list[int]:
    if isinstance(layers, str):
        if layers != "all":
            raise ValueError(f"layers must be a list of block indices or 'all', got {layers!r}")
        return list(range(depth))
    out = []
    for i in layers:
        j = i + depth if i < 0 else i
        if not 0 <= j < depth:
            raise ValueError(f"block index {i} out of range for a backbone of depth {depth}")
        out.append(j)
    return sorted(set(out))


def embed_tokens(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Patch embedding + CLS token + (interpolated) position embedding, as timm does before the blocks."""
    x = model.patch_embed(x)
    x = model._pos_embed(x)
    x = model.patch_drop(x)
    return model.norm_pre(x)


def final_layer_norm(model: nn.Module) -> nn.Module:
    """The backbone's last LayerNorm. timm builds ``norm`` for token pooling but, with
    ``global_pool="avg"``, leaves ``norm`` an Identity and puts the LayerNorm after pooling
    (``fc_norm``); applied per token it plays the same role for dense features."""
    if isinstance(model.norm, nn.Identity) and not isinstance(getattr(model, "fc_norm", nn.Identity()), nn.Identity):
        return model.fc_norm
    return model.norm


def extract_features(
    model: nn.Module,
    x: torch.Tensor,
    layers: Iterable[int] | str = (-1,),
    kinds: Sequence[str] = ("out",),
    norm: bool = False,
) -> dict[tuple[str, int], torch.Tensor]:
    """Features of several blocks from one forward pass.

    Args:
        model: a ``SkiplessViT`` (or any timm ViT built with ``SoftmaxAttention``).
        x: images (B, 3, H, W), H and W multiples of the patch size.
        layers: 0-based block indices (negative counts from the end) or ``"all"``.
        kinds: any of ``out`` (block output tokens, (B, 1+N, D), CLS first), ``q``/``k``/``v``
            (attention inputs of that block, heads concatenated, (B, 1+N, D)) and ``attn``
            (attention probabilities, (B, heads, 1+N, 1+N)).
        norm: apply the backbone's final LayerNorm to ``out`` features: ``model.norm``, or
            ``model.fc_norm`` for a ``global_pool="avg"`` model, where timm moves it after pooling.

    Returns:
        ``{(kind, block_index): tensor}`` with non-negative block indices. Patch tokens follow
        the prefix tokens in row-major order of the (H/p, W/p) grid.
    """
    bad = set(kinds) - set(KINDS)
    if bad:
        raise ValueError(f"unknown feature kinds {sorted(bad)}; expected some of {', '.join(KINDS)}")
    depth = len(model.blocks)
    wanted = _resolve_layers(layers, depth)
    attn_kinds = set(kinds) - {"out"}
    result: dict[tuple[str, int], torch.Tensor] = {}
    attn_modules = [blk.attn for blk in model.blocks]
    final_norm = final_layer_norm(model)
    if attn_kinds and not all(isinstance(m, SoftmaxAttention) for m in attn_modules):
        raise TypeError("q/k/v/attn features need a backbone built by skipless.models.create_vit")
    try:
        for i in wanted:
            attn_modules[i].capture = set(attn_kinds)
        h = embed_tokens(model, x)
        for i, blk in enumerate(model.blocks):
            if i > wanted[-1]:
                break
            h = blk(h)
            if i not in wanted:
                continue
            if "out" in kinds:
                result[("out", i)] = final_norm(h) if norm else h
            captured = attn_modules[i].captured
            for kind in attn_kinds:
                t = captured[kind]
                if kind != "attn":  # (B, heads, N, d_h) -> (B, N, heads * d_h)
                    t = t.transpose(1, 2).flatten(2)
                result[(kind, i)] = t
    finally:
        for m in attn_modules:
            if isinstance(m, SoftmaxAttention):
                m.capture = set()
                m.captured = {}
    return result


def patch_grid(model: nn.Module, height: int, width: int) -> tuple[int, int]:
    """The (rows, cols) patch grid of an image of the given size; raises if not a multiple of the patch."""
    ph, pw = model.patch_embed.patch_size
    if height % ph or width % pw:
        raise ValueError(f"image size {height}x{width} is not a multiple of the patch size {ph}x{pw}; pad or resize it")
    return height // ph, width // pw
