"""Rotary position embedding (RoPE; Su et al. 2021, "RoFormer") for the causal language model.

RoPE turns each query and key of a head (width ``d_h``, even) at position ``t`` by ``d_h / 2`` plane rotations,
pair ``i`` by the angle ``t * theta^(-2 i / d_h)``, ``i = 0 .. d_h/2 - 1``. Then ``<R_t q, R_s k>`` depends on
``q``, ``k`` and ``t - s`` only: the scores see relative positions, and a token's score with itself is
``<q, k>`` unrotated (what the paper's ``W^Q W^K^T = alpha Z + beta I`` shapes, ``lm_init.py``).

Which coordinates form a pair is a convention, and checkpoints of the two do not mix. Here it is the
*rotate-half* (GPT-NeoX) one, that of Llama in Hugging Face transformers and of flash-linear-attention's
``RotaryEmbedding`` with its default ``interleaved=False`` (the LM's anchor, seeds/000 App. A.8): pair ``i``
is coordinates ``(i, i + d_h/2)``, i.e.

    rope(x)[:h] = x[:h] cos - x[h:] sin,    rope(x)[h:] = x[h:] cos + x[:h] sin,    h = d_h / 2,

and not the interleaved pairs ``(2i, 2i + 1)`` of the RoFormer paper and Meta's original Llama code.

theta = 10,000 (``ROPE_THETA``): flash-linear-attention's ``rope_theta`` default (RoFormer's and Llama's value).
The angles are computed in float32 as those codes do (``t * inv_freq``: at t = 2047 an error of about 1e-4
rad on the fastest pair), and the rotation runs in float32 for half-precision inputs, the result cast back;
a float64 input (the diagnostics' float64 copies) is rotated by float64 angles.
"""
from __future__ import annotations

import torch

ROPE_THETA = 10_000.0


def working_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype RoPE computes in for inputs of ``dtype``: float64 stays, anything else is float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def rope_angles(length: int, head_dim: int, theta: float = ROPE_THETA, device: torch.device | str | None = None,
                dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` of the angles ``t * theta^(-2 i / d_h)``, each (length, head_dim / 2) in ``dtype``, for the
    positions ``t = 0 .. length - 1``."""
    if head_dim % 2:
        raise ValueError(f"RoPE rotates pairs of coordinates and needs an even head width, got {head_dim}")
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=dtype, device=device) / head_dim)
    angles = torch.arange(length, dtype=dtype, device=device)[:, None] * inv_freq[None, :]
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x`` (..., length, d_h) with position ``t`` rotated by ``(cos[t], sin[t])`` in the rotate-half
    convention (module docstring); computed in ``cos``'s dtype, returned in ``x``'s."""
    h = x.shape[-1] // 2
    xw = x.to(cos.dtype)
    x1, x2 = xw[..., :h], xw[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


__all__ = ["ROPE_THETA", "apply_rope", "rope_angles", "working_dtype"]
