"""Backbones from timm's pretrained weights, read from the local Hugging Face cache and never downloaded.

``timm.create_model(name, pretrained=True)`` would fetch a missing file from the Hub. Here the file
is looked up with ``huggingface_hub.try_to_load_from_cache``, which only reads the disk, and handed
to timm as a local file (``pretrained_cfg_overlay=dict(file=...)``), so a missing cache is one clear
error and nothing can reach the network. The cache is where ``huggingface_hub`` keeps it:
``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub`` (read when called, so a
test or notebook may set them late). To fill it, once, on a machine with network:
``python -c "import timm; timm.create_model('vit_small_patch16_224.dino', pretrained=True)"``.

The weights go into a ``skip`` ``SkiplessViT`` of the matching architecture (by width, depth and
heads), loaded strictly; because timm models may differ in what the weights do not show
(activation, norm placement), the result is compared with timm's own model on a random image at
the native size and refused if they differ.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import timm
import torch
from huggingface_hub import constants, try_to_load_from_cache
from timm.models.vision_transformer import VisionTransformer

from .checkpoint import BackboneLoadError, build_backbone, load_state_strict
from .vit import ARCHS, SkiplessViT

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # what timm stores on the Hub, preferred first


class TimmWeightsNotCachedError(BackboneLoadError):
    """timm weights asked for by name that are not in the local cache."""


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache, resolved from the environment now (as ``huggingface_hub`` does at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    return Path(constants.HF_HUB_CACHE)


def _pretrained_cfg(name: str) -> Any:
    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except RuntimeError as err:  # a known architecture with an unknown tag
        raise BackboneLoadError(f"{name!r} is not a timm model with pretrained weights ({err}); "
                                "expected a name from timm.list_pretrained('vit_*')") from err
    if cfg is None:
        raise BackboneLoadError(f"{name!r} is not a timm model with pretrained weights; "
                                "expected a name from timm.list_pretrained('vit_*'), e.g. vit_small_patch16_224.dino")
    return cfg


def cached_weights(name: str) -> Path:
    """The local file of timm's pretrained weights ``name`` (e.g. ``vit_small_patch16_224.dino``)."""
    cfg = _pretrained_cfg(name)
    if not cfg.hf_hub_id:
        raise BackboneLoadError(f"timm's {name} weights are not on the Hugging Face hub; download them yourself "
                                "and pass the file with its architecture (CKPT=<file>:vit_small)")
    cache = hub_cache_dir()
    for filename in ([cfg.hf_hub_filename] if cfg.hf_hub_filename else WEIGHT_FILES):
        found = try_to_load_from_cache(cfg.hf_hub_id, filename, cache_dir=cache)
        if isinstance(found, str):
            return Path(found)
    raise TimmWeightsNotCachedError(
        f"timm's {name} weights ({cfg.hf_hub_id}) are not in the local Hugging Face cache {cache}; skipless never "
        f"downloads: fetch them once with timm.create_model({name!r}, pretrained=True) or set HF_HUB_CACHE")


def _vit_args(model: Any, name: str) -> dict[str, Any]:
    if not isinstance(model, VisionTransformer):
        raise BackboneLoadError(f"timm's {name} is a {type(model).__name__}, not a VisionTransformer")
    shape = dict(embed_dim=model.embed_dim, depth=len(model.blocks), num_heads=model.blocks[0].attn.num_heads)
    arch = next((a for a, cfg in ARCHS.items() if cfg == shape), None)
    if arch is None:
        known = "; ".join(f"{a} {tuple(c.values())}" for a, c in ARCHS.items())
        raise BackboneLoadError(f"timm's {name} is a ViT of (width, depth, heads) {tuple(shape.values())}; "
                                f"skipless builds {known}")
    return dict(arch=arch, residual="skip", init="timm", patch_size=model.patch_embed.patch_size[0],
                img_size=model.patch_embed.img_size[0], pos_embed_interp="dino")


def timm_backbone_args(name: str) -> dict[str, Any]:
    """The ``create_vit`` arguments that hold timm's ``name`` weights (no weights are read)."""
    _pretrained_cfg(name)
    return _vit_args(timm.create_model(name, pretrained=False, num_classes=0), name)


def load_timm_backbone(name: str, map_location: str | torch.device = "cpu") -> SkiplessViT:
    """A ``skip`` ``SkiplessViT`` holding timm's pretrained ``name`` weights from the local cache.

    Position embeddings are resampled as DINO does (``pos_embed_interp="dino"``); at the native size
    the outputs are timm's own.
    """
    file = cached_weights(name)
    overlay = dict(file=str(file), source=None, custom_load=False)  # a local file, whatever the Hub says
    ref = timm.create_model(name, pretrained=True, num_classes=0, pretrained_cfg_overlay=overlay).eval()
    model = build_backbone(_vit_args(ref, name), f"timm's {name}")
    load_state_strict(model, ref.state_dict(), f"timm's {name} ({file})")
    model.eval()
    size = model.patch_embed.img_size
    x = torch.randn(1, 3, *size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = model(x), ref(x)
    err = ((ours - theirs).abs().max() / theirs.abs().max().clamp_min(1e-6)).item()
    if err > 1e-4:
        raise BackboneLoadError(f"skipless's ViT does not reproduce timm's {name} on its weights (relative "
                                f"difference {err:.2g}); that model differs in something its weights do not show")
    return model.to(map_location)
