"""Matrix-free kappa(J J^T) and kappa((K + g I)(K + g I)^T) against dense float64 jacrev Jacobians.

The models are tiny (depth 2, width 24, 5 tokens) so that ``J`` (120 x 14 448) and ``K`` (120 x 120)
are formed in a fraction of a second; ``mnd = 120 <= p`` so ``J J^T`` can be non-singular.
"""
import math

import numpy as np
import pytest
import torch

from skipless.analysis.condition_number import DIVERGED, NUMERICALLY_ZERO, Condition, Solver, zero_threshold
from skipless.analysis.jacobians import (
    JacobianArgumentError, JacobianTooLargeError, block_jacobian_conditions, network_jacobian_condition,
    network_jacobian_dense, sub_block_jacobian_dense,
)
from skipless.analysis.sub_blocks import embed_tokens, shortcut_gains, trace_block
from skipless.errors import SkiplessError
from skipless.models import create_vit

CASES = [("skip", "timm"), ("skipless", "timm"), ("skipless", "cutskip"), ("decayed", "timm")]


def tiny(residual: str, init: str, seed: int = 0):
    torch.manual_seed(seed)
    return create_vit("vit_tiny", residual=residual, init=init, depth=2, img_size=32, patch_size=16,
                      embed_dim=24, num_heads=2).eval()


def image(seed: int = 1) -> torch.Tensor:
    return torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def gram_eigenvalues(m: torch.Tensor) -> np.ndarray:
    """Eigenvalues of M M^T from numpy's SVD of the dense float64 factor (independent of our code)."""
    s = np.linalg.svd(m.numpy(), compute_uv=False)
    return np.sort(s * s)


def assert_matches(c: Condition, eig: np.ndarray) -> None:
    """Both extreme eigenvalues within 1%, or ∞ exactly where the dense smallest one is below the
    numerical-zero threshold (with a margin, so rounding cannot flip the verdict)."""
    assert c.largest == pytest.approx(eig[-1], rel=1e-2)
    threshold = zero_threshold(len(eig), torch.float64) * eig[-1]
    if eig[0] < threshold / 10:
        assert c.value == math.inf and c.reason == NUMERICALLY_ZERO
    elif eig[0] > threshold * 10:
        assert c.converged and c.reason is None
        assert c.smallest == pytest.approx(eig[0], rel=1e-2)
        assert c.value == pytest.approx(eig[-1] / eig[0], rel=2e-2)


@pytest.mark.parametrize("residual,init", CASES)
def test_network_condition_matches_the_dense_jacobian(residual, init):
    model = tiny(residual, init)
    x = image()
    jac = network_jacobian_dense(model, x)
    n_params = sum(p.numel() for p in model.blocks.parameters())
    assert jac.shape == (embed_tokens(model, x).numel(), n_params) and jac.dtype == torch.float64
    c = network_jacobian_condition(model, x, Solver(tol=1e-4))
    assert c.method == "lanczos" and c.dim == jac.shape[0]
    assert_matches(c, gram_eigenvalues(jac))


def test_dense_jacobian_columns_are_finite_differences_of_the_blocks():
    # Independent of jacrev: central differences of the float64 blocks in two parameter directions.
    model = tiny("skipless", "cutskip").double()
    x = image().double()
    jac = network_jacobian_dense(model, x)
    x0 = embed_tokens(model, x)
    params = dict(model.blocks.named_parameters())
    offset = 0
    for name, p in params.items():
        if name in ("0.attn.qkv.weight", "1.mlp.fc2.weight"):
            flat = p.data.view(-1)
            i, h = 7, 1e-6
            old = flat[i].item()
            with torch.no_grad():
                flat[i] = old + h
                plus = model.blocks(x0).reshape(-1)
                flat[i] = old - h
                minus = model.blocks(x0).reshape(-1)
                flat[i] = old
            torch.testing.assert_close(jac[:, offset + i], (plus - minus) / (2 * h), rtol=1e-5, atol=1e-8)
        offset += p.numel()


@pytest.mark.parametrize("residual,init", CASES)
def test_block_conditions_match_dense_kernels(residual, init):
    model = tiny(residual, init)
    x = image()
    conds = block_jacobian_conditions(model, x, [0, 1], Solver(tol=1e-4))
    assert sorted(conds) == [0, 1]
    ref = model.double()  # after the call: it must not have relied on the caller's dtype
    h = embed_tokens(ref, x.double())
    with torch.no_grad():
        for i, block in enumerate(ref.blocks):
            t = trace_block(block, h)
            g_a, g_m = shortcut_gains(block)
            for branch, u, g in (("attn", t.u_attn, g_a), ("mlp", t.u_mlp, g_m)):
                k = sub_block_jacobian_dense(block, u, branch, g)
                assert k.shape == (u.numel(), u.numel())
                assert_matches(conds[i][branch], gram_eigenvalues(k))
            h = t.out


def test_shortcut_adds_the_identity_to_the_branch_kernel():
    model = tiny("skip", "timm").double()
    with torch.no_grad():
        t = trace_block(model.blocks[0], embed_tokens(model, image().double()))
    k0 = sub_block_jacobian_dense(model.blocks[0], t.u_attn, "attn", 0.0)
    k1 = sub_block_jacobian_dense(model.blocks[0], t.u_attn, "attn", 1.0)
    torch.testing.assert_close(k1 - k0, torch.eye(k0.shape[0], dtype=torch.float64))


def test_callers_model_is_unchanged():
    model = tiny("skipless", "cutskip")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    network_jacobian_condition(model, image(), Solver(max_iter=5))
    block_jacobian_conditions(model, image(), [1], Solver(max_iter=5))
    after = model.state_dict()
    assert all(after[k].dtype == torch.float32 and torch.equal(after[k], v) for k, v in before.items())
    assert not model.training
    assert all(p.requires_grad for p in model.parameters())


def test_non_finite_weights_are_infinite_with_the_reason():
    model = tiny("skipless", "timm")
    with torch.no_grad():
        model.blocks[1].mlp.fc1.weight[0, 0] = float("nan")
    c = network_jacobian_condition(model, image())
    assert c.value == math.inf and c.reason == DIVERGED and c.dim == 120
    assert c.short() == "∞ (non-finite weights (the model diverged))"
    conds = block_jacobian_conditions(model, image(), [0, 1])
    assert all(cond.reason == DIVERGED for per_block in conds.values() for cond in per_block.values())


def test_dense_refusal_is_one_sentence():
    model = tiny("skip", "timm")
    with pytest.raises(JacobianTooLargeError) as err:
        network_jacobian_dense(model, image(), max_entries=1e5)
    msg = str(err.value)
    assert isinstance(err.value, SkiplessError) and msg.count(". ") == 0 and "\n" not in msg
    assert "120 x 14448" in msg and "resolution" in msg and "depth" in msg
    u = torch.zeros(1, 5, 24)
    with pytest.raises(JacobianTooLargeError):
        sub_block_jacobian_dense(model.blocks[0], u, max_entries=100)


def test_bad_arguments_are_refused():
    model = tiny("skip", "timm")
    with pytest.raises(JacobianArgumentError):
        block_jacobian_conditions(model, image(), [2])
    with pytest.raises(JacobianArgumentError):
        sub_block_jacobian_dense(model.blocks[0], torch.zeros(1, 5, 24), "ffn")
