"""A condition number ``kappa(A) = lambda_max / lambda_min`` of a symmetric PSD ``A``, and when it is infinite.

The conditioning diagnostics report ``kappa(J J^T)`` and ``kappa(K K^T)`` as the paper does
(Ji et al., "Cutting the Skip", Appendix A.7, Tables 5 and 6), where "∞" is a legitimate entry: the
skipless baseline's row of Table 5 is ∞ at every epoch because the run diverged and overflowed.
So a result is a number *or* infinity with a reason, and the reason is one of three rules:

* non-finite weights -> ∞, ``"non-finite weights (the model diverged)"`` (the caller checks the
  parameters before any product; Table 5's skipless row);
* a non-finite product ``A v`` (or a non-finite dense matrix) -> ∞, ``"overflow"``;
* ``lambda_min <= dim * eps(dtype) * lambda_max`` -> ∞, ``"smallest eigenvalue numerically zero"``:
  numpy's ``matrix_rank`` tolerance ``S.max() * max(M, N) * eps`` applied to ``A`` itself (whose
  singular values are its eigenvalues). Below it the computed ``lambda_min`` is rounding noise.
  With Lanczos the smallest Ritz value is an upper bound on ``lambda_min``, so once it is below the
  threshold the verdict is certain even before convergence. Note the threshold grows with ``dim``:
  in float32 with ``dim = 75 648`` (one 224 px image on ViT-S) it is ``9e-3 * lambda_max``, so any
  ``kappa`` above about 110 reads ∞ there; float64 (the default) resolves up to about ``6e10``.

The same rule decides every "numerically zero" of the analysis (``numerically_zero``: a singular
value ``s <= s_max * max(m, n) * eps`` of an ``m x n`` matrix, in the dtype it was computed in), so an
infinity depends on the values and never on which LAPACK/BLAS kernel produced them: MKL's AVX512
path returns 6.7e-47 and 1.9e-78 for the exact zeros of a rank-one 4 x 6 matrix where other kernels
return 0, and both are far below the threshold. ``svd_condition`` is the 2-norm ``kappa`` of a
(batch of) matrices under that rule; the embeddings (``embedding_condition.py``), the attention
matrices at init (``attention_conditioning.py``), the effective rank and the token cosines of
``block_signals.py`` use it.

Otherwise ``value = largest / smallest``. If Lanczos stopped at ``max_iter`` before both ends met
their tolerance, the largest Ritz value under-estimates ``lambda_max`` and the smallest over-estimates
``lambda_min``, so the value is a *lower bound* on ``kappa``; ``converged`` is False and ``short()``
prints it as ``≥ ...``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from ..errors import SkiplessError
from .lanczos import Spectrum, extreme_eigenvalues

__all__ = [
    "Condition", "DenseMatrixError", "DIVERGED", "OVERFLOW", "NUMERICALLY_ZERO",
    "json_number", "zero_threshold", "numerically_zero", "svd_condition", "condition_from_spectrum",
    "operator_condition", "dense_condition", "infinite_condition",
]

DIVERGED = "non-finite weights (the model diverged)"
OVERFLOW = "overflow"
NUMERICALLY_ZERO = "smallest eigenvalue numerically zero"


class DenseMatrixError(SkiplessError, ValueError):
    """A dense matrix whose shape the requested condition number does not fit."""


def zero_threshold(dim: int, dtype: torch.dtype) -> float:
    """The relative size ``dim * eps(dtype)`` below which an eigenvalue is numerically zero (numpy's
    ``matrix_rank`` convention)."""
    return dim * float(torch.finfo(dtype).eps)


def numerically_zero(singular_values: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Which singular values of a ``rows x cols`` matrix are numerically zero (a boolean mask).

    ``s <= s_max * max(rows, cols) * eps``, eps of the values' dtype, ``s_max`` the largest value of
    each matrix of a batch (the last dimension holds one matrix's values): numpy's ``matrix_rank``
    tolerance. Every value of an all-zero matrix is zero (``0 <= 0``).
    """
    s_max = singular_values.amax(dim=-1, keepdim=True)
    return singular_values <= s_max * zero_threshold(max(rows, cols), singular_values.dtype)


def svd_condition(singular_values: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The 2-norm condition number ``s_max / s_min`` of each ``rows x cols`` matrix of a batch from its
    singular values (last dimension, descending as ``torch.linalg.svdvals`` gives them); ``inf`` where
    ``s_min`` is numerically zero (``numerically_zero``). Finite values are below ``1 / (max(rows, cols) * eps)``."""
    singular = numerically_zero(singular_values, rows, cols)[..., -1]
    kappa = singular_values[..., 0] / singular_values[..., -1]
    return torch.where(singular, math.inf, kappa)


def json_number(x: float) -> float | str:
    return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


def _compact(x: float) -> str:
    if x < 100:
        return f"{x:.3g}"
    if x < 1e5:
        return f"{x:.0f}"
    mantissa, exponent = f"{x:.2g}".split("e")
    return f"{mantissa}e{int(exponent)}"


@dataclass(frozen=True)
class Condition:
    """``kappa(A)`` of a symmetric PSD ``A`` with how it was obtained.

    ``value``: ``largest / smallest``, ``math.inf`` when ``reason`` says why (see the module rules),
    a lower bound when not ``converged``; ``largest``/``smallest``: the extreme eigenvalue estimates
    (NaN when never computed); ``*_residual``: their ``||A y - theta y||`` (0 for the dense path);
    ``iterations``: products ``A v`` (0 for dense); ``dim``: the size of ``A``; ``method``:
    ``"lanczos"`` or ``"dense"``; ``budget_spent``: a time budget, not ``max_iter``, stopped Lanczos.
    """

    value: float
    reason: str | None
    largest: float
    smallest: float
    largest_residual: float
    smallest_residual: float
    iterations: int
    dim: int
    converged: bool
    method: str
    budget_spent: bool = False

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict: infinities and NaNs become the strings ``"inf"``, ``"-inf"``, ``"nan"``."""
        return {k: json_number(v) if isinstance(v, float) else v for k, v in asdict(self).items()}

    def short(self) -> str:
        """One cell of a table: ``207``, ``∞ (smallest eigenvalue numerically zero)``, ``≥ 1.3e6 (not converged)``."""
        if self.reason is not None:
            return f"∞ ({self.reason})"
        if not self.converged:
            return f"≥ {_compact(self.value)} (not converged{' in its time budget' if self.budget_spent else ''})"
        return _compact(self.value)


    def terse(self) -> str:
        """The value in a line of several: as ``short()`` without the words after a bound (``≥ 1.3e6``), which
        the line says once (``unconverged_note``); a bound below 2 is ``no bound`` (every kappa is at least 1)."""
        if self.reason is not None or self.converged:
            return self.short()
        return f"≥ {_compact(self.value)}" if self.value >= 2 else "no bound"


def unconverged_note(conditions: list[Condition]) -> str:
    """The words for the unconverged values of a line, once: empty when every value converged."""
    stopped = [c for c in conditions if c.reason is None and not c.converged]
    if not stopped:
        return ""
    budget = sum(c.budget_spent for c in stopped)
    cause = ("the time budget (diagnostics.budget_s)" if budget == len(stopped) else
             "max_iter" if not budget else "the time budget or max_iter")
    return (f"{len(stopped)} of {len(conditions)} solves stopped by {cause} before converging: "
            "≥ is a lower bound")


def infinite_condition(reason: str, dim: int, method: str = "lanczos") -> Condition:
    """``kappa = ∞`` decided before (or without) any eigenvalue, e.g. for non-finite weights."""
    nan = math.nan
    return Condition(math.inf, reason, nan, nan, nan, nan, 0, dim, True, method)


def condition_from_spectrum(spectrum: Spectrum, dtype: torch.dtype) -> Condition:
    """Apply the module's rules to a Lanczos result computed in ``dtype``."""
    s = spectrum
    if not s.finite:
        return Condition(math.inf, OVERFLOW, s.largest, s.smallest, s.largest_residual, s.smallest_residual,
                         s.iterations, s.dim, False, "lanczos")
    zero = s.largest <= 0 or s.smallest <= zero_threshold(s.dim, dtype) * s.largest
    return Condition(
        value=math.inf if zero else s.largest / s.smallest,
        reason=NUMERICALLY_ZERO if zero else None,
        largest=s.largest, smallest=s.smallest,
        largest_residual=s.largest_residual, smallest_residual=s.smallest_residual,
        iterations=s.iterations, dim=s.dim, converged=bool(zero or s.converged), method="lanczos",
        budget_spent=bool(s.budget_spent and not zero),
    )


class Solver(NamedTuple):
    """How every condition number of the analysis is solved, one object for all of them (``operator_condition``
    and the Jacobian and block functions that call it): Lanczos' relative tolerance at both ends of the
    spectrum and its most products (``lanczos.extreme_eigenvalues``; stopping at ``max_iter`` gives a lower
    bound), the seed of its start vector, and the dtype the operator runs in (float64 resolves ``kappa`` up to
    about 6e10 where float32 reads about 110 as ∞ at 224 px: the module docstring). ``Solver(max_iter=600)``
    changes one setting."""

    tol: float = 1e-3
    max_iter: int = 300
    seed: int = 0
    dtype: torch.dtype = torch.float64


def operator_condition(
    matvec: Callable[[torch.Tensor], torch.Tensor],
    dim: int,
    solver: Solver = Solver(),
    *,
    device: torch.device | str | None = None,
    watch: Callable[[int, float, float, float, float], bool] | None = None,
) -> Condition:
    """``kappa(A)`` of the symmetric PSD operator ``matvec(v) = A v`` by Lanczos (``lanczos.py``), as ``solver``
    says, stopping early once the smallest eigenvalue is certainly numerically zero; ``watch``: Lanczos'
    (progress and a time budget, ``solve_budget.py``)."""
    spectrum = extreme_eigenvalues(matvec, dim, tol=solver.tol, max_iter=solver.max_iter, seed=solver.seed,
                                   dtype=solver.dtype, device=device, zero_tol=zero_threshold(dim, solver.dtype),
                                   watch=watch)
    return condition_from_spectrum(spectrum, solver.dtype)


def dense_condition(matrix: torch.Tensor | np.ndarray, *, gram: bool = False) -> Condition:
    """``kappa`` of a dense matrix, in its own dtype.

    ``gram=False``: ``matrix`` is the symmetric PSD ``A`` itself (``eigvalsh``). ``gram=True``:
    ``A = M M^T`` for ``matrix = M`` of any shape, from the squared singular values of ``M`` (more
    accurate than forming ``M M^T``); ``A`` has size ``rows``, and when ``rows > cols`` its smallest
    eigenvalue is exactly zero.
    """
    m = torch.as_tensor(matrix)
    if m.ndim != 2 or not m.is_floating_point():
        raise DenseMatrixError(f"expected a 2-D floating-point matrix, got shape {tuple(m.shape)} of {m.dtype}")
    rows, cols = m.shape
    if not bool(torch.isfinite(m).all()):
        return infinite_condition(OVERFLOW, rows, "dense")
    if gram:
        s = torch.linalg.svdvals(m)
        eig = (s * s).flip(0)
        if rows > cols:
            eig = torch.cat([eig.new_zeros(rows - cols), eig])
    else:
        if rows != cols or not torch.allclose(m, m.T, rtol=1e-10 if m.dtype == torch.float64 else 1e-5, atol=0):
            raise DenseMatrixError(
                f"expected a symmetric matrix (or gram=True for M M^T), got shape {tuple(m.shape)}")
        eig = torch.linalg.eigvalsh(m)
    largest, smallest = float(eig[-1]), float(eig[0])
    zero = largest <= 0 or smallest <= zero_threshold(rows, m.dtype) * largest
    return Condition(math.inf if zero else largest / smallest, NUMERICALLY_ZERO if zero else None,
                     largest, smallest, 0.0, 0.0, 0, rows, True, "dense")
