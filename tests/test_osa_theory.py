"""Seed 004's Theorem A.1 (skipless/analysis/osa_theory.py): the orthogonality error of OSA's attention matrix
after K Newton-Schulz steps against the theorem's bound, each side recomputed here from scratch (a plain
Newton-Schulz loop, the dense N x N matrices), and through the suite's OrthogonalAttention."""
import math

import pytest
import torch

from skipless.analysis.osa_theory import osa_head_inputs, thm_a1_terms
from skipless.models import create_vit


def _inputs(n=20, dv=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, dv, generator=g, dtype=torch.float64), torch.randn(n, dv, generator=g, dtype=torch.float64))


def _by_hand(q, k, scale, steps):
    """Y and B from Eq. 9 and Eq. 6 written out: M_0 = M / (||M||_F + 1e-7), M_{k+1} = M_k (3 I - M_k^T M_k) / 2."""
    m = torch.cat([q, k], dim=1)
    b = m / (torch.linalg.matrix_norm(m) + 1e-7)
    for _ in range(steps):
        b = b @ (3 * torch.eye(m.shape[1], dtype=m.dtype) - b.T @ b) / 2
    s = scale * (q @ k.T - k @ q.T)
    y = torch.eye(q.shape[0], dtype=q.dtype) + b @ (torch.linalg.matrix_exp(b.T @ s @ b) - torch.eye(m.shape[1],
                                                                                                     dtype=q.dtype)) @ b.T
    return y, b, s


@pytest.mark.parametrize("steps", [1, 3, 6, 20])
def test_the_error_and_the_bound_are_those_of_the_dense_matrices(steps):
    q, k = _inputs()
    y, b, s = _by_hand(q, k, 0.3, steps)
    r = thm_a1_terms(q, k, 0.3, steps)
    eye = torch.eye(q.shape[0], dtype=torch.float64)
    assert r["error"] == pytest.approx(float(torch.linalg.matrix_norm(y.T @ y - eye, ord=2)), rel=1e-6, abs=1e-13)
    sigma = torch.linalg.svdvals(b)
    growth = (math.exp(float(torch.linalg.matrix_norm(s, ord=2))) - 1) ** 2
    factor = float((sigma ** 2 * (sigma ** 2 - 1)).abs().max())  # at rounding level once converged (K = 20)
    assert r["bound"] == pytest.approx(growth * factor, rel=1e-9, abs=growth * 1e-14)
    assert r["bound_quarter"] == pytest.approx(growth / 4)
    # Eq. 28, the proof's identity: Y^T Y - I = B Delta^T E Delta B^T
    delta = torch.linalg.matrix_exp(b.T @ s @ b) - torch.eye(b.shape[1], dtype=torch.float64)
    e = b.T @ b - torch.eye(b.shape[1], dtype=torch.float64)
    torch.testing.assert_close(y.T @ y - eye, b @ delta.T @ e @ delta @ b.T, atol=1e-12, rtol=1e-9)


def test_converged_newton_schulz_gives_exp_s_and_no_error():
    q, k = _inputs()
    y, _, s = _by_hand(q, k, 0.3, 40)
    torch.testing.assert_close(y, torch.linalg.matrix_exp(s), atol=1e-10, rtol=1e-10)  # Thm 2.1
    r = thm_a1_terms(q, k, 0.3, 40)
    assert r["error"] < 1e-12 and r["factor"] < 1e-12 and r["sigma_max"] <= 1 + 1e-12


def test_thm_a1_holds_for_every_k_and_alpha():
    for seed in range(3):
        q, k = _inputs(n=16, dv=4, seed=seed)
        for scale in (0.02, 0.3, 1.0):
            for steps in range(1, 16):
                r = thm_a1_terms(q, k, scale, steps)
                assert r["sigma_max"] <= 1 + 1e-12
                assert r["error"] <= r["bound"] * (1 + 1e-9) + 1e-12 <= r["bound_quarter"] * (1 + 1e-9) + 1e-12
                assert r["error"] <= 1 + 1e-12  # Y^T Y - I is negative semi-definite and Y^T Y is not negative


def test_osa_head_inputs_are_the_modules_queries_and_keys_and_y_its_attention_matrix():
    torch.manual_seed(0)
    model = create_vit("vit_micro", attention="osa", init="osa", residual="skipless", norm="none", final_norm=False,
                       img_size=28, patch_size=4, attention_args={"basis": "newton-schulz", "ns_steps": 3})
    attn = model.blocks[0].attn.double()
    x = torch.randn(10, 64, dtype=torch.float64)
    with torch.no_grad():
        qkv = attn.qkv(x.unsqueeze(0)).reshape(1, 10, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4)
        matrix = attn.matrix(qkv[0], qkv[1])[0]
    for head in (0, 3):
        q, k, scale = osa_head_inputs(attn, x, head)
        torch.testing.assert_close(q, qkv[0][0, head])
        torch.testing.assert_close(k, qkv[1][0, head])
        assert scale == pytest.approx(0.1 / attn.head_dim ** 0.5)
        y, _, _ = _by_hand(q, k, scale, 3)
        torch.testing.assert_close(y, matrix[head], atol=1e-6, rtol=1e-6)
        a = matrix[head]
        err = float(torch.linalg.matrix_norm(a.T @ a - torch.eye(10, dtype=torch.float64), ord=2))
        assert thm_a1_terms(q, k, scale, 3)["error"] == pytest.approx(err, rel=1e-4, abs=1e-10)
