"""The feature API every evaluator and diagnostic uses: one small API instead of each evaluator slicing tokens its own way.

Two levels, in the spirit of timm's ``forward_intermediates``:

- ``patch_features(model, x, layers, kind, norm)``: what the evaluators need, the features of some
  blocks as patch grids ``(B, rows, cols, C)`` with the prefix tokens (CLS, registers) dropped;
- ``extract_features``: the raw material, every token of several blocks and several kinds (block
  outputs, attention queries/keys/values/probabilities) from one forward pass.

Block indices are resolved in one place (``resolve_layers``: ``"all"``, an index or a list, negative
counting from the end), and a request the backbone cannot answer (a block it does not have, an
image off its patch grid) raises ``FeatureRequestError``, a user-facing ``SkiplessError``.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import torch
from torch import nn

from ..errors import SkiplessError
from .attention import SoftmaxAttention

KINDS = ("out", "q", "k", "v", "attn")


class FeatureRequestError(SkiplessError, ValueError):
    """Features the backbone cannot give: a block it does not have, an image off its patch grid."""


def resolve_layers(layers: Any, depth: int) -> list[int]:
    """``"all"`` | a block index | a list of indices (negative count from the end) -> sorted, unique, >= 0.

    Raises:
        FeatureRequestError: a block that does not exist, or a value that is none of the above.
    """
    if isinstance(layers, str):
        if layers.strip() == "all":
            return list(range(depth))
        try:
            layers = int(layers)
        except ValueError:
            raise FeatureRequestError(f"layers must be 'all', a block index or a list of them, got {layers!r}") from None
    items = [layers] if isinstance(layers, int) else list(layers)
    out = set()
    for item in items:
        try:
            index = int(item)
        except (TypeError, ValueError):
            raise FeatureRequestError(f"layers must be 'all', a block index or a list of them, got {layers!r}") from None
        if not -depth <= index < depth:
            raise FeatureRequestError(f"block {index} is out of range: the backbone has {depth} blocks "
                                      f"(0..{depth - 1}, negative counts from the end)")
        out.add(index % depth)
    if not out:
        raise FeatureRequestError("layers is empty; give 'all', a block index or a list of them")
    return sorted(out)


def embed_tokens(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Patch embedding + CLS token + (interpolated) position embedding, as timm does before the blocks.
    Images come in the weights' dtype (float32 images reach a ``train.precision=64-true`` model's monitors)."""
    x = model.patch_embed(x.to(next(model.patch_embed.parameters()).dtype))
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
    layers: Iterable[int] | int | str = (-1,),
    kinds: Sequence[str] = ("out",),
    norm: bool = False,
) -> dict[tuple[str, int], torch.Tensor]:
    """Features of several blocks from one forward pass, prefix tokens included.

    Args:
        model: a ``SkiplessViT`` (or any timm ViT built with ``SoftmaxAttention``).
        x: images (B, 3, H, W), H and W multiples of the patch size.
        layers: see ``resolve_layers``.
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
        raise FeatureRequestError(f"unknown feature kinds {sorted(bad)}; expected some of {', '.join(KINDS)}")
    depth = len(model.blocks)
    wanted = resolve_layers(layers, depth)
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


def patch_features(model: nn.Module, x: torch.Tensor, layers: Iterable[int] | int | str = -1, kind: str = "out",
                   norm: bool = False) -> dict[int, torch.Tensor]:
    """Features of some blocks as patch grids, prefix tokens (CLS, registers) dropped.

    Args:
        model: as ``extract_features``.
        x: images (B, 3, H, W), H and W multiples of the patch size (else ``FeatureRequestError``).
        layers: see ``resolve_layers``.
        kind: ``out`` (block output), ``q``, ``k`` or ``v`` (attention inputs, heads concatenated).
        norm: the backbone's final LayerNorm on ``out`` features (``extract_features``).

    Returns:
        ``{block index (>= 0): (B, rows, cols, C)}``, in ascending block order.
    """
    if kind == "attn":
        raise FeatureRequestError("attention probabilities are not patch features; use extract_features")
    rows, cols = patch_grid(model, x.shape[-2], x.shape[-1])
    feats = extract_features(model, x, layers, (kind,), norm=norm)
    prefix = int(getattr(model, "num_prefix_tokens", 1))
    return {i: t[:, prefix:].reshape(t.shape[0], rows, cols, t.shape[-1]) for (_, i), t in sorted(feats.items())}


def patch_grid(model: nn.Module, height: int, width: int) -> tuple[int, int]:
    """The (rows, cols) patch grid of an image of the given size; raises if not a multiple of the patch."""
    ph, pw = model.patch_embed.patch_size
    if height % ph or width % pw:
        raise FeatureRequestError(f"image size {height}x{width} is not a multiple of the patch size {ph}x{pw}; "
                                  "pad or resize it")
    return height // ph, width // pw
