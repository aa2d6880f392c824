"""Backbone files: weights with timm's parameter names plus the ``create_vit`` arguments.

A backbone of another family (``make train MODEL=resnet``: ``family: timm`` in its arguments,
``timm_family.py``) is written the same way and rebuilt from its arguments by ``timm_family.backbone_from_args``;
so is a causal language model (``family: lm``, ``causal_lm.causal_lm_from_args``).

``save_backbone`` writes ``{"format", "args", "state_dict"}``; ``load_backbone`` rebuilds the model
from ``args`` and loads strictly (a silently ignored key would hide a wrong architecture).

A plain state dict in timm's names (DINO's released ``dino_deitsmall16_pretrain.pth``, a timm
ViT) loads too when the caller names its ``arch``: it becomes a ``skip`` model with DINO's
position-embedding resample, patch size and native grid read off ``patch_embed.proj.weight`` and
``pos_embed``. It may be wrapped the way training checkpoints store it (under ``teacher``, which
DINO evaluates, ``state_dict``, ``model`` or ``student``: the first present wins) and prefixed
(``module.``, ``backbone.``, ``_orig_mod.``). Keys of DINO's projection head (``head.mlp.*``,
``head.last_layer.*``, in DINO's full training checkpoints) are the only ones ever dropped, and
``plain_state_dict`` says which; everything else must match the model exactly.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..atomic import atomic_torch_save
from ..errors import SkiplessError
from .causal_lm import LM_FAMILY, causal_lm_from_args
from .timm_family import backbone_from_args, family_of, model_name
from .vit import ARCHS, SkiplessViT, backbone_args, create_vit

FORMAT = "skipless-backbone/1"
# Backbone files written before ``pos_embed_interp`` existed were trained with timm's resample.
LEGACY_POS_EMBED_INTERP = "timm"
_WRAPPER_PREFIXES = ("module.", "backbone.", "_orig_mod.")
WRAPPER_KEYS = ("teacher", "state_dict", "model", "student")
# DINOHead: mlp Linear (+ BatchNorm with use_bn) layers, then the weight-normalised last layer
# (old ``weight_g``/``weight_v`` names, or torch's parametrizations).
_DINO_HEAD_KEY = re.compile(r"head\.(mlp\.\d+\.(weight|bias|running_mean|running_var|num_batches_tracked)"
                            r"|last_layer\.(weight|weight_g|weight_v|parametrizations\.weight\.original[01]))")

_log = logging.getLogger(__name__)


class BackboneLoadError(SkiplessError, RuntimeError):
    """A backbone file that cannot be loaded as asked."""


class ArchRequiredError(BackboneLoadError):
    """A plain state dict was given without the architecture it needs."""


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
        raise TypeError("save_backbone needs a model built by skipless.models.create_vit (or create_causal_lm, or "
                        "the timm family's factory), which sets skipless_args")
    payload = {"format": FORMAT, "args": backbone_args(model), "state_dict": backbone_state_dict(model),
               "extra": dict(extra or {})}
    return atomic_torch_save(payload, path)


def _read(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"no backbone file at {path}; expected a file written by save_backbone "
                                "(runs/<run>/backbone.pt) or a timm state dict")
    try:
        # DINO's full training checkpoints pickle their argparse options next to the weights.
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # corrupt, truncated, or not a torch file
        # torch's own message runs to pages of advice about weights_only; the type says enough
        raise BackboneLoadError(f"{path} is not a readable backbone file (corrupt, truncated or not a torch file: "
                                f"{type(err).__name__}); expected a file written by save_backbone or a torch state dict"
                                ) from err


def is_backbone_file(payload: Any) -> bool:
    """Whether ``payload`` (a loaded file) was written by ``save_backbone``."""
    return isinstance(payload, dict) and payload.get("format") == FORMAT


def stored_args(payload: dict[str, Any], source: str) -> dict[str, Any]:
    """The ``create_vit`` arguments of a ``save_backbone`` payload, defaults of older ViT files filled in (a
    timm-family backbone's arguments, ``family: timm``, as they are)."""
    args = payload["args"]
    if family_of(args) != "vit":
        return dict(args)
    return {"pos_embed_interp": LEGACY_POS_EMBED_INTERP, **args}


def _is_tensor_dict(obj: Any) -> bool:
    return isinstance(obj, dict) and bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


@dataclass(frozen=True)
class PlainStateDict:
    """A plain state dict, unwrapped and cleaned.

    Attributes:
        state: tensors under timm's names.
        wrapper: the key it was stored under (``teacher`` ...), or None for a top-level state dict.
        dropped: the DINO projection-head keys removed (after prefix removal), sorted.
    """

    state: dict[str, torch.Tensor]
    wrapper: str | None
    dropped: tuple[str, ...]


def plain_state_dict(payload: Any, source: str = "the file") -> PlainStateDict:
    """Unwrap, de-prefix and de-head a plain state dict (see the module docstring)."""
    wrapper = None
    if not _is_tensor_dict(payload):
        found = [k for k in WRAPPER_KEYS if isinstance(payload, dict) and _is_tensor_dict(payload.get(k))]
        if not found:
            keys = ", ".join(map(str, list(payload)[:8])) if isinstance(payload, dict) else type(payload).__name__
            raise BackboneLoadError(
                f"{source} holds neither a skipless backbone ({FORMAT}) nor a state dict: expected tensors at "
                f"the top level or under one of {', '.join(WRAPPER_KEYS)} (found: {keys})")
        wrapper = found[0]
        payload = payload[wrapper]
    state: dict[str, torch.Tensor] = {}
    for key, value in payload.items():
        clean = _clean_key(key)
        if clean in state:
            raise BackboneLoadError(f"{source}: two weights map to {clean!r} once prefixes are removed")
        state[clean] = value
    dropped = tuple(sorted(k for k in state if _DINO_HEAD_KEY.fullmatch(k)))
    for key in dropped:
        del state[key]
    return PlainStateDict(state, wrapper, dropped)


def plain_args(state: dict[str, torch.Tensor], arch: str, source: str = "the file") -> dict[str, Any]:
    """``create_vit`` arguments for a plain state dict: a ``skip`` ViT of ``arch`` with the file's
    patch size and native grid, resampling position embeddings as DINO does."""
    if arch not in ARCHS:
        raise BackboneLoadError(f"unknown architecture {arch!r} for {source}; expected one of: {', '.join(ARCHS)}")
    if "patch_embed.proj.weight" not in state or "pos_embed" not in state:
        raise BackboneLoadError(f"{source} has no patch_embed.proj.weight or pos_embed; expected a ViT state dict "
                                "in timm's names (cls_token, pos_embed, patch_embed.proj.*, blocks.N.*, norm.*)")
    patch = state["patch_embed.proj.weight"].shape[-1]
    positions = state["pos_embed"].shape[1] - ("cls_token" in state)
    grid = int(round(positions ** 0.5))
    if grid * grid != positions:
        raise BackboneLoadError(f"{source}: pos_embed has {positions} patch positions, not a square grid")
    return dict(arch=arch, residual="skip", init="timm", patch_size=patch, img_size=grid * patch,
                pos_embed_interp="dino")


def _arch_required(path: Path) -> ArchRequiredError:
    return ArchRequiredError(f"{path} is a plain state dict without model arguments; pass arch= (one of "
                             f"{', '.join(ARCHS)}; vit_small for DINO's ViT-S/16) to load it as a 'skip' ViT")


def read_backbone_args(path: str | os.PathLike, arch: str | None = None) -> dict[str, Any]:
    """The ``create_vit`` arguments of a backbone file or plain state dict, without building the model.

    Raises:
        ArchRequiredError: a plain state dict and no ``arch``.
        BackboneLoadError: ``arch`` given for a file that stores its own, or an unreadable file.
    """
    path = Path(path)
    payload = _read(path)
    if is_backbone_file(payload):
        if arch is not None:
            raise BackboneLoadError(f"{path} is a skipless backbone that stores its architecture; "
                                    f"do not name one ({arch!r})")
        return stored_args(payload, str(path))
    plain = plain_state_dict(payload, str(path))
    if arch is None:
        raise _arch_required(path)
    return plain_args(plain.state, arch, str(path))


def load_state_strict(model: SkiplessViT, state: dict[str, torch.Tensor], source: str) -> SkiplessViT:
    """Load ``state`` into ``model`` strictly; the error lists missing, unexpected and mis-shaped keys."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong_shape = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if missing or unexpected or wrong_shape:
        def head(keys):
            return ", ".join(keys[:4]) + (" ..." if len(keys) > 4 else "")
        raise BackboneLoadError(
            f"{source} does not match the architecture {model_name(model.skipless_args)} it names: "
            f"{len(missing)} missing keys ({head(missing)}), {len(unexpected)} unexpected keys "
            f"({head(unexpected)}), {len(wrong_shape)} shape mismatches ({head(wrong_shape)})")
    model.load_state_dict(state, strict=True)
    return model


def build_backbone(args: dict[str, Any], source: str) -> torch.nn.Module:
    """An (untrained) ``SkiplessViT`` from stored ``create_vit`` arguments, the timm model of a ``family: timm``
    backbone's, or the ``CausalLM`` of a ``family: lm`` one's, to load weights into."""
    stored = dict(args)
    family = family_of(stored)
    if family != "vit":
        try:
            if family == LM_FAMILY:  # the weights are overwritten afterwards: skip the paper's SVD-heavy init
                return causal_lm_from_args(stored, initialise=False)
            return backbone_from_args(stored)
        except (KeyError, TypeError, ValueError) as err:
            raise BackboneLoadError(f"{source}: cannot rebuild the {model_name(stored)} from its stored arguments: "
                                    f"{err}") from err
    build = {k: v for k, v in stored.items() if k != "arch"}
    try:
        # The weights are overwritten afterwards, so skip the (SVD-heavy) initialisation.
        model = create_vit(stored["arch"], **{**build, "init": "timm"})
    except (KeyError, TypeError, ValueError) as err:
        raise BackboneLoadError(f"{source}: cannot rebuild the backbone from its stored arguments: {err}") from err
    model.skipless_args = {**model.skipless_args, **stored}
    return model


def load_backbone(path: str | os.PathLike, map_location: str | torch.device = "cpu",
                  arch: str | None = None) -> SkiplessViT:
    """Rebuild the backbone stored at ``path`` and load its weights strictly.

    Args:
        path: a file from ``save_backbone``, or a plain state dict in timm's names (then ``arch`` is
            needed), possibly wrapped and prefixed as training checkpoints store it.
        map_location: device of the returned model.
        arch: only for plain state dicts: the architecture name (``vit_small`` for DINO ViT-S/16).
    """
    path = Path(path)
    payload = _read(path)
    if is_backbone_file(payload):
        args, state = stored_args(payload, str(path)), payload["state_dict"]
    else:
        plain = plain_state_dict(payload, str(path))
        if arch is None:
            raise _arch_required(path)
        args, state = plain_args(plain.state, arch, str(path)), plain.state
        if plain.dropped:
            _log.info("%s: dropped the %d keys of DINO's projection head (%s ...)", path, len(plain.dropped),
                      plain.dropped[0])
    model = build_backbone(args, str(path))
    return load_state_strict(model, state, str(path)).to(map_location)
