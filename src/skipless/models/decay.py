"""The shortcut gains of the decayed residual mode (Zhang et al., "Residual Connections Harm
Self-Supervised Abstract Feature Learning", seeds/002: Eq. 3-5, Sec. 3.1, Table 3b).

Eq. 3 scales each shortcut, ``x_{l+1} = alpha_l x_l + f(x_l)``, and Eq. 5 lets the gain fall
linearly with depth: ``alpha_l = 1 - delta l``, ``delta = (1 - alpha_min) / L``, for the layers
``l = 0 .. L-1``. In a ViT each block has two shortcuts (attention and MLP sub-blocks); the paper
decays both (Sec. 4: "replacing the residual connections in the encoder's MLP and attention blocks").

Two readings, chosen by ``indexing``:

- ``sub_block`` (the suite's default): ``1 - linspace(0, 1, 2L) (1 - alpha_min)`` over the 2L
  sub-blocks in forward order. It deviates from Eq. 5 twice, on purpose: (1) the *endpoint*: the
  last gain is exactly ``alpha_min`` (Eq. 5 stops at ``1 - (L-1)(1 - alpha_min)/L``, 0.633 for
  L = 12, alpha_min = 0.6, although the text calls ``alpha_{L-1}`` the minimum); (2) the *index*:
  the gain falls per sub-block, so the MLP shortcut of a block is one step below its attention
  shortcut, instead of one gain per layer.
- ``layer``: Eq. 5 as written, ``alpha_l = 1 - l (1 - alpha_min) / L`` with the same ``alpha_l`` on
  both shortcuts of block ``l``.

Which shortcuts decay, chosen by ``branches`` (Table 3b's rows "Atten." 79.3, "MLP" 80.6, "MLP &
Atten." 83.6): ``both``, ``attn`` or ``mlp``. With one branch, its gains are the ``both`` schedule
of the same ``indexing`` read at that branch's sub-blocks, and the other branch's shortcuts keep gain
1 (a plain residual). The paper does not say how it recomputed the schedule for one branch; this
reading keeps one formula for all three rows, so the rows differ only in which shortcuts decay (under
``sub_block`` the attention-only gains end one step above ``alpha_min``).
"""
from __future__ import annotations

import torch

# The last shortcut gain, Zhang et al.'s value (Table 2, Table 4); configs leave it null to mean this.
DEFAULT_ALPHA_MIN = 0.6
DECAY_INDEXINGS = ("sub_block", "layer")
DECAY_BRANCHES = ("both", "attn", "mlp")


def _check_schedule(alpha_min: float, indexing: str) -> None:
    if not 0.0 <= alpha_min <= 1.0:
        raise ValueError(f"alpha_min must lie in [0, 1], got {alpha_min}")
    if indexing not in DECAY_INDEXINGS:
        raise ValueError(f"unknown decay indexing {indexing!r}; expected one of: {', '.join(DECAY_INDEXINGS)}")


def decayed_gains(depth: int, alpha_min: float, indexing: str = "sub_block", branches: str = "both") -> torch.Tensor:
    """The shortcut gains of the decayed mode, shape (depth, 2): column 0 the attention shortcut of
    each block, column 1 its MLP shortcut (see the module docstring for ``indexing`` and ``branches``).

    ``sub_block``: ``a_k = 1 - k / (2L - 1) (1 - alpha_min)``, ``k = 0 .. 2L-1``, block ``l`` taking
    ``(a_2l, a_2l+1)``. ``layer``: seeds/002 Eq. 5, ``alpha_l = 1 - l (1 - alpha_min) / L`` on both.
    """
    _check_schedule(alpha_min, indexing)
    if branches not in DECAY_BRANCHES:
        raise ValueError(f"unknown decay branches {branches!r}; expected one of: {', '.join(DECAY_BRANCHES)}")
    if indexing == "sub_block":
        gains = 1.0 - torch.linspace(0.0, 1.0, 2 * depth, dtype=torch.float64) * (1.0 - alpha_min)
        gains = gains.reshape(depth, 2)
    else:
        alpha = 1.0 - torch.arange(depth, dtype=torch.float64) * (1.0 - alpha_min) / depth  # Eq. 5
        gains = alpha.reshape(depth, 1).repeat(1, 2)
    if branches == "attn":
        gains[:, 1] = 1.0
    elif branches == "mlp":
        gains[:, 0] = 1.0
    return gains.float()


def block_gains(blocks: int, alpha_min: float, indexing: str = "sub_block") -> torch.Tensor:
    """The gains of a network with one shortcut per block (a ResNet, seeds/002 Sec. 5.1), shape (blocks,):
    ``layer`` is Eq. 5 as written, ``alpha_l = 1 - l (1 - alpha_min) / L``; ``sub_block`` (the default) the same
    line through the last block at exactly ``alpha_min``, ``1 - l (1 - alpha_min) / (L - 1)`` (the endpoint
    reading of the ViT's schedule, with one shortcut per block)."""
    _check_schedule(alpha_min, indexing)
    if indexing == "layer":
        return (1.0 - torch.arange(blocks, dtype=torch.float64) * (1.0 - alpha_min) / blocks).float()
    return (1.0 - torch.linspace(0.0, 1.0, blocks, dtype=torch.float64) * (1.0 - alpha_min)).float()
