"""Seed 004's Theorem A.1 (App. A, proof in App. F.3) as a computation: how far from orthogonal OSA's attention
matrix is when its basis comes from Newton-Schulz steps that have not converged.

With ``B`` the basis of ``[Q, K]`` after K Newton-Schulz steps (``models/osa.py``'s ``newton_schulz_basis``, from
``M / (||M||_F + eps)``) and ``Y = I_N + B (exp(B^T S B) - I_r) B^T`` (Eq. 6's right side with that ``B``; the
model's attention matrix, ``OrthogonalAttention.matrix``), the theorem states

    ||Y^T Y - I_N||_2 <= (e^||S||_2 - 1)^2 max_i |sigma_i(B)^2 (sigma_i(B)^2 - 1)|     (10)
                      <= (e^||S||_2 - 1)^2 / 4,                                      (11)

``S = alpha / sqrt(d_v) (Q K^T - K Q^T)`` the N x N skew-symmetric matrix. Read here: ``||S||_2`` of that N x N
matrix (the proof bounds ``||U^T S U||_2`` by it); the singular values of ``B`` are its min(N, r) = r values. The
proof needs ``sigma_i(B) <= 1``, which the Frobenius pre-normalisation and the step ``s -> (3 s - s^3) / 2``
(increasing on [0, 1], fixing 1) guarantee. Independently of S, the error is at most 1: ``Y^T Y - I = B Delta^T E
Delta B^T`` (the proof's Eq. 28, ``E = B^T B - I``, which has no positive eigenvalue) is negative semi-definite and
``Y^T Y`` is not negative, so Eq. 10 says something only where it is below 1. ``thm_a1_terms`` computes both sides through the suite's own
``low_rank_factors`` in float64; ``osa_head_inputs`` reads one head's ``Q``, ``K`` and scale from the suite's
``OrthogonalAttention``.
"""
from __future__ import annotations

import math

import torch

from ..models.osa import low_rank_factors


def osa_head_inputs(attn: torch.nn.Module, x: torch.Tensor, head: int = 0) -> tuple[torch.Tensor, torch.Tensor, float]:
    """``(Q, K, alpha / sqrt(d_v))`` of ``head`` of an ``OrthogonalAttention`` for tokens ``x`` (N x d), float64
    (timm's fused ``qkv`` rows: ``[Q; K; V]``, each head-major)."""
    w = attn.qkv.weight.detach().double()
    inner, dh = w.shape[0] // 3, attn.head_dim
    rows = slice(head * dh, (head + 1) * dh)
    q = x.double() @ w[:inner][rows].T
    k = x.double() @ w[inner:2 * inner][rows].T
    return q, k, float(attn.alpha.detach()) * float(attn.scale)


def thm_a1_terms(q: torch.Tensor, k: torch.Tensor, scale: float, steps: int) -> dict[str, float]:
    """Both sides of Theorem A.1 after ``steps`` Newton-Schulz steps on ``[q, k]`` (N x d_v each), float64:
    ``error`` = ||Y^T Y - I||_2, ``bound`` (Eq. 10), ``bound_quarter`` (Eq. 11), ``factor`` = max_i
    |sigma_i^2 (sigma_i^2 - 1)|, ``s_norm`` = ||S||_2, ``sigma_min`` and ``sigma_max`` of ``B``."""
    q, k = q.double(), k.double()
    b, d = low_rank_factors(q, k, scale, "newton-schulz", steps)
    n = q.shape[0]
    eye = torch.eye(n, dtype=torch.float64)
    y = eye + b @ d @ b.T
    s_norm = float(torch.linalg.matrix_norm(scale * (q @ k.T - k @ q.T), ord=2))
    sigma = torch.linalg.svdvals(b)
    factor = float((sigma ** 2 * (sigma ** 2 - 1)).abs().max())
    growth = math.expm1(s_norm) ** 2
    return {"error": float(torch.linalg.matrix_norm(y.T @ y - eye, ord=2)), "bound": growth * factor,
            "bound_quarter": growth / 4, "factor": factor, "s_norm": s_norm, "sigma_min": float(sigma.min()),
            "sigma_max": float(sigma.max())}
