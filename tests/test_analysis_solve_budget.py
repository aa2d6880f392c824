"""A time budget over the Lanczos solves of one diagnose call, and their progress lines (issue 27, item 9).
No test waits on a clock: a budget of ~0 s stops every solve after its first product."""
import pytest
import torch

from skipless.analysis.condition_number import Solver, dense_condition, operator_condition
from skipless.analysis.diagnostics import DiagnosticSettings, diagnose
from skipless.analysis.solve_budget import SolveBudget
from skipless.models import create_vit


def _spread_operator(dim=400):
    """diag(1 ... 1e4) in a random basis: Lanczos needs many products to pin down its smallest eigenvalue."""
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    a = q @ torch.diag(torch.logspace(0, 4, dim, dtype=torch.float64)) @ q.T
    return a, (lambda v: a @ v)


def test_a_solve_reports_its_products_ritz_values_residuals_and_time():
    a, matvec = _spread_operator()
    lines = []
    budget = SolveBudget(None, {"kappa_A": 1.0}, report=lines.append, every_s=0.0)
    c = operator_condition(matvec, a.shape[0], Solver(max_iter=5), watch=budget.watch("kappa_A"))
    assert not c.budget_spent and c.iterations == 5 and len(lines) == 5  # one per product
    assert lines[0].startswith("kappa_A: 1 products, largest ") and "residual" in lines[0] and lines[0].endswith(" s")


def test_a_solve_stopped_by_the_budget_is_a_lower_bound_flagged_as_such():
    a, matvec = _spread_operator()
    c = operator_condition(matvec, a.shape[0], watch=SolveBudget(0.0, {"kappa_A": 1.0}).watch("kappa_A"))
    exact = dense_condition(a).value  # 1e4
    assert c.iterations == 1 and not c.converged and c.budget_spent
    assert 1 <= c.value <= exact * (1 + 1e-9)  # Cauchy interlacing: the Ritz ratio never exceeds kappa
    assert c.short().endswith("(not converged in its time budget)")


def test_diagnose_with_a_spent_budget_still_measures_everything_and_bounds_each_kappa():
    model = create_vit("vit_tiny", residual="skip", depth=2, embed_dim=24, num_heads=2, img_size=32).eval()
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    free = diagnose(model, images, DiagnosticSettings(layers="all", max_iter=400))
    bounded = diagnose(model, images, DiagnosticSettings(layers="all", max_iter=400, budget_s=1e-9))
    assert bounded.embeddings == free.embeddings and bounded.effective_rank == free.effective_rank
    pairs = [(bounded.jacobian, free.jacobian)] + [(bounded.block_jacobians[b][k], free.block_jacobians[b][k])
                                                   for b in (0, 1) for k in ("attn", "mlp")]
    for capped, value in pairs:
        assert capped.iterations == 1 and capped.budget_spent and not capped.converged
        assert value.converged and capped.value <= value.value * (1 + 1e-6)


def test_the_progress_line_says_once_why_values_are_bounds_and_gives_no_trivial_bound():
    from skipless.training.diagnostics_callbacks import progress_line

    model = create_vit("vit_tiny", residual="skip", depth=2, embed_dim=24, num_heads=2, img_size=32).eval()
    images = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    free = progress_line(diagnose(model, images, DiagnosticSettings(layers="all", max_iter=400)))
    assert "≥" not in free and "stopped" not in free and free.startswith("kappa(JJ^T) ")
    bounded = diagnose(model, images, DiagnosticSettings(layers="all", max_iter=400, budget_s=1e-9))
    line = progress_line(bounded)
    assert line.count("stopped by the time budget (diagnostics.budget_s) before converging") == 1
    assert "3 of 3 solves" in line and "not converged" not in line  # JJ^T and the attention of blocks 0, 1
    cells = [bounded.jacobian] + [bounded.block_jacobians[b]["attn"] for b in (0, 1)]
    for c in cells:  # each value shown as its bound, or "no bound" where the bound is below 2
        assert ("≥ " in c.terse()) == (c.value >= 2) and (c.terse() == "no bound") == (c.value < 2)
        assert c.terse() in line
