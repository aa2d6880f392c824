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
