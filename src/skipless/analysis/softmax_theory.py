"""Seed 000's appendix A.4.1 as computations: the conditioning of a softmax attention map (Prop. 1, Fig. 5)
and the moments of the logit matrix under the initialisation (Eqs. 14-20).

The model of the appendix: token embeddings ``X`` (n x d) with i.i.d. N(0, 1) entries, ``A = X X^T`` (the
identity-like part the skipless init adds, Eq. 11's beta term), ``B = X Z X^T`` with ``Z`` (d x d) i.i.d.
N(0, 1/d) (the random part of ``W^Q W^K^T``), and the logits ``C = alpha B + beta A``. Fig. 5 draws a 10 x 10
``softmax(C)`` for (alpha, beta) = (0.1, 5) ("peak": near the identity, kappa about 1.1) and (0.1, 0) ("diffuse":
near uniform rows, kappa about 730). The appendix does not give ``d``; ``FIG5_D`` is this module's choice.

Two sets of moments are written down: ``paper_moments`` as Eqs. 14-20 print them, and ``derived_moments``,
this module's derivation under the same assumptions. They differ in one place, Eq. 17: an off-diagonal
``B_ij = sum_ab X_ia Z_ab X_jb`` is a sum of d^2 uncorrelated terms of variance 1/d each, so its variance is
``d``, not 1 (it would be 1 with Z of variance 1/d^2); Eqs. 19-20 inherit it (``alpha^2 d`` where they have
``alpha^2``). ``monte_carlo_moments`` is the independent check of both (tests/test_softmax_theory.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

FIG5_N = 10          # the appendix's 10 x 10 matrix
FIG5_D = 64          # [here] the embedding width the appendix leaves open (a ViT-S head's 64)
FIG5_CASES = {"peak": (0.1, 5.0), "diffuse": (0.1, 0.0)}  # (alpha, beta) of Fig. 5, left and right


def logit_matrices(n: int, d: int, alpha: float, beta: float, generator: torch.Generator,
                   draws: int = 1) -> dict[str, torch.Tensor]:
    """``draws`` independent (A, B, C) of the appendix's model, float64, each ``(draws, n, n)``."""
    x = torch.randn(draws, n, d, generator=generator, dtype=torch.float64)
    z = torch.randn(draws, d, d, generator=generator, dtype=torch.float64) / d ** 0.5
    a = x @ x.transpose(1, 2)
    b = x @ z @ x.transpose(1, 2)
    return {"A": a, "B": b, "C": alpha * b + beta * a}


def softmax_kappa(logits: torch.Tensor) -> torch.Tensor:
    """The 2-norm condition number sigma_max / sigma_min of the row softmax of each ``(..., n, n)`` matrix."""
    s = torch.linalg.svdvals(torch.softmax(logits, dim=-1))
    return s[..., 0] / s[..., -1]


@dataclass(frozen=True)
class Moments:
    """Mean and variance of the diagonal and off-diagonal entries of A, B, C, and of gamma = C_ii - C_ij."""
    a_diag: tuple[float, float]
    a_off: tuple[float, float]
    b_diag: tuple[float, float]
    b_off: tuple[float, float]
    c_diag: tuple[float, float]
    c_off: tuple[float, float]
    gamma: tuple[float, float]


def paper_moments(d: int, alpha: float, beta: float) -> Moments:
    """Eqs. 14-20 of seed 000 as printed (Eq. 17: Var(B_ij) = 1)."""
    return Moments(a_diag=(d, 2 * d), a_off=(0.0, d), b_diag=(0.0, d + 2), b_off=(0.0, 1.0),
                   c_diag=(beta * d, alpha ** 2 * (d + 2) + beta ** 2 * 2 * d), c_off=(0.0, alpha ** 2 + beta ** 2 * d),
                   gamma=(beta * d, alpha ** 2 * (d + 3) + beta ** 2 * 3 * d))


def derived_moments(d: int, alpha: float, beta: float) -> Moments:
    """The same moments derived here (module docstring): Var(B_ij) = d, and what follows from it. The covariances
    the appendix neglects are zero: E[B_ii A_ii] = 0 (Z has mean 0) and E[C_ii C_ij] = 0 (X_j has mean 0)."""
    var_b_off = float(d)
    return Moments(a_diag=(d, 2 * d), a_off=(0.0, d), b_diag=(0.0, d + 2), b_off=(0.0, var_b_off),
                   c_diag=(beta * d, alpha ** 2 * (d + 2) + beta ** 2 * 2 * d),
                   c_off=(0.0, alpha ** 2 * var_b_off + beta ** 2 * d),
                   gamma=(beta * d, alpha ** 2 * (d + 2 + var_b_off) + beta ** 2 * 3 * d))


def monte_carlo_moments(n: int, d: int, alpha: float, beta: float, draws: int, generator: torch.Generator) -> Moments:
    """The moments estimated from ``draws`` matrices of the model (every diagonal and off-diagonal entry pooled;
    gamma from the pairs (i, j), i != j, of each row)."""
    m = logit_matrices(n, d, alpha, beta, generator, draws)
    eye = torch.eye(n, dtype=torch.bool)

    def stats(t: torch.Tensor, diagonal: bool) -> tuple[float, float]:
        v = t[:, eye] if diagonal else t[:, ~eye]
        return float(v.mean()), float(v.var())

    c = m["C"]
    gamma = (torch.diagonal(c, dim1=1, dim2=2).unsqueeze(-1) - c)[:, ~eye]
    return Moments(a_diag=stats(m["A"], True), a_off=stats(m["A"], False), b_diag=stats(m["B"], True),
                   b_off=stats(m["B"], False), c_diag=stats(c, True), c_off=stats(c, False),
                   gamma=(float(gamma.mean()), float(gamma.var())))
