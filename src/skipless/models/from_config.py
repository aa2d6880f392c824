"""The backbone a ``model:`` config section describes (``configs/pretrain.yaml`` and ``configs/model/``).

One translation from config keys to ``create_vit`` arguments, shared by pretraining (student and
teacher) and by the evaluators' ``init:<model>`` checkpoint items, which ask for the backbone
``make pretrain MODEL=<model>`` starts from.
"""
from __future__ import annotations

from typing import Any

import torch
from omegaconf import DictConfig
from torch import nn

from .vit import SkiplessViT, create_vit


def vit_args(m: DictConfig) -> dict[str, Any]:
    """The ``create_vit`` keyword arguments (``arch`` included) of a ``model:`` section."""
    extra = {} if m.depth is None else {"depth": int(m.depth)}
    if m.img_size is not None:  # null keeps create_vit's 224, and backbone files without the argument
        extra["img_size"] = int(m.img_size)
    return dict(arch=m.arch, residual=m.residual, init=m.init, attention=m.attention,
                init_args=dict(m.init_args), alpha_min=m.alpha_min, decay_indexing=m.decay.indexing,
                decay_branches=m.decay.branches, decay_zero_init=bool(m.decay.zero_init), pos_embed=m.pos_embed,
                patch_size=m.patch_size, global_pool=m.global_pool, pos_embed_interp=m.pos_embed_interp,
                attention_args=dict(m.attention_args), norm=m.norm, final_norm=bool(m.final_norm),
                token_graying=dict(m.token_graying), **extra)


def vit_from_config(m: DictConfig, drop_path_rate: float = 0.0) -> SkiplessViT:
    """The backbone of ``m`` as DINO pretraining initialises it.

    The model factory keeps timm's init; for DINO from scratch the CLS token is then drawn as DINO
    draws it, truncated normal with std 0.02 (``vision_transformer.py``), not timm's std 1e-6.
    """
    args = vit_args(m)
    model = create_vit(args.pop("arch"), drop_path_rate=drop_path_rate, **args)
    with torch.no_grad():
        nn.init.trunc_normal_(model.cls_token, std=0.02)
    return model


# create_vit's arguments -> the model section's keys: the inverse of vit_args for what a backbone file stores.
# global_pool and drop_path_rate are left out: they are the choices of whoever trains the backbone next.
_ARG_KEYS = {"arch": "arch", "residual": "residual", "init": "init", "attention": "attention",
             "alpha_min": "alpha_min", "decay_indexing": "decay.indexing", "decay_branches": "decay.branches",
             "decay_zero_init": "decay.zero_init", "pos_embed": "pos_embed", "pos_embed_interp": "pos_embed_interp",
             "patch_size": "patch_size", "norm": "norm", "final_norm": "final_norm", "img_size": "img_size",
             "depth": "depth"}
_DICT_ARGS = {"init_args": "init_args", "attention_args": "attention_args", "token_graying": "token_graying"}
NOT_ARCHITECTURE = ("global_pool", "drop_path_rate")
# The model.* keys (and sections) that describe an architecture: whoever holds the weights decides them.
ARCHITECTURE_KEYS = tuple(f"model.{k}" for k in (*_ARG_KEYS.values(), *_DICT_ARGS.values()))


def model_keys_of(args: dict[str, Any]) -> dict[str, Any]:
    """A backbone's ``create_vit`` arguments (``args``, as a backbone file stores them) as ``model.*`` keys of a
    config section (``{"model.arch": "vit_tiny", "model.decay.indexing": "sub_block", ...}``), so that
    ``vit_args`` of the section builds the same architecture. An argument this mapping does not know raises
    ``KeyError`` naming it."""
    keys: dict[str, Any] = {}
    for name, value in args.items():
        if name in NOT_ARCHITECTURE:
            continue
        if name in _DICT_ARGS:
            keys.update({f"model.{_DICT_ARGS[name]}.{k}": v for k, v in (value or {}).items()})
        elif name in _ARG_KEYS:
            keys[f"model.{_ARG_KEYS[name]}"] = value
        else:
            raise KeyError(name)
    return keys
