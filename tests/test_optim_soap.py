"""SOAP against an independent step-by-step version of the algorithm (Vyas et al. 2025, reference code
github.com/nikhilvyas/SOAP), against eigh-based ideal SOAP and Adam where they coincide, and the
behaviours DINO relies on (frozen parameters, per-step lr / weight decay, exact resumption)."""
from __future__ import annotations

import copy
import io
import math

import pytest
import torch

from skipless.optim import OPTIMIZERS, SOAP, build_optimizer


def unfold(x: torch.Tensor, k: int) -> torch.Tensor:
    """Mode-k unfolding: dimension k as rows, all others flattened as columns (G itself for k=0 of a matrix)."""
    return x.movedim(k, 0).reshape(x.shape[k], -1)


def mode_product(x: torch.Tensor, m: torch.Tensor, k: int) -> torch.Tensor:
    """Multiply dimension k of x by the matrix m: unfold(x, k) -> m @ unfold(x, k). For a matrix G,
    mode 0 by Q_L^T and mode 1 by Q_R^T give Q_L^T G Q_R."""
    moved = x.movedim(k, 0)
    return (m @ moved.reshape(moved.shape[0], -1)).reshape(m.shape[0], *moved.shape[1:]).movedim(0, k)


class ReferenceSOAP:
    """SOAP for one tensor, written out step by step with explicit matrices.

    Factors ``L_k = EMA(unfold(G, k) unfold(G, k)^T)`` (L = EMA(G G^T), R = EMA(G^T G) for a matrix);
    first gradient: factors and eigh eigenbases only; then Adam on ``G' = Q_L^T G Q_R``, update
    ``Q_L (m / (sqrt(v) + eps)) Q_R^T``, weight decay after the update, factors updated with G, and every
    ``freq`` steps new bases: ``refresh="qr"`` sorts Q by diag(Q^T L Q) (v follows) and takes qr(L Q);
    ``refresh="eigh"`` takes exact eigenvectors (v kept: only valid while the eigenvalue order is stable).
    ``m`` is carried over a refresh as the same vector in the original space.
    """

    def __init__(self, p, lr, betas, eps, wd, freq, rotated, refresh="qr", normalize=False):
        self.p, self.lr, self.betas, self.eps, self.wd, self.freq = p.clone(), lr, betas, eps, wd, freq
        self.rotated, self.refresh, self.normalize, self.t = rotated, refresh, normalize, None

    def into(self, x, bases):
        for k, q in enumerate(bases):
            x = x if q is None else mode_product(x, q.T, k)
        return x

    def back(self, x, bases):
        for k, q in enumerate(bases):
            x = x if q is None else mode_product(x, q, k)
        return x

    def step(self, g):
        b1, b2 = self.betas
        if self.t is None:
            self.t, self.m, self.v = 0, torch.zeros_like(g), torch.zeros_like(g)
            self.L = [(1 - b2) * unfold(g, k) @ unfold(g, k).T if r else None for k, r in enumerate(self.rotated)]
            self.Q = [None if L is None else torch.linalg.eigh(L).eigenvectors.flip(1) for L in self.L]
            return self.p
        self.t += 1
        g_rot = self.into(g, self.Q)
        self.m = b1 * self.m + (1 - b1) * g_rot
        self.v = b2 * self.v + (1 - b2) * g_rot**2
        u = self.back(self.m / (self.v.sqrt() + self.eps), self.Q)
        if self.normalize:
            u = u / u.pow(2).mean().sqrt()
        self.p = self.p - self.lr * math.sqrt(1 - b2**self.t) / (1 - b1**self.t) * u
        self.p = self.p - self.lr * self.wd * self.p
        self.L = [None if L is None else b2 * L + (1 - b2) * unfold(g, k) @ unfold(g, k).T
                  for k, L in enumerate(self.L)]
        if self.t % self.freq == 0:
            m_original = self.back(self.m, self.Q)
            for k, (L, Q) in enumerate(zip(self.L, self.Q)):
                if L is None:
                    continue
                if self.refresh == "eigh":
                    self.Q[k] = torch.linalg.eigh(L).eigenvectors.flip(1)
                else:
                    order = torch.argsort(torch.diagonal(Q.T @ L @ Q), descending=True)
                    self.v = self.v.index_select(k, order)
                    self.Q[k] = torch.linalg.qr(L @ Q[:, order]).Q
            self.m = self.into(m_original, self.Q)
        return self.p


def run_both(shape, grads, *, max_precond_dim=10000, precondition_1d=False, refresh="qr", foreach=True, **kw):
    """Parameters of SOAP and of the reference after each gradient in ``grads`` (float64)."""
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(shape, dtype=torch.float64))
    rotated = [(len(shape) > 1 or precondition_1d) and d <= max_precond_dim for d in shape]
    ref = ReferenceSOAP(p.detach(), kw["lr"], kw["betas"], kw["eps"], kw["weight_decay"],
                        kw["precondition_frequency"], rotated, refresh, kw.get("normalize_grads", False))
    opt = SOAP([p], max_precond_dim=max_precond_dim, precondition_1d=precondition_1d, foreach=foreach, **kw)
    ours, theirs = [], []
    for g in grads:
        p.grad = g.clone()
        opt.step()
        ours.append(p.detach().clone())
        theirs.append(ref.step(g))
    return opt, p, ours, theirs


def random_grads(shape, n, seed=1):
    """Random gradients; the first is integer-valued so that both implementations build bit-identical first
    factors: their eigh bases on the null space (rank-deficient first factors) are then the same."""
    gen = torch.Generator().manual_seed(seed)
    first = torch.randint(-3, 4, shape, generator=gen).double()
    return [first] + [torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(n - 1)]


HYPER = dict(lr=0.01, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


@pytest.mark.parametrize("shape, freq, extra", [
    ((6, 4), 1, {}),
    ((4, 6), 3, {}),
    ((5, 5), 2, {"normalize_grads": True}),
    ((3, 4, 5), 2, {}),
    ((3, 50), 2, {"max_precond_dim": 10}),     # right dimension not rotated: Adam rotated on the left only
    ((50, 3), 1, {"max_precond_dim": 10}),     # left dimension not rotated
    ((4,), 6, {"precondition_1d": True}),      # 1-D rotated; first refresh once the 4x4 factor has full rank
])
@pytest.mark.parametrize("foreach", [True, False], ids=["batched", "per-parameter"])
def test_matches_step_by_step_reference_with_power_iteration_refresh(shape, freq, extra, foreach):
    grads = random_grads(shape, 20)
    opt, p, ours, theirs = run_both(shape, grads, precondition_frequency=freq, foreach=foreach, **HYPER, **extra)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)
    assert opt.state[p]["step"] == 19
    assert [q is None for q in opt.state[p]["Q"]] == [d > extra.get("max_precond_dim", 10000) for d in shape]


@pytest.mark.parametrize("freq", [1, 4])
def test_matches_eigh_ideal_soap_when_power_iteration_is_exact(freq):
    """Gradients U diag(s_t) V^T with fixed U, V and well separated s_t: every factor has eigenvectors U
    (or V) in a stable order, so one power-iteration step from the previous basis is exact and SOAP must
    equal the ideal algorithm that recomputes the eigenbases with eigh (up to signs, which cancel).
    The rotated gradients are diagonal: eps = 1e-3 keeps the rounding noise of their zero entries
    (1e-16 / (1e-16 + eps)) out of the comparison."""
    gen = torch.Generator().manual_seed(3)
    u, _ = torch.linalg.qr(torch.randn(5, 5, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(5, 5, generator=gen, dtype=torch.float64))
    base = torch.tensor([5.0, 3.0, 2.0, 1.3, 0.8], dtype=torch.float64)
    grads = [u @ torch.diag(base * (1 + 0.1 * torch.rand(5, generator=gen, dtype=torch.float64))) @ v.T
             for _ in range(20)]
    hyper = {**HYPER, "eps": 1e-3}
    _, _, ours, theirs = run_both((5, 5), grads, refresh="eigh", precondition_frequency=freq, **hyper)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_first_step_only_initialises_the_preconditioner():
    p = torch.nn.Parameter(torch.randn(6, 4))
    before = p.detach().clone()
    opt = SOAP([p], lr=0.1, weight_decay=0.5)
    p.grad = torch.randn(6, 4)
    opt.step()
    assert torch.equal(p.detach(), before)
    state = opt.state[p]
    assert state["step"] == 0 and not state["exp_avg"].any() and not state["exp_avg_sq"].any()
    L = 0.05 * p.grad @ p.grad.T  # (1 - shampoo_beta) G G^T with shampoo_beta = betas[1] = 0.95
    torch.testing.assert_close(state["GG"][0], L)
    q = state["Q"][0]
    torch.testing.assert_close(q.T @ q, torch.eye(6), atol=1e-5, rtol=0)
    eig = torch.diagonal(q.T @ L @ q)
    assert torch.all(eig[:-1] >= eig[1:] - 1e-6)  # descending eigenvalues
    p.grad = torch.randn(6, 4)
    opt.step()
    assert not torch.equal(p.detach(), before)


def test_1d_parameters_get_adam_from_the_second_step():
    """SOAP's 1-D update is Adam's with eps = 0: compare with torch.optim.Adam fed the gradients from the
    second on, then with a hand-written Adam with eps and weight decay applied after the update."""
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(7, generator=gen, dtype=torch.float64) for _ in range(12)]
    p, q = (torch.nn.Parameter(torch.linspace(-1, 1, 7, dtype=torch.float64)) for _ in range(2))
    soap = SOAP([p], lr=0.01, betas=(0.9, 0.99), eps=0.0, weight_decay=0.0)
    adam = torch.optim.Adam([q], lr=0.01, betas=(0.9, 0.99), eps=0.0)
    p.grad = grads[0]
    soap.step()
    for g in grads[1:]:
        p.grad, q.grad = g.clone(), g.clone()
        soap.step()
        adam.step()
        torch.testing.assert_close(p, q, rtol=1e-12, atol=1e-14)

    p = torch.nn.Parameter(torch.linspace(-1, 1, 7))
    x, m, v = p.detach().clone(), torch.zeros(7), torch.zeros(7)
    lr, (b1, b2), eps, wd = 0.02, (0.8, 0.9), 1e-3, 0.3
    soap = SOAP([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for i, g in enumerate(grads):
        p.grad = g.float()
        soap.step()
        if i > 0:
            m, v = b1 * m + (1 - b1) * g.float(), b2 * v + (1 - b2) * g.float() ** 2
            x = x - lr * math.sqrt(1 - b2**i) / (1 - b1**i) * m / (v.sqrt() + eps)
            x = x - lr * wd * x
        torch.testing.assert_close(p.detach(), x, rtol=1e-5, atol=1e-6)
    assert soap.state[p]["Q"] == [None] and soap.state[p]["GG"] == [None]


def test_parameters_without_gradient_are_skipped():
    frozen, live = torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(4, 3))
    before = frozen.detach().clone()
    opt = SOAP([frozen, live], weight_decay=0.1)
    for _ in range(5):
        live.grad = torch.randn(4, 3)
        opt.step()
    assert frozen not in opt.state and torch.equal(frozen.detach(), before)
    frozen.grad = torch.randn(4, 3)  # unfrozen later (DINO's last layer after epoch 1): initialises only
    opt.step()
    assert torch.equal(frozen.detach(), before) and opt.state[frozen]["step"] == 0


def test_group_lr_and_weight_decay_are_read_at_every_step():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(5, 3, dtype=torch.float64))
    opt = SOAP([p], lr=0.01, weight_decay=0.1, precondition_frequency=2)
    for _ in range(4):
        p.grad = torch.randn(5, 3, dtype=torch.float64)
        opt.step()
    p.grad = torch.randn(5, 3, dtype=torch.float64)
    start = p.detach().clone()

    def next_step(lr, wd):
        q = copy.deepcopy(p)
        o = SOAP([q], lr=0.01, weight_decay=0.1, precondition_frequency=2)
        o.load_state_dict(copy.deepcopy(opt.state_dict()))
        q.grad = p.grad.clone()
        o.param_groups[0].update(lr=lr, weight_decay=wd)
        o.step()
        return q.detach()

    assert torch.equal(next_step(0.0, 0.0), start)
    d1, d2 = next_step(0.01, 0.0) - start, next_step(0.02, 0.0) - start
    assert d1.abs().max() > 0
    torch.testing.assert_close(d2, 2 * d1, rtol=1e-10, atol=1e-14)
    # decoupled weight decay applied to the updated weights: p <- (p + d) (1 - lr wd)
    torch.testing.assert_close(next_step(0.01, 0.5), (start + d1) * (1 - 0.01 * 0.5), rtol=1e-12, atol=1e-14)


def make_params(seed=0):
    torch.manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(6, 4)), torch.nn.Parameter(torch.randn(6)),
            torch.nn.Parameter(torch.randn(3, 50)), torch.nn.Parameter(torch.randn(2, 3, 4)),
            torch.nn.Parameter(torch.randn(4, 4)),                       # frozen: never has a gradient
            torch.nn.Parameter(torch.randn(4, 5).to(torch.bfloat16))]   # low precision: float32 statistics


def test_state_dict_round_trip_continues_bit_for_bit():
    gen = torch.Generator().manual_seed(1)
    grads = [[torch.randn(p.shape, generator=gen).to(p.dtype) for p in make_params()] for _ in range(12)]

    def steps(params, opt, gs):
        for g_list in gs:
            for i, (p, g) in enumerate(zip(params, g_list)):
                p.grad = None if i == 4 else g.clone()
            opt.step()

    def new_opt(params):
        return SOAP([{"params": params[:2]}, {"params": params[2:], "weight_decay": 0.0}],
                    lr=0.01, precondition_frequency=3, max_precond_dim=10)

    params = make_params()
    opt = new_opt(params)
    steps(params, opt, grads[:5])
    buffer = io.BytesIO()
    torch.save({"params": [p.detach() for p in params], "opt": opt.state_dict()}, buffer)
    steps(params, opt, grads[5:])

    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    resumed = [torch.nn.Parameter(t.clone()) for t in saved["params"]]
    opt2 = new_opt(resumed)
    opt2.load_state_dict(saved["opt"])
    assert opt2.state[resumed[5]]["exp_avg"].dtype == torch.float32
    assert opt2.state[resumed[5]]["Q"][0].dtype == torch.float32
    steps(resumed, opt2, grads[5:])
    for a, b in zip(params, resumed):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert resumed[4] not in opt2.state


def vit_like_params(dtype=torch.float64):
    """Shapes that repeat as in a ViT (three blocks of qkv / proj / fc1 / fc2 weights and their biases),
    3-D tensors, matrices with an unrotated dimension, a shape of its own, and a parameter that starts
    later (DINO's frozen last layer)."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(12, 4), (4, 4), (16, 4), (4, 16), (12,), (4,), (16,)] * 3 + [(2, 3, 4)] * 2 + [(3, 50)] * 2 + [(50, 6)]
    return [torch.nn.Parameter(torch.randn(s, generator=gen, dtype=dtype)) for s in shapes]


@pytest.mark.parametrize("extra", [{}, {"normalize_grads": True}, {"precondition_1d": True}])
def test_batched_steps_equal_per_parameter_steps(extra):
    """foreach=True buckets parameters by shape, rotated dimensions and step count; it must give the
    per-parameter numbers, including for a parameter that joins its bucket's shape several steps late."""
    runs = {}
    for foreach in (True, False):
        params = vit_like_params()
        opt = SOAP([{"params": params[:-5]}, {"params": params[-5:], "weight_decay": 0.0}], lr=0.01,
                   betas=(0.9, 0.95), weight_decay=0.1, precondition_frequency=3, max_precond_dim=10,
                   foreach=foreach, **extra)
        gen = torch.Generator().manual_seed(1)
        for step in range(10):
            for i, p in enumerate(params):
                late = i == 0 and step < 4  # the first qkv-like weight has no gradient for 4 steps
                p.grad = None if late else torch.randn(p.shape, generator=gen, dtype=p.dtype)
            opt.step()
        runs[foreach] = params, opt
    (batched, opt_b), (single, opt_s) = runs[True], runs[False]
    assert opt_b.state[batched[0]]["step"] == 5 and opt_b.state[batched[7]]["step"] == 9
    for a, b in zip(batched, single):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for a, b in zip(batched, single):
        sa, sb = opt_b.state[a], opt_s.state[b]
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(sa[key], sb[key], rtol=1e-10, atol=1e-12)
        for qa, qb in zip(sa["Q"], sb["Q"]):
            assert (qa is None) == (qb is None)
            if qa is not None:
                torch.testing.assert_close(qa, qb, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("autocast_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("foreach", [False, True])
def test_a_step_under_autocast_equals_the_fp32_step(foreach, autocast_dtype):
    """Lightning runs a manual-optimisation step, ``opt.step()`` included, inside its autocast: SOAP
    must keep its factors, bases, moments and update in float32 there (it crashed in bf16, issue 26).
    Ten steps with three basis refreshes, on the same float32 gradients, inside and outside autocast."""
    runs = []
    for under_autocast in (False, True):
        params = vit_like_params(torch.float32)
        opt = SOAP(params, lr=0.01, betas=(0.9, 0.95), weight_decay=0.1, precondition_frequency=3,
                   max_precond_dim=20, foreach=foreach)
        gen = torch.Generator().manual_seed(1)
        for _ in range(10):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen)
            with torch.autocast("cpu", dtype=autocast_dtype, enabled=under_autocast):
                opt.step()
        runs.append((params, opt))
    (plain, opt_plain), (autocast, opt_autocast) = runs
    for a, b in zip(autocast, plain):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
        for qa, qb in zip(opt_autocast.state[a]["Q"], opt_plain.state[b]["Q"]):
            assert qa is None or (qa.dtype == torch.float32 and torch.allclose(qa, qb, rtol=1e-6, atol=1e-6))
    assert not torch.equal(plain[0], vit_like_params(torch.float32)[0])  # the steps moved the weights


def test_invalid_hyperparameters_raise():
    p = [torch.nn.Parameter(torch.zeros(2, 2))]
    for bad in (dict(lr=-1.0), dict(betas=(0.9, 1.0)), dict(precondition_frequency=0), dict(eps=-1.0)):
        with pytest.raises(ValueError):
            SOAP(p, **bad)


def test_build_optimizer_table():
    params = [torch.nn.Parameter(torch.zeros(3, 2))]
    opt = build_optimizer("soap", params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.04,
                          precondition_frequency=5)
    assert isinstance(opt, SOAP) and opt.defaults["precondition_frequency"] == 5
    adamw = build_optimizer("adamw", [{"params": iter(params), "weight_decay": 0.0}], lr=1e-3,
                            betas=(0.9, 0.999), eps=1e-8, weight_decay=0.04)
    assert isinstance(adamw, torch.optim.AdamW) and adamw.defaults["fused"]  # the default, on CPU too
    assert adamw.param_groups[0]["params"] == params and adamw.param_groups[0]["weight_decay"] == 0.0
    assert not build_optimizer("adamw", params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                               implementation="loop").defaults["foreach"]
    assert not build_optimizer("soap", params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0,
                               implementation="loop").defaults["foreach"]
    with pytest.raises(ValueError, match=r"^soap has no 'fused' implementation; expected one of: loop, foreach$"):
        build_optimizer("soap", params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, implementation="fused")
    with pytest.raises(ValueError, match=r"^unknown optimizer 'lion'; expected one of: adamw, soap, sgd$"):
        build_optimizer("lion", params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    with pytest.raises(ValueError, match="precondition_frequency"):
        build_optimizer("adamw", params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                        precondition_frequency=10)
    assert sorted(OPTIMIZERS) == ["adamw", "sgd", "soap"]


def test_matches_pytorch_optimizer_soap_if_installed():
    """Optional cross-check with the pytorch-optimizer package's SOAP (not a dependency). It runs eigh and
    QR in float32 even for float64 parameters, as the reference does, hence the float32-level tolerance."""
    po = pytest.importorskip("pytorch_optimizer")
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(6, 4, dtype=torch.float64))
    b = torch.nn.Parameter(a.detach().clone())
    kw = dict(lr=0.01, betas=(0.9, 0.95), weight_decay=0.1, precondition_frequency=2)
    ours, theirs = SOAP([a], **kw), po.SOAP([b], **kw)
    for g in random_grads((6, 4), 10):
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)


def _check_eigenbasis(f, q):
    assert torch.isfinite(q).all()
    torch.testing.assert_close(q.T @ q, torch.eye(f.shape[0]), atol=1e-5, rtol=0)
    d = (q.T @ f.double().float() @ q)
    off = d - torch.diag(torch.diagonal(d))
    assert off.abs().max() <= 1e-4 * f.abs().max()
    assert (torch.diagonal(d)[:-1] >= torch.diagonal(d)[1:] - 1e-4 * f.abs().max()).all()  # descending


def test_eigenbasis_of_a_factor_with_mostly_zero_rows_is_finite_and_orthonormal():
    """A position-embedding gradient at a small image size has most rows exactly zero (132 of 197 here):
    float32 eigh fails on such a factor, and the float64 retry must give a true eigenbasis."""
    from skipless.optim.soap import _eigenbasis

    gen = torch.Generator().manual_seed(0)
    g = torch.zeros(197, 192)
    rows = torch.randperm(197, generator=gen)[:65]
    g[rows] = torch.randn(65, 192, generator=gen) * torch.logspace(0, -6, 65)[:, None]
    f = g @ g.T
    _check_eigenbasis(f, _eigenbasis(f))


def test_eigenbasis_retries_when_eigh_returns_nan_without_raising(monkeypatch):
    """LAPACK's float32 eigh has been seen to return NaN eigenvectors silently (a NaN parameter one step
    later, measured on a supervised skipless ViT with SOAP at 32 px): the retry must catch that too."""
    from skipless.optim import soap

    real = torch.linalg.eigh

    def nan_in_float32(a, *args, **kwargs):
        w, q = real(a, *args, **kwargs)
        return (w, torch.full_like(q, float("nan"))) if a.dtype == torch.float32 else (w, q)

    monkeypatch.setattr(torch.linalg, "eigh", nan_in_float32)
    f = torch.randn(6, 6)
    f = f @ f.T
    q = soap._eigenbasis(f)
    assert q.dtype == torch.float32
    _check_eigenbasis(f, q)
