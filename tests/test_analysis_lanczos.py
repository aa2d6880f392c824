"""Lanczos extreme eigenvalues and the condition-number rules, against numpy's dense eigensolver."""
import json
import math

import numpy as np
import pytest
import torch

from skipless.analysis.condition_number import (
    NUMERICALLY_ZERO, OVERFLOW, Condition, DenseMatrixError, Solver, dense_condition, numerically_zero, operator_condition,
    svd_condition,
)
from skipless.analysis.lanczos import LanczosArgumentError, extreme_eigenvalues
from skipless.errors import SkiplessError


def spd(dim: int, kappa: float, seed: int, singular: int = 0) -> np.ndarray:
    """A random symmetric PSD matrix with log-spaced spectrum in [1, kappa] (``singular`` zeros)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((dim, dim)))
    eig = np.geomspace(1.0, kappa, dim)
    eig[:singular] = 0.0
    return (q * eig) @ q.T


def as_matvec(a: np.ndarray):
    t = torch.from_numpy(a)
    return lambda v: t @ v


@pytest.mark.parametrize("dim,kappa", [(50, 1.0), (120, 10.0), (200, 1e3), (400, 1e4)])
def test_extremes_match_eigvalsh_and_the_residual_formula(dim, kappa):
    a = spd(dim, kappa, seed=dim)
    ref = np.linalg.eigvalsh(a)
    s = extreme_eigenvalues(as_matvec(a), dim, tol=1e-6, max_iter=dim)
    assert s.converged
    assert s.largest == pytest.approx(ref[-1], rel=1e-6)
    assert s.smallest == pytest.approx(ref[0], rel=1e-5)
    at = torch.from_numpy(a)
    for theta, y, cheap in ((s.largest, s.largest_vector, s.largest_residual),
                            (s.smallest, s.smallest_vector, s.smallest_residual)):
        assert float(y.norm()) == pytest.approx(1.0, abs=1e-10)
        explicit = float((at @ y - theta * y).norm())
        assert explicit == pytest.approx(cheap, rel=1e-3, abs=1e-12 * ref[-1])
        assert cheap <= 1e-6 * theta or s.exhausted


def test_default_tolerance_is_within_one_percent_before_exhausting_the_space():
    a = spd(400, 100.0, seed=3)
    ref = np.linalg.eigvalsh(a)
    c = operator_condition(as_matvec(a), 400)
    assert c.converged and c.reason is None and c.iterations < 400
    assert c.value == pytest.approx(ref[-1] / ref[0], rel=1e-2)
    assert c.largest_residual <= 1e-3 * c.largest and c.smallest_residual <= 1e-3 * c.smallest


def test_exhausted_krylov_space_is_exact():
    # Three distinct eigenvalues: the Krylov space is invariant after 3 products.
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    a = (q * np.repeat([2.0, 5.0, 7.0], 20)) @ q.T
    s = extreme_eigenvalues(as_matvec(a), 60, tol=1e-12, max_iter=60)
    assert s.exhausted and s.converged and s.iterations == 3
    assert s.largest == pytest.approx(7.0, rel=1e-12) and s.smallest == pytest.approx(2.0, rel=1e-12)


def test_singular_matrix_is_infinite_with_the_reason():
    a = spd(100, 50.0, seed=1, singular=2)
    c = operator_condition(as_matvec(a), 100, Solver(max_iter=100))
    assert c.value == math.inf and c.reason == NUMERICALLY_ZERO
    d = dense_condition(a)
    assert d.value == math.inf and d.reason == NUMERICALLY_ZERO
    assert c.short() == "∞ (smallest eigenvalue numerically zero)"


def test_too_few_iterations_give_a_flagged_lower_bound():
    a = spd(300, 1e4, seed=2)
    ref = np.linalg.eigvalsh(a)
    c = operator_condition(as_matvec(a), 300, Solver(max_iter=5))
    assert not c.converged and c.reason is None and c.iterations == 5
    assert c.value < ref[-1] / ref[0]
    assert c.largest <= ref[-1] * (1 + 1e-12) and c.smallest >= ref[0]
    assert c.short().startswith("≥ ") and c.short().endswith("(not converged)")


def test_non_finite_products_are_overflow():
    c = operator_condition(lambda v: v * math.inf, 10)
    assert c.value == math.inf and c.reason == OVERFLOW
    assert json.loads(json.dumps(c.to_json()))["value"] == "inf"


def test_dense_gram_matches_numpy_and_wide_and_tall_factors():
    rng = np.random.default_rng(4)
    m = rng.standard_normal((30, 80))
    ref = np.linalg.eigvalsh(m @ m.T)
    d = dense_condition(torch.from_numpy(m), gram=True)
    assert d.dim == 30 and d.value == pytest.approx(ref[-1] / ref[0], rel=1e-10)
    tall = dense_condition(torch.from_numpy(m.T), gram=True)
    assert tall.dim == 80 and tall.smallest == 0.0 and tall.reason == NUMERICALLY_ZERO
    with pytest.raises(DenseMatrixError):
        dense_condition(torch.from_numpy(m))  # not symmetric, gram not asked


def test_short_and_json_forms():
    c = Condition(207.3, None, 2.0, 0.01, 0.0, 0.0, 10, 5, True, "lanczos")
    assert c.short() == "207"
    assert Condition(1.05, None, 1, 1, 0, 0, 1, 1, True, "dense").short() == "1.05"
    assert Condition(1.3e6, None, 1, 1, 0, 0, 1, 1, False, "lanczos").short() == "≥ 1.3e6 (not converged)"
    assert json.loads(json.dumps(c.to_json()))["value"] == 207.3


def test_bad_arguments_are_one_sentence():
    for kwargs in (dict(dim=0), dict(dim=5, tol=2.0), dict(dim=5, max_iter=0)):
        with pytest.raises(LanczosArgumentError) as err:
            extreme_eigenvalues(lambda v: v, **kwargs)
        assert isinstance(err.value, SkiplessError) and "must be" in str(err.value)


def test_numerically_zero_is_numpys_matrix_rank_tolerance():
    eps = np.finfo(np.float64).eps
    s = torch.tensor([[4.0, 1.0, 4.0 * 7 * eps, 4.0 * 7 * eps * 1.01, 0.0],
                      [0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)  # singular values of 5 x 7 matrices
    assert numerically_zero(s, 5, 7).tolist() == [[False, False, True, False, True], [True] * 5]
    assert numerically_zero(s, 7, 5).tolist() == numerically_zero(s, 5, 7).tolist()  # max(m, n)
    assert numerically_zero(s.float(), 5, 7)[0].tolist() == [False, False, True, True, True]  # eps of float32
    for row in range(2):  # numpy's own rank of a matrix with these singular values
        m = np.zeros((5, 7))
        m[range(5), range(5)] = s[row].numpy()
        assert np.linalg.matrix_rank(m) == 5 - int(numerically_zero(s, 5, 7)[row].sum())


def test_svd_condition_is_the_ratio_or_infinite_by_the_rule():
    eps = np.finfo(np.float64).eps
    s = torch.tensor([[2.0, 0.5], [1.0, 0.0], [0.0, 0.0], [1.0, 3 * eps], [1.0, 300 * eps]], dtype=torch.float64)
    kappa = svd_condition(s, 2, 3).tolist()
    assert kappa[:4] == [4.0, math.inf, math.inf, math.inf] and kappa[4] == pytest.approx(1 / (300 * eps))


def test_ends_are_the_k_largest_and_k_smallest_eigenvalues_each_within_the_tolerance():
    """``ends=5`` (seeds/003 Figs. 7-8's spectrum ends): the five largest, largest first, and the five smallest,
    smallest first, against eigvalsh; every one's residual met before the Krylov space is exhausted."""
    a = spd(400, 10.0, seed=7)
    ref = np.linalg.eigvalsh(a)
    s = extreme_eigenvalues(as_matvec(a), 400, tol=1e-9, max_iter=400, ends=5)
    assert s.converged and not s.exhausted and s.iterations < 300
    np.testing.assert_allclose(s.top, ref[::-1][:5], rtol=1e-8)
    np.testing.assert_allclose(s.bottom, ref[:5], rtol=1e-8)
    assert all(r <= 1e-9 * v for r, v in zip(s.top_residuals + s.bottom_residuals, s.top + s.bottom))
    one = extreme_eigenvalues(as_matvec(a), 400, tol=1e-9, max_iter=400)  # the extremes alone converge sooner
    assert one.iterations < s.iterations and len(one.top) == len(one.bottom) == 1
    assert one.top[0] == pytest.approx(ref[-1], rel=1e-8) and one.bottom[0] == pytest.approx(ref[0], rel=1e-8)


def test_ends_must_be_a_positive_integer():
    with pytest.raises(LanczosArgumentError, match="ends must be a positive integer, got 0"):
        extreme_eigenvalues(as_matvec(np.eye(3)), 3, ends=0)
