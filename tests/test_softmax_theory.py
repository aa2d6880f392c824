"""Seed 000 App. A.4.1-A.4.2 (skipless/analysis/softmax_theory.py): Fig. 5's softmax conditioning and the moments
of Eqs. 14-20, each against a Monte Carlo estimate (the independent computation); Lemma 1's derivative against
autograd and finite differences, and its claim over alpha and beta."""
import dataclasses
import math

import pytest
import torch

from skipless.analysis.softmax_theory import (FIG5_CASES, FIG5_D, FIG5_N, derived_moments, lemma1_terms,
                                              logit_jacobian, logit_matrices, monte_carlo_moments, paper_moments,
                                              softmax_jacobian_blocks, softmax_kappa)


def test_softmax_kappa_is_the_ratio_of_the_extreme_singular_values():
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    p = torch.softmax(logits, -1)
    s = torch.linalg.svdvals(p)
    assert float(softmax_kappa(logits)) == pytest.approx(float(s[0] / s[1]))
    assert float(softmax_kappa(torch.full((3, 3), 0.0, dtype=torch.float64) + 50 * torch.eye(3,
                                                                                                dtype=torch.float64))) \
        == pytest.approx(1.0, abs=1e-9)  # a diagonal that dominates: the identity


@pytest.mark.parametrize("d, alpha, beta", [(16, 0.1, 5.0), (16, 1.0, 0.0), (32, 0.5, 1.0)])
def test_the_derived_moments_match_monte_carlo(d, alpha, beta):
    mc = dataclasses.asdict(monte_carlo_moments(FIG5_N, d, alpha, beta, 3000, torch.Generator().manual_seed(1)))
    ours = dataclasses.asdict(derived_moments(d, alpha, beta))
    for name, (mean, var) in ours.items():
        got_mean, got_var = mc[name]
        assert got_mean == pytest.approx(mean, abs=0.05 * var ** 0.5 + 1e-9), (name, got_mean, mean)
        assert got_var == pytest.approx(var, rel=0.06), (name, got_var, var)


def test_eq_17_as_printed_does_not_hold_var_b_ij_is_d_not_1():
    """A result, not a bug of the suite: Var(B_ij) grows as d (Monte Carlo), where the appendix prints 1; every
    other printed moment holds within the same tolerance."""
    for d in (16, 64):
        mc = monte_carlo_moments(FIG5_N, d, 1.0, 0.0, 2000, torch.Generator().manual_seed(2))
        printed = paper_moments(d, 1.0, 0.0)
        assert mc.b_off[1] == pytest.approx(d, rel=0.06) and printed.b_off[1] == 1.0
        assert mc.b_diag[1] == pytest.approx(printed.b_diag[1], rel=0.06)  # Eq. 16 holds
        assert mc.a_off[1] == pytest.approx(printed.a_off[1], rel=0.06)    # Eq. 15 holds


def test_fig5_peak_logits_give_a_near_identity_softmax_and_diffuse_ones_an_ill_conditioned_one():
    g = torch.Generator().manual_seed(0)
    kappas = {name: softmax_kappa(logit_matrices(FIG5_N, FIG5_D, a, b, g, 200)["C"])
              for name, (a, b) in FIG5_CASES.items()}
    assert float(kappas["peak"].max()) < 1.1                  # the appendix: about 1.1
    assert float(kappas["diffuse"].median()) > 30             # the appendix: about 730 (one draw)
    assert float(kappas["diffuse"].min()) > 5 * float(kappas["peak"].max())


# Lemma 1 (App. A.4.2): ||d vec(A) / d vec(X)||_2 = O(alpha e^-beta)


def _xz(n=5, d=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, d, generator=g, dtype=torch.float64),
            torch.randn(d, d, generator=g, dtype=torch.float64) / d ** 0.5)


def _attention(x, z, alpha, beta):
    return torch.softmax(x @ (alpha * z + beta * torch.eye(x.shape[1], dtype=x.dtype)) @ x.T, -1)


@pytest.mark.parametrize("alpha, beta", [(0.1, 0.0), (1.0, 0.3), (0.0, 0.5)])
def test_lemma1_derivative_is_the_jacobian_by_autograd_and_by_finite_differences(alpha, beta):
    x, z = _xz()
    n, d = x.shape
    jac = torch.autograd.functional.jacobian(lambda t: _attention(t, z, alpha, beta), x).reshape(n * n, n * d)
    h = 1e-6
    fd = torch.stack([(_attention(x + h * e, z, alpha, beta) - _attention(x - h * e, z, alpha, beta)).flatten() / (2 * h)
                      for e in torch.eye(n * d, dtype=torch.float64).reshape(n * d, n, d)], dim=1)
    torch.testing.assert_close(fd, jac, rtol=1e-6, atol=1e-8)
    norm = float(torch.linalg.matrix_norm(jac, ord=2))
    assert lemma1_terms(x, z, alpha, beta)["derivative"] == pytest.approx(norm, rel=1e-9, abs=1e-15)


def test_eq22_blocks_and_the_logit_jacobian_are_the_autograd_ones():
    x, z = _xz()
    n, d = x.shape
    w = 0.3 * z + 0.7 * torch.eye(d, dtype=torch.float64)
    m = x @ w @ x.T
    soft = torch.autograd.functional.jacobian(lambda t: torch.softmax(t, -1), m).reshape(n * n, n * n)
    torch.testing.assert_close(torch.block_diag(*softmax_jacobian_blocks(torch.softmax(m, -1))), soft)
    logits = torch.autograd.functional.jacobian(lambda t: t @ w @ t.T, x).reshape(n * n, n * d)
    torch.testing.assert_close(logit_jacobian(x, w), logits)


def test_lemma1_holds_in_alpha_only_at_beta_zero_and_in_beta_with_room_to_spare():
    """The result, not a bug of the suite: at beta 0 the derivative is proportional to alpha as alpha -> 0; at
    beta > 0 it does not vanish with alpha (softmax(beta X X^T) still moves with X); in beta it falls faster than
    e^-beta. Eq. 21 as printed (the derivative <= ||dA/dM||) fails; the chain rule's bound holds."""
    x, z = _xz(n=6, d=16)
    at_zero = [lemma1_terms(x, z, a, 0.0)["derivative"] / a for a in (1e-4, 1e-3)]
    assert at_zero[0] == pytest.approx(at_zero[1], rel=0.05)
    assert lemma1_terms(x, z, 0.0, 0.0)["derivative"] == 0.0
    for beta in (0.05, 0.3):
        assert lemma1_terms(x, z, 0.0, beta)["derivative"] > 1e-12 * lemma1_terms(x, z, 0.0, beta)["chain"]
        assert lemma1_terms(x, z, 0.0, beta)["claim"] == 0.0  # the claim's alpha e^-beta
    scaled = [lemma1_terms(x, z, 0.1, b)["derivative"] * math.exp(b) for b in (1.0, 2.0, 4.0)]
    assert scaled[0] > scaled[1] > scaled[2]
    rows = [lemma1_terms(*_xz(n=6, d=16, seed=s), a, b) for s in range(3) for a in (0.01, 0.1, 1.0)
            for b in (0.0, 0.1, 1.0)]
    assert all(r["derivative"] <= r["chain"] * (1 + 1e-9) for r in rows)
    assert any(r["derivative"] > r["softmax"] * 1.01 for r in rows)
