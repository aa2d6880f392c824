"""What a causal language model's attention and tokens look like at initialisation (issue 49).

Seed 000 (Sec. 5.2, Proposition 1): at a random init the logits are diffuse, so each attention row is
near uniform and the attention matrix ill conditioned; Eq. 11's ``beta I`` makes them diagonally dominant,
the matrix near the identity. In a causal model the row of the token at position ``t`` (0-based) spreads
over the ``t + 1`` tokens ``0 .. t``, so

- **the self-weight** ``A[t, t]`` of uniform attention is exactly ``1 / (t + 1)`` (``uniform_self_weight``)
  and that of an identity-like attention about 1, at every ``t``: the self-weight as a function of the
  position separates the two, and the gap grows with the position (the last token of a 2,048 window puts
  1/2,048 on itself under uniform attention). ``causal_self_weight`` is the mean over sequences and heads
  of the diagonal, per position; ``A[0, 0] = 1`` always (the first token sees only itself).
- **the token cosine**, the mean cosine between distinct token representations of one sequence
  (``block_signals.mean_pairwise_cosine``), is the rank-collapse signal (Dong et al. 2021; seed 003
  Sec. 4.2): near 1 when a stack of attention layers without skips has averaged the tokens onto one
  direction, near 0 for independent random tokens.

``lm_init_signals`` measures both after every block from one no-grad forward on the explicit attention path
(the matrix the model multiplies its values by is the one read), holding one attention matrix at a time:
at context 2,048 a matrix of lm_110m is ``B x 12 x 2048 x 2048`` floats, 200 MB per sequence.
``distinct_query_key_heads`` counts a layer's distinct ``(W^Q_h, W^K_h)``: 1 for every layer of the
``qk=head`` reading at alpha 0 (issue 49's trap, ``models/init.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..models.attention import SoftmaxAttention, use_explicit_attention
from ..models.init import head_matrices
from .block_signals import mean_pairwise_cosine
from .eval_mode import measuring

__all__ = ["LMSignals", "causal_self_weight", "distinct_query_key_heads", "lm_init_signals", "self_weight_at",
           "uniform_self_weight"]


def causal_self_weight(attn: torch.Tensor) -> torch.Tensor:
    """The mean over sequences and heads of the diagonal of attention probabilities ``attn`` (B, heads, T, T),
    in float64: ``(T,)``, entry ``t`` the weight the token at position ``t`` puts on itself."""
    if attn.dim() != 4 or attn.shape[-1] != attn.shape[-2]:
        raise ValueError(f"expected attention probabilities of shape (batch, heads, T, T), got {tuple(attn.shape)}")
    return torch.diagonal(attn, dim1=-2, dim2=-1).double().mean(dim=(0, 1))


def uniform_self_weight(length: int) -> torch.Tensor:
    """The self-weight of uniform causal attention over ``length`` positions: ``1 / (t + 1)``, float64 (T,)."""
    return 1.0 / torch.arange(1, length + 1, dtype=torch.float64)


def self_weight_at(curve: torch.Tensor, seen: int) -> float:
    """The self-weight of the token that sees ``seen`` tokens (itself and those before it): ``curve[seen - 1]``;
    uniform attention gives ``1 / seen``."""
    if not 1 <= seen <= curve.shape[0]:
        raise ValueError(f"a window of {curve.shape[0]} tokens has no token that sees {seen}; expected 1..{curve.shape[0]}")
    return float(curve[seen - 1])


@dataclass
class LMSignals:
    """Per block (forward order) of one forward on ``sequences`` sequences of ``length`` tokens.

    Attributes:
        self_weight: per block the ``causal_self_weight`` curve (T,), float64.
        token_cosine: per block the mean pairwise cosine of the block's output tokens, averaged over sequences.
        token_norm: per block the mean L2 norm of the block's output tokens.
        embedding_cosine: the same cosine of the token embeddings, the first block's input.
    """

    length: int
    sequences: int
    self_weight: list[torch.Tensor] = field(default_factory=list)
    token_cosine: list[float] = field(default_factory=list)
    token_norm: list[float] = field(default_factory=list)
    embedding_cosine: float = float("nan")


def lm_init_signals(model: nn.Module, tokens: torch.Tensor) -> LMSignals:
    """The self-weight curve and token cosine of every block of a ``CausalLM`` on ``tokens`` (B, T) (module
    docstring), in eval mode without gradients, the explicit attention path; the model's modes, paths and
    captures are restored after. Cosines and norms in float64 of the (float32) block outputs."""
    attentions = [block.attn for block in model.blocks]
    if not all(isinstance(a, SoftmaxAttention) and a.causal for a in attentions):
        raise TypeError("lm_init_signals reads the causal softmax attention of a skipless.models.CausalLM")
    signals = LMSignals(length=tokens.shape[1], sequences=tokens.shape[0])

    def read(module: nn.Module, args, output) -> None:  # one matrix at a time: reduce it, let it go
        signals.self_weight.append(causal_self_weight(module.captured["attn"]).cpu())
        module.captured = {}

    handles = [a.register_forward_hook(read) for a in attentions]
    try:
        for a in attentions:
            a.capture = {"attn"}
        with measuring(model), use_explicit_attention(model, True):
            signals.embedding_cosine = mean_pairwise_cosine(model.embed(tokens).double())
            for out in model.block_outputs(tokens):
                out = out.double()
                signals.token_cosine.append(mean_pairwise_cosine(out))
                signals.token_norm.append(float(torch.linalg.vector_norm(out, dim=-1).mean()))
    finally:
        for h in handles:
            h.remove()
        for a in attentions:
            a.capture, a.captured = set(), {}
    return signals


def distinct_query_key_heads(attn: nn.Module) -> int:
    """How many of the layer's heads have distinct ``(W^Q_h, W^K_h)`` (exact equality of the weights)."""
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    for h in range(attn.num_heads):
        m = head_matrices(attn, h)
        if not any(torch.equal(m["Q"], q) and torch.equal(m["K"], k) for q, k in seen):
            seen.append((m["Q"], m["K"]))
    return len(seen)
