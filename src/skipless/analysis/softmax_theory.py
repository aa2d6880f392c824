"""Seed 000's appendix A.4.1-A.4.2 as computations: the conditioning of a softmax attention map (Prop. 1, Fig. 5),
the moments of the logit matrix under the initialisation (Eqs. 14-20), and the size of the attention map's
derivative with respect to the tokens (Lemma 1).

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

Lemma 1 (App. A.4.2): with ``A = softmax(M)``, ``M = X W^Q W^K^T X^T`` and Eq. 11's ``W^Q W^K^T = alpha Z + beta I``,
"the 2-norm of the derivative scales, ||d vec(A) / d vec(X)||_2 = O(alpha e^-beta)". Read here: on the
appendix's model (X and Z as above, no 1/sqrt(d) logit scale), there is a constant depending on n, d and the
draw but not on alpha or beta with ``||d vec(A) / d vec(X)||_2 <= constant * alpha e^-beta``; so the derivative
vanishes as alpha -> 0 at any beta, and decays at least as e^-beta as beta grows at any alpha.
``lemma1_terms`` computes the derivative (in closed form, float64; tests/test_softmax_theory.py checks it against
autograd and finite differences), the claim's ``alpha e^-beta``, the proof's
``||d vec(A) / d vec(M)||_2 = max_i ||J_A,i||_2`` (Eq. 22's blocks, Eqs. 28-29) and the bound the chain rule
gives, ``||d vec(A)/d vec(X)||_2 <= ||d vec(A)/d vec(M)||_2 * 2 ||X||_2 ||alpha Z + beta I||_2`` (dM = dX W X^T +
X W dX^T). Two steps of the proof do not hold as written: Eq. 21 drops the factor ``||d vec(M)/d vec(X)||_2``,
which is not below 1 (it carries beta: ``dM`` has the term ``beta (dX X^T + X dX^T)``, whatever alpha); and
Eqs. 23-28 give the softmax's Jacobian the factor alpha, which it does not have (at alpha = 0, beta > 0 the map
``softmax(beta X X^T)`` is near the identity but not equal to it). So at beta > 0 the derivative stays
positive as alpha -> 0, and the decay in beta is ``e^-(beta gap)`` with the gap ``X_i.X_i - X_i.X_j`` of order d.
"""
from __future__ import annotations

import math
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


def softmax_jacobian_blocks(a: torch.Tensor) -> torch.Tensor:
    """Eq. 22: the ``n`` diagonal blocks ``(J_A,i)_jk = A_ij (delta_jk - A_ik)`` of ``d vec(A) / d vec(M)`` for a
    row softmax ``a`` (n x n): ``(n, n, n)``, block ``i`` first."""
    return torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2)


def logit_jacobian(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``d vec(M) / d vec(X)`` (n^2 x nd, row-major vec) of ``M = X W X^T``: ``dM_ij / dX_kl = delta_ik (X W^T)_jl +
    delta_jk (X W)_il``."""
    n, d = x.shape
    eye = torch.eye(n, dtype=x.dtype)
    left = torch.einsum("ik,jl->ijkl", eye, x @ w.T)
    right = torch.einsum("jk,il->ijkl", eye, x @ w)
    return (left + right).reshape(n * n, n * d)


def lemma1_terms(x: torch.Tensor, z: torch.Tensor, alpha: float, beta: float) -> dict[str, float]:
    """Lemma 1's two sides for tokens ``x`` (n x d) and ``z`` (d x d), float64 (module docstring).

    Returns ``derivative`` (``||d vec(A) / d vec(X)||_2``, the Jacobian in closed form: Eq. 22's block-diagonal
    ``d vec(A) / d vec(M)`` times ``logit_jacobian``), ``claim`` (``alpha e^-beta``), ``softmax``
    (``||d vec(A) / d vec(M)||_2``, Eq. 21's right side), ``chain`` (the chain rule's bound), and ``min_diagonal``
    (the smallest ``A_ii``, Eq. 23's ``1 - O(alpha e^-beta)``)."""
    x, z = x.double(), z.double()
    n, d = x.shape
    w = alpha * z + beta * torch.eye(d, dtype=torch.float64)
    a = torch.softmax(x @ w @ x.T, dim=-1)
    blocks = softmax_jacobian_blocks(a)
    jac = torch.block_diag(*blocks) @ logit_jacobian(x, w)
    softmax = float(torch.linalg.matrix_norm(blocks, ord=2).max())
    logits = 2 * float(torch.linalg.matrix_norm(x, ord=2)) * float(torch.linalg.matrix_norm(w, ord=2))
    return {"derivative": float(torch.linalg.matrix_norm(jac, ord=2)), "claim": alpha * math.exp(-beta),
            "softmax": softmax, "chain": softmax * logits, "min_diagonal": float(a.diagonal().min())}
