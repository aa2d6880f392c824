"""One pre-LayerNorm transformer block whose residual wiring is a constructor argument.

Residual modes, with ``a``/``m`` the attention / MLP sub-blocks:

    skip       x = x + a(norm1(x));        x = x + m(norm2(x))          (standard ViT)
    skipless   x = a(norm1(x));            x = m(norm2(x))              (Ji et al., "Cutting the Skip")
    decayed    x = g1 * x + a(norm1(x));   x = g2 * x + m(norm2(x))     (Zhang et al., decayed shortcuts)
    attn-skip  x = x + a(norm1(x));        x = m(norm2(x))              (Ji et al., "Always Skip Attention")
    mlp-skip   x = a(norm1(x));            x = x + m(norm2(x))

The norms stay in every mode unless ``norm="none"``: the paper keeps pre-LN and only removes the
shortcut; the OSA-Transformer (seeds/004, Section 2) removes both, ``x = a(x); x = m(x)``. Drop-path
drops a branch and keeps the shortcut, so it has no meaning on a sub-block without one and is forced off.
"""
from __future__ import annotations

import torch
from timm.models.vision_transformer import Block
from timm.layers import DropPath
from torch import nn

RESIDUAL_MODES = ("skip", "skipless", "decayed", "attn-skip", "mlp-skip")
NORMS = ("layernorm", "none")  # the blocks' pre-norms: timm's LayerNorm, or none (norm1, norm2 are identities)
# The decayed mode's last shortcut gain, Zhang et al.'s value; configs leave it null to mean this.
DEFAULT_ALPHA_MIN = 0.6


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
    }[residual]


class ResidualBlock(Block):
    """timm ``Block`` (same parameter names) with a residual mode.

    Args:
        residual: one of ``RESIDUAL_MODES``.
        shortcut_gains: for ``decayed``, the two coefficients (g1, g2) that scale the shortcut of the
            attention and the MLP sub-block. A non-persistent buffer: it follows the model across
            devices but stays out of the state dict (so a plain timm state dict loads unchanged);
            backbone files store ``alpha_min``, from which ``create_vit`` rebuilds the gains.
        norm: one of ``NORMS``; ``"none"`` makes ``norm1`` and ``norm2`` identities (no parameters).
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
        if norm not in NORMS:
            raise ValueError(f"unknown norm {norm!r}; expected one of {', '.join(NORMS)}")
        if norm == "none":
            kwargs["norm_layer"] = nn.Identity
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
        elif self.attn_skip:
            x = x + a
        else:
            x = a
        m = self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        if self.residual == "decayed":
            x = self.shortcut_gains[1] * x + m
        elif self.mlp_skip:
            x = x + m
        else:
            x = m
        return x


def decayed_gains(depth: int, alpha_min: float) -> torch.Tensor:
    """The 2L shortcut coefficients of the decayed mode, shape (depth, 2).

    Zhang et al. (decayed identity shortcuts in an MAE) write ``alpha_l = 1 - delta * l`` with ``delta = (1 - alpha_min) / L``,
    which stops one step short of ``alpha_min``. We use ``1 - linspace(0, 1, 2L) * (1 - alpha_min)``
    over the 2L sub-blocks: the first shortcut is exactly 1, the last exactly
    ``alpha_min``, and the decay is linear in sub-block index.
    """
    if not 0.0 <= alpha_min <= 1.0:
        raise ValueError(f"alpha_min must lie in [0, 1], got {alpha_min}")
    a = 1.0 - torch.linspace(0.0, 1.0, 2 * depth, dtype=torch.float64) * (1.0 - alpha_min)
    return a.reshape(depth, 2).float()
