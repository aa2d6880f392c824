"""Seed 000's Eq. 6 and App. A.4.4's Eq. 37 (analysis/concatenation_theory.py), each against an independent
computation: eigenvalues of the Gram matrix, a Jacobian taken per sub-block, the bound's formula on random blocks."""
import math

import pytest
import torch
from torch.func import functional_call, jacrev

from skipless.analysis.concatenation_theory import (concatenation_terms, eq6_terms, row_kappa,
                                                    sub_block_columns)
from skipless.analysis.jacobians import network_jacobian_dense
from skipless.analysis.sub_blocks import embed_tokens
from skipless.models import create_vit


def _small(residual="skip", init="timm"):
    torch.manual_seed(0)
    return create_vit("vit_tiny", depth=2, embed_dim=16, num_heads=2, img_size=32, residual=residual, init=init)


def test_row_kappa_is_the_gram_matrix_eigenvalue_ratio_and_inf_when_rows_are_not_spanned():
    g = torch.Generator().manual_seed(0)
    m = torch.randn(6, 15, generator=g, dtype=torch.float64)
    eig = torch.linalg.eigvalsh(m @ m.T)
    assert row_kappa(m) == pytest.approx(math.sqrt(float(eig[-1] / eig[0])), rel=1e-9)
    assert row_kappa(m[:, :5]) == math.inf  # fewer columns than rows
    low_rank = torch.randn(6, 2, generator=g, dtype=torch.float64) @ torch.randn(2, 15, generator=g, dtype=torch.float64)
    assert row_kappa(low_rank) == math.inf


def test_the_sub_block_columns_are_each_sub_blocks_own_jacobian():
    model = _small().double().eval()
    images = torch.randn(1, 3, 32, 32, dtype=torch.float64)
    jac = network_jacobian_dense(model, images)
    cols = sub_block_columns(model)
    assert sorted(c for v in cols.values() for c in v) == list(range(jac.shape[1]))  # a partition
    # block 1's MLP sub-block alone, by jacrev over just its parameters
    x0 = embed_tokens(model, images)
    names = [n for n, _ in model.blocks.named_parameters() if n.startswith(("1.norm2.", "1.mlp."))]
    fixed = dict(model.blocks.named_parameters())

    def f(sub):
        return functional_call(model.blocks, {**fixed, **sub}, (x0,))
    sub = jacrev(f)({n: fixed[n].detach() for n in names})
    direct = torch.cat([sub[n].reshape(x0.numel(), -1) for n in names], dim=1)
    torch.testing.assert_close(jac[:, cols["mlp 1"]], direct, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("residual,init", [("skip", "timm"), ("skipless", "cutskip")])
def test_eq6_holds_at_init_as_the_gram_sum_bound_says(residual, init):
    r = eq6_terms(_small(residual, init), torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1)))
    assert set(r["blocks"]) == {"attn 0", "mlp 0", "attn 1", "mlp 1"}
    assert math.isfinite(r["kappa_J"]) and r["holds"] and r["kappa_J"] <= r["max_block"]


def test_a_sum_of_positive_semidefinite_matrices_is_no_worse_conditioned_than_its_worst_term():
    """The reason Eq. 6 holds for full-row-rank blocks: checked on random wide blocks of very unequal scales."""
    g = torch.Generator().manual_seed(2)
    for _ in range(50):
        blocks = [s * torch.randn(10, 12, generator=g, dtype=torch.float64) for s in (1e-3, 1.0, 30.0)]
        whole = torch.cat(blocks, dim=1)
        assert row_kappa(whole) <= max(row_kappa(b) for b in blocks) * (1 + 1e-12)


def test_eq37_bounds_the_concatenation_wherever_it_is_defined():
    g = torch.Generator().manual_seed(3)
    defined = 0
    for scale in (0.5, 1.0, 3.0):
        for _ in range(40):
            a, b = torch.randn(300, 6, generator=g), scale * torch.randn(300, 6, generator=g)
            t = concatenation_terms(a, b)
            s = torch.linalg.svdvals(torch.cat([a, b], 1).double())
            assert t["kappa_M"] == pytest.approx(float(s[0] / s[-1]), rel=1e-9)
            assert t["rho"] == pytest.approx(float(torch.linalg.svdvals(a.double().T @ b.double())[0]), rel=1e-9)
            if t["valid"]:
                defined += 1
                assert t["kappa_M"] <= t["bound"] * (1 + 1e-9)
            else:
                assert t["bound"] == math.inf
    assert defined > 60
