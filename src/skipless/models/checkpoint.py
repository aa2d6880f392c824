"""Backbone files: weights with timm's parameter names plus the ``create_vit`` arguments.

``save_backbone`` writes ``{"format", "args", "state_dict"}``; ``load_backbone`` rebuilds the model
from ``args`` and loads strictly (STYLE habits 6 and 9). A plain timm state dict (for example DINO's
released ViT-S/16) loads too when the caller names its ``arch``: it becomes a ``skip`` model.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from ..atomic import atomic_torch_save
from ..errors import SkiplessError
from .vit import SkiplessViT, backbone_args, create_vit

FORMAT = "skipless-backbone/1"
_WRAPPER_PREFIXES = ("module.", "backbone.", "_orig_mod.")


class BackboneLoadError(SkiplessError, RuntimeError):
    """A backbone file that cannot be loaded as asked."""


def _clean_key(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for prefix in _WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key, changed = key[len(prefix):], True
    return key


def backbone_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict with wrapper prefixes removed, on the CPU."""
    return {_clean_key(k): v.detach().cpu() for k, v in model.state_dict().items()}


def save_backbone(path: str | os.PathLike, model: SkiplessViT, extra: dict[str, Any] | None = None) -> Path:
    """Write a backbone-only file (atomically). ``extra`` holds metadata such as the epoch."""
    if not hasattr(model, "skipless_args"):
        raise TypeError("save_backbone needs a model built by skipless.models.create_vit")
    payload = {"format": FORMAT, "args": backbone_args(model), "state_dict": backbone_state_dict(model),
               "extra": dict(extra or {})}
    return atomic_torch_save(payload, path)


def _read(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"no backbone file at {path}; expected a file written by save_backbone "
                                "(runs/<run>/backbone.pt) or a timm state dict")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # corrupt, truncated, or not a torch file
        raise BackboneLoadError(f"{path} is not a readable backbone file ({type(err).__name__}: {err})") from err


def load_backbone(path: str | os.PathLike, map_location: str | torch.device = "cpu",
                  arch: str | None = None) -> SkiplessViT:
    """Rebuild the backbone stored at ``path`` and load its weights strictly.

    Args:
        path: a file from ``save_backbone``, or a plain timm ViT state dict (then ``arch`` is needed).
        map_location: device of the returned model.
        arch: only for plain state dicts: the architecture name (``vit_small`` for DINO ViT-S/16).
    """
    path = Path(path)
    payload = _read(path)
    if isinstance(payload, dict) and payload.get("format") == FORMAT:
        args, state = payload["args"], payload["state_dict"]
    elif isinstance(payload, dict) and payload and all(isinstance(v, torch.Tensor) for v in payload.values()):
        if arch is None:
            raise BackboneLoadError(f"{path} is a plain state dict without model arguments; pass arch= "
                                    "(e.g. vit_small) to load it as a 'skip' ViT")
        state = {_clean_key(k): v for k, v in payload.items()}
        patch = state["patch_embed.proj.weight"].shape[-1] if "patch_embed.proj.weight" in state else 16
        args = dict(arch=arch, residual="skip", patch_size=patch)
    else:
        raise BackboneLoadError(f"{path} holds neither a skipless backbone ({FORMAT}) nor a state dict")

    stored = dict(args)
    build = {k: v for k, v in stored.items() if k != "arch"}
    try:
        # The weights are overwritten below, so skip the (SVD-heavy) initialisation when rebuilding.
        model = create_vit(stored["arch"], **{**build, "init": "timm"})
    except (KeyError, TypeError, ValueError) as err:
        raise BackboneLoadError(f"{path}: cannot rebuild the backbone from its stored arguments: {err}") from err
    model.skipless_args = {**model.skipless_args, **stored}
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong_shape = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if missing or unexpected or wrong_shape:
        def head(keys):
            return ", ".join(keys[:4]) + (" ..." if len(keys) > 4 else "")
        raise BackboneLoadError(
            f"{path} does not match the architecture {model.skipless_args['arch']} it names: "
            f"{len(missing)} missing keys ({head(missing)}), {len(unexpected)} unexpected keys "
            f"({head(unexpected)}), {len(wrong_shape)} shape mismatches ({head(wrong_shape)})")
    model.load_state_dict(state, strict=True)
    return model.to(map_location)
