"""Other vision transformers from timm, trained by ``make train`` with their skips and, optionally, token graying.

"Always Skip Attention" (seeds/003, Section 6.1, Table 4) applies DCT token graying to Swin-S (patch 4,
window 7), CaiT-S (24 layers) and PVTv2-b3 trained on ImageNet-1k with timm. Here such a model is
``model.family=timm``: ``timm.create_model(model.timm_name, num_classes=0, **model.timm_args)`` (a mapping), timm's own
init, skips and parameter names (a timm state dict of the same name loads as it is), with graying as a
forward pre-hook on the model's ``patch_embed``: the images are grayed on the grid of ``model.patch_size``
patches just before the stem reads them, as ``token_graying.GrayedPatchEmbed`` does for our ViT. For Swin
and CaiT that grid is the stem's own patches (4 and 16 px); PVTv2's stem is an overlapping 7 x 7
convolution of stride 4, whose tokens are not disjoint patches, and the graying runs on the stride's 4-px
grid, which tiles the image as its tokens do (the seed does not say what it did there).

Only supervised training builds these (``supervised/classifier.py``); the backbone file they export says
``family: timm``, and the evaluators, ``make finetune`` and pretraining, which read ViT tokens, refuse it
in one sentence (``checkpoint.build_backbone``, the schemas).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import timm
import torch
from torch import nn

from .token_graying import DEFAULT_EPS, check_graying, gray_images

FAMILIES = ("vit", "timm")


class TimmFamilyError(ValueError):
    """A timm model name or constructor arguments that cannot be built."""


def timm_kwargs(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """``model.timm_args`` (a mapping, e.g. ``{embed_dim: 48, depths: [1, 1, 1, 1]}``) as keyword arguments of
    timm's constructor; lists become tuples, as timm's signatures write them."""
    return {str(k): tuple(v) if isinstance(v, (list, tuple)) else v for k, v in dict(args or {}).items()}


def _gray_hook(patch: int, method: str, eps: float):
    def hook(module: nn.Module, args: tuple) -> tuple:
        with torch.no_grad():  # a preprocessing of the input: no gradient to the pixels
            return (gray_images(args[0], patch, method, eps), *args[1:])
    return hook


def create_timm_backbone(timm_name: str, img_size: int, patch_size: int, token_graying: Mapping[str, Any] | None = None,
                         drop_path_rate: float = 0.0, timm_args: Mapping[str, Any] | None = None) -> nn.Module:
    """A timm model without its classifier (``num_classes=0``: ``forward`` gives the pooled feature of
    ``num_features``), at ``img_size`` when its constructor takes one (Swin and CaiT fix it; PVTv2 does not),
    with token graying on its ``patch_embed`` input when ``token_graying['method']`` is not ``none``.

    ``skipless_args`` holds what rebuilds it (``family: timm``), so ``save_backbone`` exports it as it does a ViT.

    Raises:
        TimmFamilyError: an unknown name, or arguments timm's constructor refuses (one sentence).
    """
    if not timm.is_model(timm_name):
        raise TimmFamilyError(f"model.timm_name={timm_name!r} is not a timm model; expected a name of "
                              f"timm.list_models(), e.g. swin_small_patch4_window7_224")
    kwargs = {"num_classes": 0, "drop_path_rate": float(drop_path_rate), **timm_kwargs(timm_args)}
    try:
        try:
            model = timm.create_model(timm_name, pretrained=False, img_size=int(img_size), **kwargs)
        except TypeError as err:
            if "img_size" not in str(err):
                raise
            model = timm.create_model(timm_name, pretrained=False, **kwargs)
    except (TypeError, ValueError, AssertionError, RuntimeError) as err:
        given = ", ".join(f"{k}={v}" for k, v in timm_kwargs(timm_args).items()) or "no model.timm_args"
        raise TimmFamilyError(f"timm cannot build {timm_name} at {img_size} px with {given} ({err}); expected "
                              f"arguments of its constructor that fit each other") from None
    graying = dict(token_graying or {})
    method = graying.get("method") or "none"
    eps = DEFAULT_EPS if graying.get("eps") is None else float(graying["eps"])
    check_graying(method, eps)
    if method != "none":
        if not isinstance(getattr(model, "patch_embed", None), nn.Module):
            raise TimmFamilyError(f"token graying needs the model's patch embedding, and {timm_name} has no "
                                  "patch_embed module; expected a Swin, CaiT, PVT or ViT-like timm model")
        model.patch_embed.register_forward_pre_hook(_gray_hook(int(patch_size), method, eps))
    model.skipless_args = {"family": "timm", "timm_name": timm_name, "timm_args": timm_kwargs(timm_args),
                           "img_size": int(img_size), "patch_size": int(patch_size),
                           "token_graying": {"method": method, "eps": graying.get("eps")}}
    return model
