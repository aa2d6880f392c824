"""Multi-head self-attention: softmax with two interchangeable paths, and linear attention.

The default path calls ``F.scaled_dot_product_attention`` so that FlashAttention / cuDNN kernels run
on a GPU. The explicit path forms ``softmax(q k^T / sqrt(d_h))`` itself: it is what attention maps
need, and what forward-mode autodiff (``torch.func.jvp``, used by the Jacobian diagnostics) needs,
since the fused kernels have no forward-mode derivative. Both paths use the same weights, so the
choice is a run-time switch (``use_explicit_attention``), never a different model.

Parameter names are timm's (``qkv``, ``proj``), so timm state dicts load unchanged. Every attention
class states its own arguments once, in ``DEFAULTS``; ``create_vit`` (whose ``ATTENTIONS`` table names
the classes of this file and ``osa.OrthogonalAttention``, a subclass of ``SoftmaxAttention``) fills the
``attention_args`` a config leaves null from them and hands them to ``configure`` after timm built
the module (timm's block builds attention layers from a class, with its own arguments only).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from timm.layers import Attention
from torch import nn


class SoftmaxAttention(Attention):
    """timm ``Attention`` with a switchable explicit path and optional capture of q, k, v, A.

    Attributes:
        explicit: compute the attention matrix explicitly instead of calling the fused kernel.
        capture: a set of names among ``{"q", "k", "v", "attn"}`` to record during the next
            forwards into ``captured`` (used by ``extract_features``); empty means record nothing.
        causal: a class attribute: whether each token attends only to itself and the tokens before it.
            False here (ViT tokens attend to all tokens); ``causal_lm.CausalAttention`` sets it and
            masks in ``matrix`` and ``fused`` itself, so a caller's ``is_causal=True`` is accepted only
            by a causal class and says nothing new to it.
    """

    DEFAULTS: dict[str, object] = {}
    causal: bool = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.explicit = False
        self.capture: set[str] = set()
        self.captured: dict[str, torch.Tensor] = {}
        self.configure(**self.DEFAULTS)

    def configure(self) -> None:
        """Softmax attention takes no arguments beyond timm's."""

    def rotate(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Position information put into ``q`` and ``k`` (B, heads, N, d_h) before the scores: none here (a
        ViT's positions are in its tokens); the causal LM's RoPE (``causal_lm.CausalAttention``)."""
        return q, k

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False
    ) -> torch.Tensor:
        if attn_mask is not None or (is_causal and not self.causal):
            raise NotImplementedError("skipless attention takes no mask: ViT tokens attend to all tokens")
        B, N, _ = x.shape
        # timm's fused qkv: rows of qkv.weight are [Q; K; V], each head-major.
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # (B, heads, N, d_h)
        q, k = self.rotate(self.q_norm(q), self.k_norm(k))

        attn = self.matrix(q, k) if self.explicit or "attn" in self.capture else None
        out = self.attn_drop(attn) @ v if self.explicit else self.fused(q, k, v)
        if self.capture:
            found = {"q": q, "k": k, "v": v, "attn": attn}
            self.captured = {name: found[name] for name in self.capture}

        out = out.transpose(1, 2).reshape(B, N, self.attn_dim)
        out = self.norm(out)
        out = self.proj(out)
        return self.proj_drop(out)

    def matrix(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Each head's attention matrix ``A`` (B, heads, N, N)."""
        return ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Each head's ``A V`` (B, heads, N, d_h) without forming ``A`` where a kernel can."""
        return F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0)


class LinearAttention(SoftmaxAttention):
    """Linear self-attention, ``(1/k) Q K^T V`` per head, no softmax (Ji et al., "Always Skip Attention",
    Eq. 2 with a linear eta; its Table 2 uses k = 16 after its reference [26]). The scale is the constant
    ``1/k``, not ``1/sqrt(d_h)``.

    Without the matrix it is computed as ``Q (K^T V) / k``: the same product in O(N d_h^2) instead of
    O(N^2 d_h). The explicit path forms ``A = Q K^T / k`` (attention maps, the diagnostics).
    """

    DEFAULTS: dict[str, object] = {"k": 16.0}

    def configure(self, k: float = 16.0) -> None:
        if not k > 0:
            raise ValueError(f"linear attention needs k > 0, got {k}")
        self.divisor = float(k)

    def matrix(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return q @ k.transpose(-2, -1) / self.divisor

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.training and self.attn_drop.p > 0:  # dropout acts on A: form it
            return self.attn_drop(self.matrix(q, k)) @ v
        return q @ (k.transpose(-2, -1) @ v) / self.divisor


@contextlib.contextmanager
def use_explicit_attention(model: nn.Module, explicit: bool = True) -> Iterator[nn.Module]:
    """Within the block, every ``SoftmaxAttention`` of ``model`` uses the explicit (or fused) path."""
    modules = [m for m in model.modules() if isinstance(m, SoftmaxAttention)]
    before = [m.explicit for m in modules]
    for m in modules:
        m.explicit = explicit
    try:
        yield model
    finally:
        for m, b in zip(modules, before):
            m.explicit = b


def flash_attn_available() -> bool:
    """Whether the optional ``flash-attn`` package is importable (never required).

    ``F.scaled_dot_product_attention`` already dispatches to flash kernels on supported GPUs, so the
    package only matters to users who want its specific kernels; we report it in benchmarks.
    """
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return False
    return True
