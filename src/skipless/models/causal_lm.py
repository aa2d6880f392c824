"""A decoder-only causal language model built from the suite's residual block (seeds/000 App. A.8).

The seed trains "a 110M parameter model" with the flash-linear-attention codebase and says no more about it;
the reading taken (issue 49) is that codebase's Llama-like ``transformer``:

    x = embed(tokens)                                  token embedding, no position table
    for each block:  residual mode of block.py around   a = attn(rmsnorm(x)),  m = swiglu(rmsnorm(x))
    logits = rmsnorm(x) @ embed.weight^T                final RMSNorm, output tied to the input embedding

- attention (``CausalAttention``): timm's layout (one fused bias-free ``qkv`` Linear with rows ``[Q; K; V]``,
  head-major; ``proj``; ``num_heads``, ``head_dim``), so ``models/init.py`` reads it as it reads the ViT's;
  RoPE on queries and keys (``rope.py``: theta 10,000, the rotate-half convention of fla and HF Llama); scale
  ``1/sqrt(d_h)``; causal. Two paths with one mask: ``F.scaled_dot_product_attention(is_causal=True)`` (flash
  kernels on GPUs) and the explicit softmax of the masked scores (``forward(..., explicit=True)`` or
  ``use_explicit_attention``), equal to float tolerance.
- MLP (``SwiGLU``): ``fc2(silu(fc1_g(x)) * fc1_x(x))``, three bias-free matrices, hidden 2,048 at width 768
  (fla's ``intermediate_size``: ``4 d 2/3`` rounded up to a multiple of 256). Names are timm's ``SwiGLU``'s;
  fla's ``GatedMLP`` calls them ``gate_proj`` (``fc1_g``), ``up_proj`` (``fc1_x``) and ``down_proj`` (``fc2``).
- norms: ``nn.RMSNorm`` with eps 1e-6 and a weight (fla's ``norm_eps``), before each sub-block and after the
  last block. The skipless model keeps them all (issue 49; the seed's ViTs keep their pre-LN).
- no biases anywhere, no dropout, no drop-path.

Every residual mode of ``block.py`` works (``skip``, ``skipless``, ``decayed`` with its gains from
``decay.py``, ...): the blocks are ``ResidualBlock`` built with RMSNorm, SwiGLU and ``CausalAttention``.

Presets (``LM_ARCHS``, by name through ``create_causal_lm``, which refuses an unknown one and lists the valid):
``lm_110m`` the seed's model as issue 49 reads it (width 768, 12 layers, 12 heads, SwiGLU 2,048, a 32,000-token
vocabulary, context 2,048: 109,529,856 parameters); ``lm_110m_gpt2`` the same body on GPT-2's vocabulary,
50,257 tokens *unpadded* (so log-probabilities are normalised over the tokenizer's tokens exactly, as
lm-evaluation-harness scores a GPT-2-vocabulary model; nanoGPT pads to 50,304 for speed, one
``vocab_size=50304`` override away): 123,551,232 parameters; ``lm_demo`` a small one for the CPU demo
(ours: width 256, 4 layers, 4 heads of 64, SwiGLU 768 by fla's rule, a 4,096-token vocabulary, context 256).

``model.skipless_args`` holds the arguments that rebuild the model, with ``family: lm``: ``save_backbone``
writes them beside the weights and ``load_backbone`` rebuilds the model from them (``causal_lm_from_args``)
and loads strictly, as for the ViT.
"""
from __future__ import annotations

from contextlib import nullcontext
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ModelArgumentError
from .attention import SoftmaxAttention, use_explicit_attention
from .block import RESIDUAL_MODES, RMS_NORM, ResidualBlock, rms_norm
from .decay import DECAY_BRANCHES, DECAY_INDEXINGS, DEFAULT_ALPHA_MIN, decayed_gains
from .lm_init import LM_INITS, apply_lm_init_, lm_init_args
from .rope import ROPE_THETA, apply_rope, rope_angles, working_dtype
from .vit import _check_choice

LM_FAMILY = "lm"  # skipless_args["family"] of a language model (the ViT's files say vit or nothing)
IGNORE_INDEX = -100  # a label the loss skips (torch's and Hugging Face's convention)

# The language models by name. embed_dim, depth, num_heads, mlp_hidden (SwiGLU's hidden width), vocab_size,
# context (the longest sequence the model takes: its training window). Sources in the module docstring.
LM_ARCHS: dict[str, dict[str, int]] = {
    "lm_demo": dict(embed_dim=256, depth=4, num_heads=4, mlp_hidden=768, vocab_size=4096, context=256),
    "lm_110m": dict(embed_dim=768, depth=12, num_heads=12, mlp_hidden=2048, vocab_size=32_000, context=2048),
    "lm_110m_gpt2": dict(embed_dim=768, depth=12, num_heads=12, mlp_hidden=2048, vocab_size=50_257, context=2048),
}
SIZE_ARGS = ("embed_dim", "depth", "num_heads", "mlp_hidden", "vocab_size", "context")


class CausalAttention(SoftmaxAttention):
    """Causal multi-head attention with RoPE, in timm's layout and without biases (``module docstring``).

    The mask is the module's own: ``matrix`` masks the scores above the diagonal with ``-inf`` before the
    softmax, ``fused`` calls SDPA with ``is_causal=True`` (its mask is the same lower triangle for square
    scores), whatever ``is_causal`` the caller passes. ``captured`` q and k are the rotated ones.

    Attributes:
        rope_theta: RoPE's base (``rope.ROPE_THETA``, 10,000, unless ``attention_args`` say otherwise).
    """

    DEFAULTS: dict[str, object] = {"rope_theta": ROPE_THETA}
    causal = True

    def __init__(self, *args, **kwargs) -> None:
        kwargs["qkv_bias"] = False
        kwargs["proj_bias"] = False
        super().__init__(*args, **kwargs)

    def configure(self, rope_theta: float = ROPE_THETA) -> None:
        if not rope_theta > 0:
            raise ModelArgumentError(f"rope_theta must be positive, got {rope_theta}")
        if self.head_dim % 2:
            raise ModelArgumentError(f"RoPE rotates pairs of coordinates and needs an even head width, "
                                     f"got {self.head_dim}")
        self.rope_theta = float(rope_theta)

    def rotate(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE on each head's queries and keys, positions 0 .. N-1 (``rope.py``)."""
        cos, sin = rope_angles(q.shape[-2], self.head_dim, self.rope_theta, q.device, working_dtype(q.dtype))
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)

    def matrix(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """Each head's causal attention matrix (B, heads, N, N): zero above the diagonal."""
        scores = (q * self.scale) @ k.transpose(-2, -1)
        n = scores.shape[-1]
        future = torch.ones(n, n, dtype=torch.bool, device=scores.device).triu(1)
        return scores.masked_fill(future, float("-inf")).softmax(dim=-1)

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_drop.p if self.training else 0.0,
                                              is_causal=True)


class SwiGLU(nn.Module):
    """``fc2(act(fc1_g(x)) * fc1_x(x))`` with ``act`` SiLU (Shazeer 2020; Llama, fla's ``GatedMLP``).

    Built by timm's ``Block`` (``mlp_layer``), whose ``int(dim * mlp_ratio)`` can fall one short of the
    intended width in floating point: ``hidden`` (bound with ``functools.partial``) states it exactly and
    wins over ``hidden_features``. Biases as the block asks (none in the LM); no dropout.
    """

    def __init__(self, in_features: int, hidden_features: int | None = None, act_layer: type[nn.Module] = nn.SiLU,
                 norm_layer: type[nn.Module] | None = None, bias: bool = False, drop: float = 0.0,
                 hidden: int | None = None, device=None, dtype=None) -> None:
        super().__init__()
        if norm_layer is not None or drop:
            raise ModelArgumentError("the SwiGLU MLP takes no norm and no dropout")
        width = hidden if hidden is not None else hidden_features
        dd = {"device": device, "dtype": dtype}
        self.fc1_g = nn.Linear(in_features, width, bias=bias, **dd)  # gate (fla: gate_proj)
        self.fc1_x = nn.Linear(in_features, width, bias=bias, **dd)  # up (fla: up_proj)
        self.act = act_layer()
        self.fc2 = nn.Linear(width, in_features, bias=bias, **dd)  # down (fla: down_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1_g(x)) * self.fc1_x(x))


class CausalLM(nn.Module):
    """Token embedding, ``depth`` residual blocks, final RMSNorm, output tied to the embedding.

    Build it with ``create_causal_lm``, which also initialises it and sets ``skipless_args``.

    Args:
        embed_dim, depth, num_heads, mlp_hidden, vocab_size, context: sizes (``LM_ARCHS``).
        residual: one of ``block.RESIDUAL_MODES``.
        shortcut_gains: for ``decayed``, each block's two gains (``decay.decayed_gains``); None: all 1.
        rope_theta: RoPE's base.
    """

    skipless_args: dict[str, Any]

    def __init__(self, *, embed_dim: int, depth: int, num_heads: int, mlp_hidden: int, vocab_size: int,
                 context: int, residual: str = "skip", shortcut_gains: list[tuple[float, float]] | None = None,
                 rope_theta: float = ROPE_THETA) -> None:
        super().__init__()
        self.embed_dim, self.depth, self.num_heads = embed_dim, depth, num_heads
        self.vocab_size, self.context = vocab_size, context
        gains = [(1.0, 1.0)] * depth if shortcut_gains is None else shortcut_gains
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.blocks = nn.Sequential(*[
            ResidualBlock(embed_dim, num_heads, qkv_bias=False, proj_bias=False, act_layer=nn.SiLU,
                          mlp_layer=partial(SwiGLU, hidden=mlp_hidden), attn_layer=CausalAttention,
                          residual=residual, shortcut_gains=tuple(gains[i]), norm=RMS_NORM,
                          attention_args={"rope_theta": rope_theta})
            for i in range(depth)])
        self.norm = rms_norm(embed_dim)

    @property
    def residual(self) -> str:
        return self.skipless_args["residual"]

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2 or tokens.dtype != torch.int64:
            raise ValueError(f"expected token ids of shape (batch, length) and dtype int64, got "
                             f"{tuple(tokens.shape)} {tokens.dtype}")
        if tokens.shape[1] > self.context:
            raise ValueError(f"a sequence of {tokens.shape[1]} tokens is longer than the model's context "
                             f"{self.context}; expected at most {self.context}")
        return self.embed(tokens)

    def block_outputs(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """Each block's output (B, T, d), before the final norm, in forward order (diagnostics)."""
        x, outs = self._embed(tokens), []
        for block in self.blocks:
            x = block(x, is_causal=True)
            outs.append(x)
        return outs

    def forward_features(self, tokens: torch.Tensor) -> torch.Tensor:
        """The final RMSNorm of the last block's output, (B, T, d)."""
        x = self._embed(tokens)
        for block in self.blocks:
            x = block(x, is_causal=True)
        return self.norm(x)

    def forward_head(self, x: torch.Tensor) -> torch.Tensor:
        """Logits (..., vocab_size) of features ``x`` through the tied embedding."""
        return F.linear(x, self.embed.weight)

    def forward(self, tokens: torch.Tensor, explicit: bool | None = None) -> torch.Tensor:
        """Next-token logits (B, T, vocab_size) of ``tokens`` (B, T), T <= ``context``: position t sees tokens 0..t.

        ``explicit``: True forms each attention matrix (the explicit path), False calls SDPA; None keeps the
        path each attention has (``use_explicit_attention`` sets it; SDPA by default).
        """
        with nullcontext() if explicit is None else use_explicit_attention(self, explicit):
            return self.forward_head(self.forward_features(tokens))


def next_token_log_probs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log p(tokens[:, t+1] | tokens[:, :t+1])`` (B, T-1) from ``logits`` (B, T, V) of ``tokens`` (B, T),
    in float32."""
    logp = F.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)


def next_token_loss(logits: torch.Tensor, labels: torch.Tensor, ignore_index: int = IGNORE_INDEX) -> torch.Tensor:
    """The causal LM's loss: cross-entropy of each position's logits against the *next* label, averaged over
    the ``B (T-1)`` predicted positions whose label is not ``ignore_index``; in float32.

    ``labels`` (B, T) are the input tokens themselves (or a copy with ``ignore_index`` where no loss is wanted):
    the shift happens here, as in flash-linear-attention's and Hugging Face's ``ForCausalLM`` (logits of position
    t against label t+1; the last position predicts nothing).
    """
    vocab = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, vocab).float(), labels[:, 1:].reshape(-1),
                           ignore_index=ignore_index)


def create_causal_lm(
    arch: str = "lm_demo",
    *,
    residual: str = "skip",
    init: str = "fla",
    init_args: dict[str, Any] | None = None,
    alpha_min: float | None = None,
    decay_indexing: str = "sub_block",
    decay_branches: str = "both",
    decay_zero_init: bool = True,
    rope_theta: float = ROPE_THETA,
    **sizes: int,
) -> CausalLM:
    """Build and initialise a causal language model.

    Args:
        arch: a preset of ``LM_ARCHS``: ``lm_demo`` | ``lm_110m`` | ``lm_110m_gpt2`` (module docstring).
        residual: ``skip`` | ``skipless`` | ``decayed`` | ... (``block.RESIDUAL_MODES``).
        init: ``fla`` (the anchor's N(0, 0.02^2)) | ``cutskip`` (the paper's, after ``fla``); see ``lm_init.py``.
        init_args: cutskip's ``alpha``, ``beta``, ``c``, ``qk``; a missing or None entry takes
            ``lm_init.LM_CUTSKIP_DEFAULTS`` (alpha 0, beta 0.5: seed App. A.8; c 3: ours; qk: init.py's reading).
        alpha_min, decay_indexing, decay_branches, decay_zero_init: the decayed mode's, as ``create_vit``'s.
        rope_theta: RoPE's base (10,000: fla's default).
        sizes: overrides of the preset's ``embed_dim``, ``depth``, ``num_heads``, ``mlp_hidden``, ``vocab_size``,
            ``context``.

    Returns:
        A ``CausalLM`` whose ``skipless_args`` (``family: lm``, the preset's name and every size resolved)
        rebuild it through ``causal_lm_from_args``.
    """
    _check_choice("language model", arch, LM_ARCHS)
    _check_choice("residual mode", residual, RESIDUAL_MODES)
    _check_choice("init", init, LM_INITS)
    _check_choice("decay_indexing", decay_indexing, DECAY_INDEXINGS)
    _check_choice("decay_branches", decay_branches, DECAY_BRANCHES)
    unknown = sorted(set(sizes) - set(SIZE_ARGS))
    if unknown:
        raise ModelArgumentError(f"unknown language-model arguments {unknown}; expected sizes among "
                                 f"{', '.join(SIZE_ARGS)}")
    if residual != "decayed" and ((decay_indexing, decay_branches) != (DECAY_INDEXINGS[0], DECAY_BRANCHES[0])
                                  or not decay_zero_init):
        raise ModelArgumentError(f"decay_indexing, decay_branches and decay_zero_init shape the decayed mode and "
                                 f"do nothing for residual={residual}; expected residual=decayed, or their defaults")
    size = {**LM_ARCHS[arch], **{k: int(v) for k, v in sizes.items()}}
    if size["embed_dim"] % size["num_heads"] or (size["embed_dim"] // size["num_heads"]) % 2:
        raise ModelArgumentError(f"embed_dim {size['embed_dim']} must split into {size['num_heads']} heads of an even "
                                 "width (RoPE rotates pairs of coordinates)")
    init_args = lm_init_args(init_args)
    alpha_min = DEFAULT_ALPHA_MIN if alpha_min is None else float(alpha_min)
    with torch.device("cpu"):  # numbers, also when the model is built on the meta device (counting parameters)
        gains = [tuple(g) for g in decayed_gains(size["depth"], alpha_min, decay_indexing, decay_branches).tolist()]
    model = CausalLM(**size, residual=residual, shortcut_gains=gains, rope_theta=float(rope_theta))
    apply_lm_init_(model, init, init_args, residual, zero_init=bool(decay_zero_init))
    model.skipless_args = dict(
        family=LM_FAMILY, arch=arch, residual=residual, init=init, init_args=init_args, alpha_min=alpha_min,
        decay_indexing=decay_indexing, decay_branches=decay_branches, decay_zero_init=bool(decay_zero_init),
        rope_theta=float(rope_theta), **size)
    return model


def causal_lm_from_args(args: dict[str, Any], initialise: bool = True) -> CausalLM:
    """The ``CausalLM`` that stored ``skipless_args`` (``family: lm``) describe. ``initialise=False`` skips the
    paper's (SVD-heavy) init, for weights loaded right after (``checkpoint.build_backbone``); the returned
    model's ``skipless_args`` are then the stored ones all the same."""
    build = {k: v for k, v in args.items() if k not in ("family", "arch")}
    if not initialise:
        build["init"] = "fla"
    model = create_causal_lm(args["arch"], **build)
    model.skipless_args = {**model.skipless_args, **args}
    return model


def lm_parameter_count(embed_dim: int, depth: int, mlp_hidden: int, vocab_size: int, **_: Any) -> int:
    """The parameters of a ``CausalLM`` of these sizes, by formula: the tied embedding ``V d``; per block the
    attention's ``4 d^2``, SwiGLU's ``3 d h`` and two RMSNorm weights ``2 d``; the final RMSNorm ``d``."""
    d = embed_dim
    return vocab_size * d + depth * (4 * d * d + 3 * d * mlp_hidden + 2 * d) + d


__all__ = ["IGNORE_INDEX", "LM_ARCHS", "LM_FAMILY", "CausalAttention", "CausalLM", "SwiGLU", "causal_lm_from_args",
           "create_causal_lm", "lm_parameter_count", "next_token_log_probs", "next_token_loss"]
