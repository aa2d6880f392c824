"""One pre-LayerNorm transformer block whose residual wiring is a constructor argument.

Residual modes, with ``a``/``m`` the attention / MLP sub-blocks:

    skip           x = x + a(norm1(x));        x = x + m(norm2(x))          (standard ViT)
    skipless       x = a(norm1(x));            x = m(norm2(x))              (Ji et al., "Cutting the Skip")
    decayed        x = g1 * x + a(norm1(x));   x = g2 * x + m(norm2(x))     (Zhang et al., decayed shortcuts)
    attn-skip      x = x + a(norm1(x));        x = m(norm2(x))              (Ji et al., "Always Skip Attention")
    mlp-skip       x = a(norm1(x));            x = x + m(norm2(x))
    scaled-branch  x = x + s * a(norm1(x));    x = x + s * m(norm2(x))      (Zhang et al. Table 3b, 76.9)
    scaled-sum     x = s * (x + a(norm1(x)));  x = s * (x + m(norm2(x)))    (Zhang et al. Table 3b, 82.6)

with ``s = sqrt(0.5)``.

The decayed mode's gains ``g1, g2`` come from ``decay.decayed_gains`` (Zhang et al. Eq. 5 and the
suite's reading of it). The two scaled modes are Table 3b's fixed-scale shortcuts of seeds/002: a
constant sqrt(0.5) on the branch only (Fischer et al.'s residual scaling, [18] there), or on both the
shortcut and the branch (Karras et al.'s form, [37] there); on both sub-blocks of every block, with
the init that is asked for (the zeroed output projections belong to the decayed mode, Sec. 3.2).

The norms stay in every mode unless ``norm="none"``: the paper keeps pre-LN and only removes the
shortcut; the OSA-Transformer (seeds/004, Section 2) removes both, ``x = a(x); x = m(x)``. Drop-path
drops a branch and keeps the shortcut, so it has no meaning on a sub-block without one and is forced off.

The causal language model (``causal_lm.py``) builds the same block with ``norm="rmsnorm"``, its SwiGLU
MLP and its causal RoPE attention (timm's ``Block`` takes the MLP and attention classes as arguments),
so every residual mode above is one argument away there too.
"""
from __future__ import annotations

import math
from functools import partial

import torch
from timm.models.vision_transformer import Block
from timm.layers import DropPath
from torch import nn

RESIDUAL_MODES = ("skip", "skipless", "decayed", "attn-skip", "mlp-skip", "scaled-branch", "scaled-sum")
NORMS = ("layernorm", "none")  # the ViT's pre-norms: timm's LayerNorm, or none (norm1, norm2 are identities)
RMS_NORM = "rmsnorm"  # the causal LM's pre-norms (block norm only; the ViT keeps NORMS)
RMS_EPS = 1e-6  # flash-linear-attention's norm_eps (TransformerConfig), the LM's anchor


class FloatRMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` computed in float32 (float64 stays float64) and returned in its input's dtype (as fla's fused
    RMSNorm computes it).
    Under bf16 autocast a block's input is bf16 and the weight float32: ``torch.rms_norm`` cannot take that pair
    to its fused kernel (it warns and falls back), and the mean square of bf16 numbers loses precision. In float32
    and float64 the cast is a no-op: the output is ``nn.RMSNorm``'s."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.to(torch.promote_types(x.dtype, torch.float32))).to(x.dtype)


rms_norm = partial(FloatRMSNorm, eps=RMS_EPS)  # weight only, no bias (as fla's RMSNorm)
SQRT_HALF = math.sqrt(0.5)  # the scaled modes' constant (seeds/002 Table 3b)


def _skips(residual: str) -> tuple[bool, bool]:
    """(shortcut around attention, shortcut around MLP) for a residual mode."""
    if residual not in RESIDUAL_MODES:
        raise ValueError(f"unknown residual mode {residual!r}; expected one of {', '.join(RESIDUAL_MODES)}")
    return {
        "skip": (True, True),
        "skipless": (False, False),
        "decayed": (True, True),
        "attn-skip": (True, False),
        "mlp-skip": (False, True),
        "scaled-branch": (True, True),
        "scaled-sum": (True, True),
    }[residual]


class ResidualBlock(Block):
    """timm ``Block`` (same parameter names) with a residual mode.

    Args:
        residual: one of ``RESIDUAL_MODES``.
        shortcut_gains: for ``decayed``, the two coefficients (g1, g2) that scale the shortcut of the
            attention and the MLP sub-block. A non-persistent buffer: it follows the model across
            devices but stays out of the state dict (so a plain timm state dict loads unchanged);
            backbone files store ``alpha_min``, ``decay_indexing`` and ``decay_branches``, from which
            ``create_vit`` rebuilds the gains (``decay.decayed_gains``).
        norm: one of ``NORMS``; ``"none"`` makes ``norm1`` and ``norm2`` identities (no parameters);
            ``"rmsnorm"`` (``RMS_NORM``, the causal LM's) makes them ``rms_norm``.
        attention_args: passed to the attention module's ``configure`` (``attention.py``).
        Other arguments are timm's ``Block`` arguments.
    """

    def __init__(
        self,
        *args,
        residual: str = "skip",
        shortcut_gains: tuple[float, float] = (1.0, 1.0),
        norm: str = "layernorm",
        attention_args: dict | None = None,
        **kwargs,
    ) -> None:
        if norm not in (*NORMS, RMS_NORM):
            raise ValueError(f"unknown norm {norm!r}; expected one of {', '.join((*NORMS, RMS_NORM))}")
        if norm == "none":
            kwargs["norm_layer"] = nn.Identity
        elif norm == RMS_NORM:
            kwargs["norm_layer"] = rms_norm
        super().__init__(*args, **kwargs)
        self.attn.configure(**(attention_args or {}))
        self.residual = residual
        self.attn_skip, self.mlp_skip = _skips(residual)
        if not self.attn_skip:
            self.drop_path1 = nn.Identity()
        if not self.mlp_skip:
            self.drop_path2 = nn.Identity()
        gains = shortcut_gains if residual == "decayed" else (1.0, 1.0)
        self.register_buffer("shortcut_gains", torch.tensor(gains, dtype=torch.float32), persistent=False)

    def drop_path_rates(self) -> tuple[float, float]:
        """The drop-path probabilities in force on the two branches (0 where there is no shortcut)."""
        return tuple(m.drop_prob if isinstance(m, DropPath) else 0.0 for m in (self.drop_path1, self.drop_path2))

    def forward(self, x: torch.Tensor, attn_mask=None, is_causal: bool = False) -> torch.Tensor:
        a = self.drop_path1(self.ls1(self.attn(self.norm1(x), attn_mask=attn_mask, is_causal=is_causal)))
        if self.residual == "decayed":
            x = self.shortcut_gains[0] * x + a
        elif self.residual == "scaled-branch":
            x = x + SQRT_HALF * a
        elif self.residual == "scaled-sum":
            x = SQRT_HALF * (x + a)
        elif self.attn_skip:
            x = x + a
        else:
            x = a
        m = self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        if self.residual == "decayed":
            x = self.shortcut_gains[1] * x + m
        elif self.residual == "scaled-branch":
            x = x + SQRT_HALF * m
        elif self.residual == "scaled-sum":
            x = SQRT_HALF * (x + m)
        elif self.mlp_skip:
            x = x + m
        else:
            x = m
        return x

