"""The ViT family: timm's ``VisionTransformer`` with a residual mode per block.

``create_vit`` is the one factory. It returns a ``SkiplessViT``, a timm ``VisionTransformer`` built
with our ``ResidualBlock`` and ``SoftmaxAttention``; parameter names are timm's, so a plain timm
state dict (for example DINO's released ViT-S/16) loads into the ``skip`` model unchanged.
"""
from __future__ import annotations

from functools import partial
from collections.abc import Mapping
from typing import Any

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from ..errors import ModelArgumentError
from .attention import LinearAttention, SoftmaxAttention
from .block import NORMS, RESIDUAL_MODES, ResidualBlock
from .decay import DECAY_BRANCHES, DECAY_INDEXINGS, DEFAULT_ALPHA_MIN, decayed_gains
from .init import CUTSKIP_DEFAULTS, INITS, apply_init_
from .osa import OrthogonalAttention
from .pos_embed import POS_EMBED_INTERPS, resample_pos_embed
from .sincos import sincos_2d
from .token_graying import DEFAULT_EPS, GRAYING_METHODS, GrayedPatchEmbed, check_graying

# Architectures by name (Dosovitskiy et al. 2021; Touvron et al. 2021 for Ti/S).
ARCHS: dict[str, dict[str, int]] = {
    "vit_tiny": dict(embed_dim=192, depth=12, num_heads=3),
    "vit_small": dict(embed_dim=384, depth=12, num_heads=6),
    "vit_base": dict(embed_dim=768, depth=12, num_heads=12),
    # The OSA paper's MNIST transformer (seeds/004, Appendix E: 6 blocks, d 64, 4 heads; patch 4 there).
    "vit_micro": dict(embed_dim=64, depth=6, num_heads=4),
}
# Attentions by name. Each is a ``SoftmaxAttention`` (same parameter names, the feature API's captures,
# the explicit path of the diagnostics) whose arguments are its class's ``DEFAULTS``. The table lives
# here, beside the factory that reads it, so that attention.py need not import its subclasses.
ATTENTIONS: dict[str, type[SoftmaxAttention]] = {
    "softmax": SoftmaxAttention, "linear": LinearAttention, "osa": OrthogonalAttention}
# Initialisations that write the attention weights, and the attentions whose weights they know.
INIT_ATTENTIONS: dict[str, tuple[str, ...]] = {"cutskip": ("softmax", "linear"), "mae": ("softmax", "linear"),
                                               "osa": ("osa",)}


def _check_choice(kind: str, value: str, choices) -> None:
    if value not in choices:
        raise ModelArgumentError(f"unknown {kind} {value!r}; expected one of: {', '.join(choices)}")


GLOBAL_POOLS = ("token", "avg")  # the feature model(x) returns: the CLS output, or the mean patch token
POS_EMBEDS = ("learned", "sincos")  # the position table: learned (ViT, DINO) or fixed 2-D sin-cos (MAE)


class SkiplessViT(VisionTransformer):
    """A timm ``VisionTransformer`` that remembers the ``create_vit`` arguments that built it.

    ``skipless_args`` travels with the weights (``save_backbone``) so evaluators rebuild the exact
    model instead of guessing it.
    """

    skipless_args: dict[str, Any]

    def __init__(self, *, pos_embed_interp: str = "dino", **kwargs: Any) -> None:
        _check_choice("pos_embed_interp", pos_embed_interp, POS_EMBED_INTERPS)
        super().__init__(**kwargs)
        self.pos_embed_interp = pos_embed_interp

    @property
    def residual(self) -> str:
        return self.skipless_args["residual"]

    def _pos_embed(self, x: torch.Tensor) -> torch.Tensor:
        """timm's ``_pos_embed`` with the position-embedding resample chosen by ``pos_embed_interp``.

        ``x`` is the patch embedding, (B, rows, cols, C) with ``dynamic_img_size``; the prefix tokens
        (CLS, registers) are prepended and the (resampled) position embedding added, as timm does.
        """
        if not self.dynamic_img_size or self.pos_embed is None:
            return super()._pos_embed(x)
        B, rows, cols, C = x.shape
        pos_embed = resample_pos_embed(
            self.pos_embed, (rows, cols), tuple(self.patch_embed.grid_size),
            num_prefix_tokens=0 if self.no_embed_class else self.num_prefix_tokens, mode=self.pos_embed_interp)
        x = x.reshape(B, rows * cols, C)
        prefix = [t.expand(B, -1, -1) for t in (self.cls_token, self.reg_token) if t is not None]
        if self.no_embed_class:  # deit-3 style: the prefix tokens carry no position
            x = torch.cat(prefix + [x + pos_embed], dim=1)
        else:
            x = torch.cat(prefix + [x], dim=1) + pos_embed
        return self.pos_drop(x)


def create_vit(
    arch: str = "vit_small",
    *,
    residual: str = "skip",
    init: str = "timm",
    attention: str = "softmax",
    init_args: dict[str, float] | None = None,
    alpha_min: float | None = None,
    decay_indexing: str = "sub_block",
    decay_branches: str = "both",
    decay_zero_init: bool = True,
    pos_embed: str = "learned",
    pos_embed_interp: str = "dino",
    attention_args: dict[str, Any] | None = None,
    norm: str = "layernorm",
    final_norm: bool = True,
    token_graying: dict[str, Any] | None = None,
    **overrides: Any,
) -> SkiplessViT:
    """Build a ViT of the skipless family.

    Args:
        arch: ``vit_tiny`` | ``vit_small`` | ``vit_base`` (patch 16 unless ``patch_size`` is overridden).
        residual: ``skip`` | ``skipless`` | ``decayed`` | ``attn-skip`` | ``mlp-skip`` (see ``block.py``).
        init: ``timm`` (truncated normal) | ``cutskip`` (the paper's Section 5, after timm's init) |
            ``xavier`` (Xavier-uniform attention and MLP weights, zero biases, the class token and position
            table as Appendix E: the OSA paper's ViT baselines, seeds/004) | ``osa`` (seeds/004 Appendix C,
            for ``attention="osa"``) | ``mae`` (MAE's ``initialize_weights``, He et al. 2022: Xavier-uniform
            on every Linear, the fused qkv as one matrix, and on the flattened patch embedding; seeds/002).
            See ``init.py``.
        attention: ``softmax`` | ``linear`` (seeds/003's ``(1/k) Q K^T V``) | ``osa`` (seeds/004's
            orthogonal ``exp(S)``); see ``attention.py`` and ``osa.py``.
        attention_args: the chosen attention's arguments (``ATTENTIONS[attention].DEFAULTS``: ``k`` for
            linear; ``basis``, ``ns_steps``, ``alpha`` for osa); a missing or None entry takes the
            default; an argument of another attention is refused.
        init_args: for ``cutskip``: ``alpha``, ``beta``, ``c`` and ``center_mlp`` (see
            ``init.center_mlp_``); a missing or None entry takes ``init.CUTSKIP_DEFAULTS``, the paper's
            DINO ViT-S values.
        alpha_min: for ``decayed``: the last shortcut coefficient; None takes ``decay.DEFAULT_ALPHA_MIN``
            (Zhang et al.'s 0.6).
        decay_indexing: for ``decayed``: ``sub_block`` (default: the gains fall over the 2L sub-blocks
            and end at ``alpha_min``) | ``layer`` (seeds/002 Eq. 5 as written: ``alpha_l = 1 - l (1 -
            alpha_min) / L`` on both shortcuts of block l, ending at 0.633 for L = 12, alpha_min 0.6).
            See ``decay.py`` for the two deviations of the default.
        decay_branches: for ``decayed``: ``both`` (default) | ``attn`` | ``mlp``: which shortcuts decay
            (seeds/002 Table 3b); the other branch's shortcuts keep gain 1 (``decay.py``).
        decay_zero_init: for ``decayed``: zero the output projections of attention and MLP after the init
            (True, seeds/002 Sec. 3.2) or keep the init's draw (False: the ablation of that section).
        pos_embed: ``learned`` (default: timm's trainable table) | ``sincos``: MAE's fixed 2-D sin-cos
            table (``sincos.py``; He et al. 2022, seeds/002 Sec. 4), frozen (``requires_grad`` False,
            so optimizers never see it) and kept in the state dict under ``pos_embed``. Crops of another
            size resample it by ``pos_embed_interp`` as a learned table is.
        pos_embed_interp: how position embeddings are resampled for crops of a non-native size:
            ``dino`` (DINO's ``interpolate_pos_encoding``, the default: the suite pretrains with DINO
            and DINO's released weights then give DINO's own outputs) or ``timm`` (timm's antialiased
            resample; what backbone files written before this argument were trained with). Both are
            the identity at the native size. See ``pos_embed.py`` for how much they differ.
        norm: ``layernorm`` | ``none``: the blocks' pre-norms (``none``: the OSA-Transformer's blocks).
        final_norm: the LayerNorm after the last block (``norm``, or ``fc_norm`` with average pooling).
        token_graying: ``{"method": "none" | "svd" | "dct", "eps": 0.95}`` (seeds/003, Algorithms 1-2):
            applied to each image's patch matrix inside the patch embedding (``token_graying.py``).
        overrides: timm ``VisionTransformer`` arguments, e.g. ``patch_size``, ``img_size``,
            ``drop_path_rate``, ``num_classes``, ``depth``.

    Returns:
        A ``SkiplessViT`` with no classifier head by default (``model(x)`` is the normalised CLS
        feature), dynamic image size (any multiple of the patch size works; position embeddings
        are interpolated), and ``skipless_args`` set to the arguments that rebuild it.
    """
    _check_choice("arch", arch, ARCHS)
    _check_choice("residual mode", residual, RESIDUAL_MODES)
    _check_choice("init", init, INITS)
    _check_choice("attention", attention, ATTENTIONS)
    _check_choice("pos_embed_interp", pos_embed_interp, POS_EMBED_INTERPS)
    _check_choice("norm", norm, NORMS)
    _check_choice("decay_indexing", decay_indexing, DECAY_INDEXINGS)
    _check_choice("decay_branches", decay_branches, DECAY_BRANCHES)
    _check_choice("pos_embed", pos_embed, POS_EMBEDS)
    if residual != "decayed" and (decay_indexing, decay_branches) != (DECAY_INDEXINGS[0], DECAY_BRANCHES[0]):
        raise ModelArgumentError(
            f"decay_indexing={decay_indexing} and decay_branches={decay_branches} shape the decayed mode's gains "
            f"and do nothing for residual={residual}; expected residual=decayed, or the defaults "
            f"{DECAY_INDEXINGS[0]} and {DECAY_BRANCHES[0]}")
    if residual != "decayed" and not decay_zero_init:
        raise ModelArgumentError(
            f"decay_zero_init=False keeps the init's branch outputs of the decayed mode and does nothing for "
            f"residual={residual}, whose init never zeroes them; expected residual=decayed, or the default True")
    if init in INIT_ATTENTIONS and attention not in INIT_ATTENTIONS[init]:
        raise ModelArgumentError(
            f"init={init} cannot initialise attention={attention}: it is written for attention "
            f"{' or '.join(INIT_ATTENTIONS[init])}; expected init "
            f"{' or '.join(['timm', 'xavier'] + [i for i, a in INIT_ATTENTIONS.items() if attention in a])}")
    attention_args = _attention_args(attention, attention_args)
    graying = {"method": "none", "eps": DEFAULT_EPS,
               **{k: v for k, v in (token_graying or {}).items() if v is not None}}
    if set(graying) != {"method", "eps"}:
        raise ModelArgumentError(f"unknown token_graying keys {sorted(set(graying) - {'method', 'eps'})}; "
                                 "expected method and eps")
    _check_choice("token graying method", graying["method"], GRAYING_METHODS)
    check_graying(graying["method"], float(graying["eps"]))
    given = {k: v for k, v in (init_args or {}).items() if v is not None}
    unknown = set(given) - set(CUTSKIP_DEFAULTS)
    if unknown:
        raise ModelArgumentError(f"unknown init_args {sorted(unknown)}; expected {', '.join(CUTSKIP_DEFAULTS)}")
    init_args = {**CUTSKIP_DEFAULTS, **given}
    alpha_min = DEFAULT_ALPHA_MIN if alpha_min is None else float(alpha_min)

    kwargs: dict[str, Any] = dict(
        img_size=224, patch_size=16, num_classes=0, dynamic_img_size=True, **ARCHS[arch]
    )
    kwargs.update(overrides)
    _check_choice("global_pool", kwargs.get("global_pool", "token"), GLOBAL_POOLS)
    depth = kwargs["depth"]
    gains = decayed_gains(depth, alpha_min, decay_indexing, decay_branches)
    # timm passes a per-block drop-path rate; our block forces it to 0 where there is no shortcut.
    blocks = iter(range(depth))

    def block_fn(**block_kwargs):
        i = next(blocks)
        return ResidualBlock(residual=residual, shortcut_gains=tuple(gains[i].tolist()), norm=norm,
                             attention_args=attention_args, **block_kwargs)

    if graying["method"] != "none":
        kwargs["embed_layer"] = partial(GrayedPatchEmbed, graying_method=graying["method"],
                                        graying_eps=float(graying["eps"]))
    model = SkiplessViT(block_fn=block_fn, attn_layer=ATTENTIONS[attention], pos_embed_interp=pos_embed_interp,
                        **kwargs)
    if not final_norm:
        model.norm, model.fc_norm = nn.Identity(), nn.Identity()
    apply_init_(model, init, init_args, residual, zero_init=bool(decay_zero_init))
    if pos_embed == "sincos":  # after every init, so none of them overwrites the fixed table
        _fix_sincos_pos_embed_(model)
    model.skipless_args = dict(
        arch=arch, residual=residual, init=init, attention=attention,
        init_args=init_args, alpha_min=alpha_min, decay_indexing=decay_indexing, decay_branches=decay_branches,
        decay_zero_init=bool(decay_zero_init), pos_embed=pos_embed, pos_embed_interp=pos_embed_interp,
        attention_args=attention_args, norm=norm, final_norm=bool(final_norm), token_graying=graying, **overrides,
    )
    return model


@torch.no_grad()
def _fix_sincos_pos_embed_(model: SkiplessViT) -> None:
    """Fill ``model.pos_embed`` with MAE's 2-D sin-cos table of the native patch grid (a zero row for
    the CLS token, which carries no position) and freeze it: MAE's ``pos_embed`` with
    ``requires_grad=False``, still a parameter under the same name, so state dicts keep it."""
    if model.pos_embed is None:
        raise ModelArgumentError("pos_embed=sincos needs a position table; expected timm's pos_embed='learn'")
    rows, cols = model.patch_embed.grid_size
    prefix = model.pos_embed.shape[1] - rows * cols
    if prefix not in (0, 1):
        raise ModelArgumentError(f"pos_embed=sincos fills the patch grid and at most a CLS row; this model's table "
                                 f"has {prefix} prefix rows (registers?); expected 0 or 1")
    if model.embed_dim % 4:
        raise ModelArgumentError(f"pos_embed=sincos needs a width divisible by 4 (two sin-cos codes of even width), "
                                 f"got embed_dim={model.embed_dim}")
    table = sincos_2d(model.embed_dim, rows, cols, cls_token=prefix == 1)
    model.pos_embed.copy_(table.to(model.pos_embed.dtype))
    model.pos_embed.requires_grad_(False)


def _attention_args(attention: str, given: dict[str, Any] | None) -> dict[str, Any]:
    """The attention's ``DEFAULTS`` overridden by the non-None entries of ``given``; entries that
    belong to no argument of this attention are refused (they would be silently ignored)."""
    defaults = ATTENTIONS[attention].DEFAULTS
    given = {k: v for k, v in (given or {}).items() if v is not None}
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ModelArgumentError(f"attention_args {unknown} do not apply to attention={attention}; it takes "
                                 f"{', '.join(defaults) or 'no arguments'} (leave the others null)")
    return {**defaults, **given}


def backbone_args(model: SkiplessViT) -> dict[str, Any]:
    """The ``create_vit`` arguments that rebuild ``model`` (a copy)."""
    return dict(model.skipless_args)


DECAY_ARGS = ("alpha_min", "decay_indexing", "decay_branches", "decay_zero_init")


def applicable_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` (a backbone's ``create_vit`` arguments) without those its model does not read, for results a
    reader takes as a description: the decay's keys outside ``residual=decayed``, cutskip's ``init_args``
    under another init, a ``token_graying`` of method ``none``. The backbone file keeps them all."""
    shown = dict(args)
    if shown.get("residual") != "decayed":
        for key in DECAY_ARGS:
            shown.pop(key, None)
    if shown.get("init") != "cutskip":
        shown.pop("init_args", None)
    if (shown.get("token_graying") or {}).get("method", "none") == "none":
        shown.pop("token_graying", None)
    return shown


def drop_path_rates(model: SkiplessViT) -> list[tuple[float, float]]:
    """Per block, the drop-path probabilities in force on (attention, MLP) branches."""
    return [blk.drop_path_rates() for blk in model.blocks]


def freeze_for_eval(model: torch.nn.Module, device: str | torch.device = "cpu") -> torch.nn.Module:
    """Move a backbone to ``device``, in eval mode, with every parameter frozen (evaluators)."""
    model = model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


__all__ = ["ARCHS", "ATTENTIONS", "POS_EMBEDS", "SkiplessViT", "create_vit", "applicable_args", "backbone_args",
           "drop_path_rates", "freeze_for_eval"]
