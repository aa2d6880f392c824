"""The extreme eigenvalues of a symmetric positive semi-definite operator known only by its products.

The conditioning diagnostics need ``lambda_max`` and ``lambda_min`` of ``J J^T`` (dimension ``mnd``,
75 648 for one 224 px image on ViT-S) and of ``K K^T`` (Ji et al., "Cutting the Skip", Section 4 and
Appendix A.7, Tables 5 and 6); neither matrix is ever formed, each product ``A v`` costs a
vector-Jacobian and a Jacobian-vector product. Lanczos (Golub & Van Loan, *Matrix Computations*,
Section 10.1) builds an orthonormal basis ``Q_k`` of the Krylov space ``span{q, A q, ..., A^{k-1} q}``
in which ``A`` is the tridiagonal ``T_k = Q_k^T A Q_k``; the eigenvalues of ``T_k`` (Ritz values)
approach the extreme eigenvalues of ``A`` first. Every new vector is orthogonalised against the
whole basis twice ("twice is enough", Parlett), so no spurious copies of converged Ritz values
appear; the basis costs ``k * dim`` numbers, small next to the products.

``ends = k > 1`` asks for the ``k`` largest and the ``k`` smallest Ritz pairs instead of one of each (the ends of a
spectrum to draw: seeds/003 Figs. 7-8, ``eval/conditioning/spectrum.py``): they are returned in ``top`` and
``bottom`` with their residuals, and every one of them must meet the tolerance for the run to converge. Lanczos
with a random start finds each *distinct* eigenvalue once: a repeated eigenvalue appears once among them.

How convergence is known. For a Ritz pair ``(theta, y = Q_k s)``, ``||A y - theta y|| = beta_k |e_k^T s|``
(the cheap formula, checked against the explicit residual in the tests). The loop stops when the
largest and the smallest Ritz pair both have relative residual ``<= tol * theta``; or when ``beta_k``
is rounding noise (``<= dim * eps * theta_max``): the Krylov space is invariant and the Ritz values
are eigenvalues (a random start has, with probability one, a component along every distinct
eigenvalue, so the extremes are among them); or, given ``zero_tol``, when the smallest Ritz value is
``<= zero_tol * largest`` (the operator is then certainly numerically singular: see below); or at
``max_iter``, unconverged; or when ``watch`` says so after a product (a time budget,
``solve_budget.py``), unconverged too.

What is *not* guaranteed. A small residual proves an eigenvalue within ``residual`` of ``theta``,
not that it is the extreme one (Lanczos could in principle miss an eigenvalue the start vector is
almost orthogonal to; the random start makes this unlikely, nothing more). By Cauchy interlacing
the Ritz values lie inside the spectrum: the largest is a lower bound on ``lambda_max`` and the
smallest an *upper* bound on ``lambda_min`` at every iteration, so an unconverged ratio
``largest / smallest`` is a lower bound on the condition number, and a small smallest Ritz value
proves a small eigenvalue.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from scipy.linalg import eigh_tridiagonal

from ..errors import SkiplessError

__all__ = ["Spectrum", "LanczosArgumentError", "extreme_eigenvalues"]


class LanczosArgumentError(SkiplessError, ValueError):
    """An operator dimension, tolerance or iteration count Lanczos cannot use."""


@dataclass(frozen=True)
class Spectrum:
    """The extreme Ritz pairs of a symmetric PSD operator after Lanczos.

    ``largest``/``smallest``: the extreme Ritz values (eigenvalues when ``converged``);
    ``*_residual``: ``||A y - theta y||`` of their Ritz vectors (absolute); ``iterations``: products
    ``A v`` taken; ``converged``: both ends met the tolerance, or the Krylov space was exhausted
    (``exhausted``: then the values are exact to rounding); ``below_zero_tol``: stopped because the
    smallest Ritz value fell below ``zero_tol * largest``; ``finite``: every product was finite
    (False: an overflow stopped the run and the values are NaN); ``budget_spent``: ``watch`` stopped it
    before convergence; ``top``/``bottom``: the ``ends`` largest Ritz values, largest first, and the ``ends``
    smallest, smallest first (fewer when the Krylov space is smaller), ``*_residuals`` theirs (absolute).
    """

    largest: float
    smallest: float
    largest_residual: float
    smallest_residual: float
    iterations: int
    dim: int
    converged: bool
    exhausted: bool = False
    below_zero_tol: bool = False
    finite: bool = True
    budget_spent: bool = False
    top: tuple[float, ...] = ()
    bottom: tuple[float, ...] = ()
    top_residuals: tuple[float, ...] = ()
    bottom_residuals: tuple[float, ...] = ()
    largest_vector: torch.Tensor | None = field(default=None, repr=False, compare=False)
    smallest_vector: torch.Tensor | None = field(default=None, repr=False, compare=False)


def _check(dim: int, tol: float, max_iter: int, ends: int = 1) -> None:
    if not (isinstance(dim, int) and dim >= 1):
        raise LanczosArgumentError(f"the operator dimension must be a positive integer, got {dim!r}")
    if not (0 < tol < 1):
        raise LanczosArgumentError(f"tol must be in (0, 1), got {tol!r}")
    if not (isinstance(max_iter, int) and max_iter >= 1):
        raise LanczosArgumentError(f"max_iter must be a positive integer, got {max_iter!r}")
    if not (isinstance(ends, int) and ends >= 1):
        raise LanczosArgumentError(f"ends must be a positive integer, got {ends!r}")


def extreme_eigenvalues(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    dim: int,
    *,
    tol: float = 1e-3,
    max_iter: int = 300,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    zero_tol: float | None = None,
    watch: Callable[[int, float, float, float, float], bool] | None = None,
    ends: int = 1,
) -> Spectrum:
    """Largest and smallest eigenvalue of the symmetric PSD ``A`` given ``matvec(v) = A v``.

    Args:
        matvec: takes and returns a flat tensor of length ``dim`` in ``dtype`` (on ``device``).
        dim: the operator's size; at most ``dim`` iterations are ever needed.
        tol: relative residual required at each end (``||A y - theta y|| <= tol * theta``).
        max_iter: the most products taken.
        seed: seeds the random start vector (a CPU generator, so results repeat across devices).
        dtype: the working precision of the basis and the products.
        zero_tol: stop once ``smallest <= zero_tol * largest`` (the smallest eigenvalue is then
            certainly below that, see the module docstring); None never stops for this.
        watch: called after each product with (products, largest, smallest, and their residuals);
            True stops the run unconverged (``budget_spent``): a progress line and a time budget.
        ends: how many Ritz pairs at each end must converge (``top``, ``bottom``); 1: the extremes only.
    """
    _check(dim, tol, max_iter, ends)
    eps = float(torch.finfo(dtype).eps)
    steps = min(max_iter, dim)
    q = torch.randn(dim, generator=torch.Generator().manual_seed(seed), dtype=dtype).to(device)
    q = q / q.norm()
    basis = torch.empty(steps, dim, dtype=dtype, device=device)
    alphas: list[float] = []
    betas: list[float] = []
    beta_prev = 0.0
    for k in range(steps):
        basis[k] = q
        w = matvec(q)
        if not bool(torch.isfinite(w).all()):
            nan = float("nan")
            return Spectrum(nan, nan, nan, nan, k + 1, dim, False, finite=False)
        alpha = float(torch.dot(q, w))
        w = w - alpha * q
        if k > 0:
            w = w - beta_prev * basis[k - 1]
        qs = basis[: k + 1]
        for _ in range(2):  # full reorthogonalisation, twice
            w = w - qs.T @ (qs @ w)
        beta = float(w.norm())
        alphas.append(alpha)

        theta, s = eigh_tridiagonal(np.array(alphas), np.array(betas)) if k > 0 else (
            np.array(alphas), np.ones((1, 1)))
        residual = beta * np.abs(s[-1, :])
        top, bottom = float(theta[-1]), float(theta[0])
        exhausted = k + 1 == dim or beta <= dim * eps * abs(top)
        j = min(ends, k + 1)
        top_ok = bool(np.all(residual[-j:] <= tol * theta[-j:]))
        bottom_ok = bool(np.all(residual[:j] <= tol * np.abs(theta[:j])))
        if ends > 1 and k + 1 < ends and not exhausted:  # fewer Ritz pairs than asked for at each end
            top_ok = bottom_ok = False
        singular = zero_tol is not None and bottom <= zero_tol * top
        done = exhausted or (top_ok and bottom_ok) or singular
        spent = not done and watch is not None and watch(k + 1, top, bottom, float(residual[-1]), float(residual[0]))
        if done or spent or k + 1 == steps:
            vectors = qs.T @ torch.as_tensor(s[:, [-1, 0]], dtype=dtype, device=qs.device)
            return Spectrum(
                largest=top, smallest=bottom,
                largest_residual=float(residual[-1]), smallest_residual=float(residual[0]),
                iterations=k + 1, dim=dim, converged=bool(exhausted or (top_ok and bottom_ok)),
                exhausted=bool(exhausted), below_zero_tol=bool(singular), budget_spent=bool(spent),
                top=tuple(float(x) for x in theta[::-1][:j]), bottom=tuple(float(x) for x in theta[:j]),
                top_residuals=tuple(float(x) for x in residual[::-1][:j]),
                bottom_residuals=tuple(float(x) for x in residual[:j]),
                largest_vector=vectors[:, 0], smallest_vector=vectors[:, 1],
            )
        betas.append(beta)
        beta_prev = beta
        q = w / beta
    raise AssertionError("unreachable: the loop returns at its last step")
