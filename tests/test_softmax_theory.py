"""Seed 000 App. A.4.1 (skipless/analysis/softmax_theory.py): Fig. 5's softmax conditioning and the moments of
Eqs. 14-20, each against a Monte Carlo estimate (the independent computation)."""
import dataclasses

import pytest
import torch

from skipless.analysis.softmax_theory import (FIG5_CASES, FIG5_D, FIG5_N, derived_moments, logit_matrices,
                                              monte_carlo_moments, paper_moments, softmax_kappa)


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
