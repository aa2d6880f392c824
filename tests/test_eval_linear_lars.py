"""LARS of make linear PRESET=mae against its equations (You et al. 2017; MAE's util/lars.py), by hand."""
import numpy as np
import pytest
import torch

from skipless.eval.linear.lars import LARS


def _step(opt: LARS, params, grads) -> None:
    for p, g in zip(params, grads):
        p.grad = torch.tensor(g, dtype=torch.float32)
    opt.step()


def test_one_step_by_hand_trust_ratio_on_the_matrix_plain_momentum_sgd_on_the_bias():
    w = torch.tensor([[3.0, 4.0]], requires_grad=True)  # ||w|| = 5
    b = torch.tensor([1.0], requires_grad=True)
    opt = LARS([w, b], lr=2.0, weight_decay=0.0, momentum=0.5, trust_coefficient=0.001)
    _step(opt, [w, b], [[[0.0, 2.0]], [0.5]])
    # w: u = g = [0, 2], ||u|| = 2, trust = 0.001 * 5 / 2 = 0.0025, u = [0, 0.005]; mu = u; w -= 2 * mu
    assert w.detach()[0].tolist() == pytest.approx([3.0, 3.99])
    # b (1-D): no trust ratio, no weight decay: mu = 0.5, b = 1 - 2 * 0.5
    assert b.detach().tolist() == pytest.approx([0.0])
    # second step, momentum 0.5 on the scaled updates: w = [3, 3.99], ||w|| = sqrt(24.9201)
    _step(opt, [w, b], [[[0.0, 2.0]], [0.5]])
    trust = 0.001 * np.sqrt(24.9201) / 2.0
    mu = 0.5 * 0.005 + 2.0 * trust
    assert w.detach()[0].tolist() == pytest.approx([3.0, 3.99 - 2.0 * mu])
    assert b.detach().tolist() == pytest.approx([0.0 - 2.0 * (0.5 * 0.5 + 0.5)])


def test_weight_decay_enters_the_update_before_the_trust_ratio_and_never_the_bias():
    w = torch.tensor([[3.0, 4.0]], requires_grad=True)
    b = torch.tensor([1.0], requires_grad=True)
    opt = LARS([w, b], lr=2.0, weight_decay=0.2, momentum=0.9, trust_coefficient=0.001)
    _step(opt, [w, b], [[[0.0, 0.0]], [0.0]])
    # u = 0 + 0.2 * w = [0.6, 0.8], ||u|| = 1, trust = 0.001 * 5 / 1 = 0.005, u = [0.003, 0.004]
    assert w.detach()[0].tolist() == pytest.approx([3.0 - 0.006, 4.0 - 0.008])
    assert b.detach().tolist() == [1.0]


def test_a_zero_parameter_or_a_zero_update_takes_a_trust_ratio_of_one():
    w = torch.zeros(1, 2, requires_grad=True)
    opt = LARS([w], lr=2.0, weight_decay=0.0, momentum=0.9, trust_coefficient=0.001)
    _step(opt, [w], [[[1.0, 1.0]]])
    assert w.detach().tolist() == [[-2.0, -2.0]]  # ||w|| = 0: the plain gradient, trust 1
    v = torch.tensor([[3.0, 4.0]], requires_grad=True)
    opt = LARS([v], lr=2.0, weight_decay=0.0, momentum=0.9, trust_coefficient=0.001)
    _step(opt, [v], [[[0.0, 0.0]]])
    assert v.detach().tolist() == [[3.0, 4.0]]  # ||u|| = 0: trust 1, a zero update, no nan


def test_three_steps_match_the_equations_in_float64_with_one_lr_per_group():
    rng = np.random.default_rng(0)
    w0, b0, v0 = rng.normal(size=(4, 3)), rng.normal(size=4), rng.normal(size=(2, 5))
    grads = [(rng.normal(size=(4, 3)), rng.normal(size=4), rng.normal(size=(2, 5))) for _ in range(3)]
    wd, m, eta, lrs = 0.05, 0.9, 0.001, (0.7, 3.0)
    params = [torch.tensor(a, dtype=torch.float32, requires_grad=True) for a in (w0, b0, v0)]
    opt = LARS([{"params": params[:2], "lr": lrs[0]}, {"params": params[2:], "lr": lrs[1]}], lr=0.0,
               weight_decay=wd, momentum=m, trust_coefficient=eta)
    ref, mus = [w0.copy(), b0.copy(), v0.copy()], [np.zeros_like(w0), np.zeros_like(b0), np.zeros_like(v0)]
    for step_grads in grads:
        _step(opt, params, [g.tolist() for g in step_grads])
        for i, (p, g) in enumerate(zip(ref, step_grads)):
            if p.ndim > 1:
                u = g + wd * p
                u = u * (eta * np.linalg.norm(p) / np.linalg.norm(u))
            else:
                u = g
            mus[i] = m * mus[i] + u
            ref[i] = p - (lrs[0] if i < 2 else lrs[1]) * mus[i]
    for got, want in zip(params, ref):
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-5, atol=1e-6)
