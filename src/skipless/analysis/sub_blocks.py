"""A block taken apart into the sub-blocks the conditioning diagnostics measure.

Ji et al. ("Cutting the Skip", Section 4.3) write each pre-LN block as two sub-blocks,

    x_l   = g_a x_{l-1} + a(norm1(x_{l-1}))        a: the self-attention branch  (SAB)
    x^_l  = g_m x_l     + m(norm2(x_l))            m: the MLP branch             (FFN)

with shortcut gains ``g = 1`` for a skip, ``0`` for none and the decayed mode's coefficients
(Zhang et al.). Table 3b's fixed-scale modes (Zhang et al.) scale the branch too, so a branch here is
``b * ls(f(u))`` with ``b = sqrt(.5)`` for ``scaled-branch`` and ``scaled-sum`` (1 otherwise), and
``scaled-sum``'s shortcut gain is ``sqrt(.5)``: ``s (x + f) = s x + s f``. Every diagnostic reads a block through this file, so the residual wiring is
written once (``models/block.py`` runs it; here it is exposed): the branches as functions of their
*normalised* input (the attention K_l and MLP K^_l of Eq. 7 are Jacobians of these), the gains, and
one traced forward that keeps every intermediate.

Drop-path and dropout are ignored: diagnostics run the model in eval mode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import torch
from torch import nn

from ..models.block import SQRT_HALF
from ..models.features import embed_tokens

__all__ = ["SubBlockTrace", "attention_branch", "branch_gain", "embed_tokens", "has_finite_weights", "mlp_branch", "shortcut_gains",
           "trace_block", "traced_blocks"]


def shortcut_gains(block: nn.Module) -> tuple[float, float]:
    """(g_a, g_m): the factor on the shortcut around the attention and the MLP sub-block (0: none)."""
    residual = getattr(block, "residual", "skip")
    if residual == "decayed":
        g = block.shortcut_gains.tolist()
        return float(g[0]), float(g[1])
    if residual == "scaled-sum":
        return SQRT_HALF, SQRT_HALF
    return float(getattr(block, "attn_skip", True)), float(getattr(block, "mlp_skip", True))


def branch_gain(block: nn.Module) -> float:
    """The factor on both branches: sqrt(.5) in Table 3b's scaled modes, 1 in every other."""
    return SQRT_HALF if getattr(block, "residual", "skip") in ("scaled-branch", "scaled-sum") else 1.0


def attention_branch(block: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """u -> b * ls1(attn(u)): the attention branch as a function of its normalised input (B, n, d)."""
    b = branch_gain(block)
    return (lambda u: block.ls1(block.attn(u))) if b == 1.0 else (lambda u: b * block.ls1(block.attn(u)))


def mlp_branch(block: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """u -> b * ls2(mlp(u)): the MLP branch as a function of its normalised input (B, n, d)."""
    b = branch_gain(block)
    return (lambda u: block.ls2(block.mlp(u))) if b == 1.0 else (lambda u: b * block.ls2(block.mlp(u)))


@dataclass
class SubBlockTrace:
    """Every intermediate of one block's forward, (B, n, d) each.

    ``x`` the block input, ``u_attn = norm1(x)``, ``attn`` the attention branch output,
    ``mid = g_a x + attn`` (the block's state between its sub-blocks), ``u_mlp = norm2(mid)``,
    ``mlp`` the MLP branch output and ``out = g_m mid + mlp``.
    """

    x: torch.Tensor
    u_attn: torch.Tensor
    attn: torch.Tensor
    mid: torch.Tensor
    u_mlp: torch.Tensor
    mlp: torch.Tensor
    out: torch.Tensor


def trace_block(block: nn.Module, x: torch.Tensor) -> SubBlockTrace:
    """One forward of ``block`` that keeps its intermediates; ``out`` equals ``block(x)`` in eval mode."""
    g_a, g_m = shortcut_gains(block)
    u_attn = block.norm1(x)
    a = attention_branch(block)(u_attn)
    mid = a if g_a == 0.0 else g_a * x + a
    u_mlp = block.norm2(mid)
    m = mlp_branch(block)(u_mlp)
    out = m if g_m == 0.0 else g_m * mid + m
    return SubBlockTrace(x, u_attn, a, mid, u_mlp, m, out)


def traced_blocks(model: nn.Module, x: torch.Tensor, blocks: Iterable[int]) -> Iterator[tuple[int, nn.Module, SubBlockTrace]]:
    """Run ``model``'s blocks on the tokens ``x`` (no gradients) up to the last of ``blocks``, yielding
    ``(index, block, trace)`` for each of ``blocks`` in order."""
    wanted = sorted(set(int(b) for b in blocks))
    for i, block in enumerate(model.blocks[: wanted[-1] + 1]):
        with torch.no_grad():
            t = trace_block(block, x)
        if i in wanted:
            yield i, block, t
        x = t.out


def has_finite_weights(module: nn.Module) -> bool:
    """Whether every parameter is finite (a diverged model has NaN or inf weights)."""
    return all(bool(torch.isfinite(p).all()) for p in module.parameters())
