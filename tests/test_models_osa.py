"""Orthogonal self-attention (seeds/004) against the math: a dense float64 ``expm`` reference, the
orthogonality of ``A``, Newton-Schulz's convergence, Appendix C's init and the Jacobian it conditions,
and the OSA-Transformer end to end (features, backbone files, the conditioning diagnostics)."""
import math

import pytest
import torch
from torch.func import jacrev, jvp
from torch.utils._python_dispatch import TorchDispatchMode

from skipless.analysis.condition_number import dense_condition
from skipless.analysis.jacobians import sub_block_jacobian_condition, sub_block_jacobian_dense
from skipless.errors import ModelArgumentError
from skipless.models import (
    ATTENTIONS, OrthogonalAttention, create_vit, extract_features, head_matrices, load_backbone, osa_init_,
    save_backbone, stiefel, use_explicit_attention,
)
from skipless.models.osa import low_rank_factors
from skipless.optim.param_groups import param_groups


def osa_layer(d: int = 32, heads: int = 4, seed: int = 0, **attention_args) -> OrthogonalAttention:
    """One float64 OSA layer at the paper's init (d_v = d / heads)."""
    torch.manual_seed(seed)
    model = create_vit("vit_tiny", embed_dim=d, num_heads=heads, depth=1, residual="skipless", attention="osa",
                       init="osa", norm="none", final_norm=False, attention_args=attention_args)
    return model.blocks[0].attn.double().eval()


def tokens(n: int, d: int = 32, seed: int = 1, scale: float = 1.0) -> torch.Tensor:
    return scale * torch.randn(1, n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def dense_head(x: torch.Tensor, m: dict[str, torch.Tensor], alpha: float) -> torch.Tensor:
    """Eq. 5 written out, float64: ``expm(S) X W^V W^O`` with ``S`` formed N x N."""
    q, k = x @ m["Q"], x @ m["K"]
    s = alpha / math.sqrt(q.shape[-1]) * (q @ k.T - k @ q.T)
    return torch.linalg.matrix_exp(s) @ x @ m["V"] @ m["O"]


def dense_layer(attn: OrthogonalAttention, x: torch.Tensor) -> torch.Tensor:
    """Eq. 4: the sum over heads of ``dense_head`` (x: (N, d))."""
    alpha = float(attn.alpha)
    return sum(dense_head(x, {k: v.double() for k, v in head_matrices(attn, h).items()}, alpha)
               for h in range(attn.num_heads))


def only_head(attn: OrthogonalAttention, h: int) -> OrthogonalAttention:
    """The layer with every other head's columns of ``proj`` zeroed: its output is head ``h``'s alone."""
    with torch.no_grad():
        keep = torch.zeros_like(attn.proj.weight)
        keep[:, h * attn.head_dim:(h + 1) * attn.head_dim] = 1
        attn.proj.weight.mul_(keep)
    return attn


def qkv(attn: OrthogonalAttention, x: torch.Tensor):
    B, N, _ = x.shape
    return attn.qkv(x).reshape(B, N, 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4).unbind(0)


# ---- the low-rank computation against the dense N x N matrix exponential ---------------------------------------

@pytest.mark.parametrize("n", [3, 10, 16, 40])  # 2 d_v = 16: fewer, as many and more tokens than the rank of S
def test_low_rank_osa_equals_the_dense_matrix_exponential(n):
    attn = osa_layer(alpha=0.5)  # a large alpha: A is far from the identity, so the test has teeth
    x = tokens(n)
    with torch.no_grad():
        ours = attn(x)[0]
        ref = dense_layer(attn, x[0])
        a = attn.matrix(*qkv(attn, x)[:2])[0]
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-6 * ref.abs().max().item())
    assert (a - torch.eye(n, dtype=a.dtype)).abs().max() > 0.3


def test_a_is_orthogonal_with_determinant_one():
    for n, dtype, tol in ((40, torch.float64, 1e-12), (7, torch.float64, 1e-12), (40, torch.float32, 1e-5)):
        attn = osa_layer(alpha=1.0).to(dtype)
        with torch.no_grad():
            a = attn.matrix(*qkv(attn, tokens(n).to(dtype))[:2])[0]  # (heads, N, N)
        eye = torch.eye(n, dtype=dtype)
        assert (a.transpose(-2, -1) @ a - eye).abs().max() < tol
        assert (a - eye).abs().max() > 0.3
        torch.testing.assert_close(torch.linalg.det(a.double()), torch.ones(a.shape[0], dtype=torch.float64),
                                   rtol=0, atol=1e-4)


def test_the_normal_path_never_forms_an_n_by_n_matrix():
    """Every tensor the fused path creates is O(N d): none has two dimensions of N = 50 (the explicit
    path, which forms A, is caught by the same check)."""
    n = 50
    attn = osa_layer()

    class Shapes(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.square = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and list(t.shape).count(n) >= 2:
                    self.square.append((str(func), tuple(t.shape)))
            return out

    x = tokens(n)
    with torch.no_grad():
        with Shapes() as fused:
            attn(x)
        with use_explicit_attention(attn), Shapes() as explicit:
            attn(x)
    assert fused.square == []
    assert explicit.square


# ---- Newton-Schulz ------------------------------------------------------------------------------------------------

def well_conditioned_qk(dv: int, n: int, seed: int = 0):
    """Q, K (n x d_v) of ``X [W^Q, W^K]`` with orthonormal ``[W^Q, W^K]`` and ``M = [Q, K]`` of condition number 1."""
    g = torch.Generator().manual_seed(seed)
    d = 4 * dv
    w = stiefel(d, 2 * dv, g)
    omega = stiefel(n, 2 * dv, g)
    x = math.sqrt(n) * omega @ w.T + torch.randn(n, d, generator=g, dtype=torch.float64) @ (torch.eye(d, dtype=torch.float64) - w @ w.T)
    return x @ w[:, :dv], x @ w[:, dv:]


def newton_schulz_errors(dv: int, n: int = 64, steps=range(1, 11)) -> list[float]:
    """``||A_K - expm(S)||_2`` for K Newton-Schulz steps, ``S`` scaled to ``||S||_2 = 1``."""
    q, k = well_conditioned_qk(dv, n)
    scale = 1.0 / torch.linalg.matrix_norm(q @ k.T - k @ q.T, 2)
    exact = torch.linalg.matrix_exp(scale * (q @ k.T - k @ q.T))
    errors = []
    for steps_ in steps:
        b, d = low_rank_factors(q, k, scale, "newton-schulz", steps_)
        errors.append(torch.linalg.matrix_norm(torch.eye(n, dtype=torch.float64) + b @ d @ b.T - exact, 2).item())
    return errors


def test_newton_schulz_converges_to_the_exact_attention():
    """``||A_K - expm(S)||_2`` (A orthogonal, so this is relative) against the number K of Newton-Schulz
    steps, N = 64, ``M = [Q, K]`` of condition number 1, ``||S||_2 = 1``, float64 (measured):

        K      1      2      3      4      5       6       7       8       9       10
        d_v=8  0.94   0.89   0.71   0.35   0.064   1.7e-3  1.1e-6  5e-13   4e-15   4e-15
        d_v=16 0.95   0.94   0.87   0.67   0.31    0.046   8.8e-4  3.0e-7  4e-14   8e-15   (the paper's MNIST head)
        d_v=64 0.96   0.96   0.95   0.93   0.84    0.58    0.21    0.020   1.6e-4  1.1e-8  (ViT-S's head, N = 256)

    Even a perfectly conditioned ``M`` starts at singular values ``1/sqrt(2 d_v)`` after Eq. 9's Frobenius
    normalisation, and a step multiplies a small one by only 1.5, so the paper's K = 6 suffices for
    d_v <= 8, is at 5% for d_v = 16 and far off for d_v = 64. With Gaussian tokens (``M`` of condition
    number 2.5 to 5.5) K = 6 gives 0.033 (d_v=8), 0.14 (d_v=16), 0.35 (d_v=64); ``make bench`` prints
    that table. With ``||S||_2`` of several radians the error is no longer monotone in K (rotations
    wrap around), which is why ``S`` is normalised here.
    """
    errors = newton_schulz_errors(8)
    assert errors[5] < 5e-3  # K = 6
    assert errors[-1] < 1e-12
    for before, after in zip(errors, errors[1:]):
        assert after < before or after < 1e-12
    assert newton_schulz_errors(16, steps=[6])[0] > 10 * errors[5]  # a larger head converges later


def test_newton_schulz_layer_tends_to_the_qr_layer():
    x = tokens(24, scale=0.3)
    qr = osa_layer(alpha=0.5)
    with torch.no_grad():
        ref = qr(x)
        errs = []
        for k in (2, 6, 12):
            ns = osa_layer(alpha=0.5, basis="newton-schulz", ns_steps=k)
            errs.append(((ns(x) - ref).norm() / ref.norm()).item())
    assert errs[0] > errs[1] > errs[2] and errs[2] < 1e-8


def test_repeated_tokens_blow_up_the_qr_gradient_but_not_newton_schulz():
    """Section 2.3's warning, measured: 40 tokens of which 5 distinct make ``M`` (40 x 16) rank 5; both
    bases give a finite output, but QR's backward divides by R's vanishing diagonal (input gradient
    about 2e7 here) while Newton-Schulz, a polynomial, stays about 1. Images with large uniform
    regions can do this to a ViT-S head (2 d_v = 128 distinct tokens needed)."""
    grads = {}
    for basis in ("qr", "newton-schulz"):
        attn = osa_layer(basis=basis)
        x = tokens(5).repeat(1, 8, 1).requires_grad_(True)
        out = attn(x)
        out.pow(2).sum().backward()
        assert torch.isfinite(out).all()
        grads[basis] = x.grad.abs().max().item()
    assert grads["newton-schulz"] < 100 and grads["qr"] > 1e3 * grads["newton-schulz"]


# ---- forward-mode autodiff, the path the conditioning diagnostics take --------------------------------------------

@pytest.mark.parametrize("basis", ["qr", "newton-schulz"])
@pytest.mark.parametrize("n", [6, 20])  # a wide (N < 2 d_v) and a tall QR
def test_jvp_goes_through_qr_and_matrix_exp_on_both_paths(basis, n):
    attn = osa_layer(alpha=0.5, basis=basis)
    x, t = tokens(n), tokens(n, seed=2)
    jac = jacrev(attn)(x).reshape(x.numel(), x.numel())
    for explicit in (False, True):
        with use_explicit_attention(attn, explicit):
            _, tangent = jvp(attn, (x,), (t,))
        torch.testing.assert_close(tangent.reshape(-1), jac @ t.reshape(-1), rtol=1e-9, atol=1e-9)
    eps = 1e-6
    with torch.no_grad():
        fd = (attn(x + eps * t) - attn(x - eps * t)) / (2 * eps)
    torch.testing.assert_close(tangent, fd, rtol=1e-5, atol=1e-6)


# ---- the init (seeds/004, Appendix C) ------------------------------------------------------------------------------

def test_stiefel_draws_are_orthonormal_and_haar_distributed():
    """Algorithm 1's sign fix: without it LAPACK's Householder QR gives ``Q[0, 0] = -|z_00| / ||z_0|| < 0``
    always; uniform on the Stiefel manifold, every entry is symmetric with ``E[Q_ij^2] = 1 / n``."""
    gen = torch.Generator().manual_seed(0)
    draws = torch.stack([stiefel(3, 2, gen) for _ in range(2000)])
    torch.testing.assert_close(draws.transpose(1, 2) @ draws, torch.eye(2, dtype=torch.float64).expand(2000, 2, 2),
                               rtol=0, atol=1e-12)
    assert draws.mean(0).abs().max() < 0.05
    torch.testing.assert_close(draws.square().mean(0), torch.full((3, 2), 1 / 3, dtype=torch.float64), rtol=0, atol=0.03)


def test_osa_init_writes_each_heads_stiefel_draws_where_the_mapping_says():
    """Redraw the init's sequence (per block and head: [W^Q_h, W^K_h], W^V_h, W^O_h^T, then the two SUO
    MLP weights) and find every draw in the place ``init.py``'s docstring maps it to."""
    torch.manual_seed(0)
    model = create_vit("vit_tiny", embed_dim=32, num_heads=4, depth=2, residual="skipless", attention="osa",
                       init="osa", norm="none", final_norm=False)
    osa_init_(model, seed=7)
    gen = torch.Generator().manual_seed(7)
    d, dv = 32, 8
    for block in model.blocks:
        for h in range(4):
            m = head_matrices(block.attn, h)
            qk, v, o_t = stiefel(d, 2 * dv, gen), stiefel(d, dv, gen), stiefel(d, dv, gen)
            torch.testing.assert_close(torch.cat([m["Q"], m["K"]], 1).double(), qk, rtol=0, atol=1e-6)
            torch.testing.assert_close(m["V"].double(), v, rtol=0, atol=1e-6)
            torch.testing.assert_close(m["O"].T.double(), o_t, rtol=0, atol=1e-6)
        stiefel(4 * d, d, gen), stiefel(4 * d, d, gen)  # fc1, fc2 (suo_)
        assert block.attn.qkv.bias is None and block.attn.proj.bias is None
        assert block.mlp.fc1.bias.abs().max() == 0 and block.mlp.fc2.bias.abs().max() == 0
        assert block.attn.alpha.item() == pytest.approx(0.1)


def test_a_heads_output_recomputed_by_hand_from_the_papers_matrices():
    """One head, Eq. 5 with the right-multiplied W^Q_h, W^K_h, W^V_h, W^O_h read from qkv/proj as
    ``init.py`` maps them, equals the model's output with the other heads' columns of proj zeroed;
    and the matrices have Appendix C's properties (Theorem C.2 and C.1: singular values 1)."""
    for h in range(4):
        attn = only_head(osa_layer(alpha=0.7), h)
        m = {k: v.double() for k, v in head_matrices(attn, h).items()}
        eye = torch.eye(16, dtype=torch.float64)
        qk = torch.cat([m["Q"], m["K"]], 1)
        torch.testing.assert_close(qk.T @ qk, eye, rtol=0, atol=1e-6)
        skew = torch.linalg.svdvals(m["Q"] @ m["K"].T - m["K"] @ m["Q"].T)
        torch.testing.assert_close(skew[:16], torch.ones(16, dtype=torch.float64), rtol=0, atol=1e-6)
        assert skew[16:].max() < 1e-6
        vo = torch.linalg.svdvals(m["V"] @ m["O"])
        torch.testing.assert_close(vo[:8], torch.ones(8, dtype=torch.float64), rtol=0, atol=1e-6)
        x = tokens(12)
        with torch.no_grad():
            torch.testing.assert_close(attn(x)[0], dense_head(x[0], m, float(attn.alpha)), rtol=0, atol=1e-9)


def test_heads_are_drawn_independently_and_the_seed_reproduces_them():
    model = create_vit("vit_tiny", embed_dim=32, num_heads=4, depth=1, residual="skipless", attention="osa",
                       init="osa", norm="none", final_norm=False)
    first = model.blocks[0].attn.qkv.weight.clone()
    osa_init_(model, seed=3)
    a = model.blocks[0].attn.qkv.weight.clone()
    osa_init_(model, seed=3)
    assert torch.equal(model.blocks[0].attn.qkv.weight, a) and not torch.equal(a, first)
    m0, m1 = head_matrices(model.blocks[0].attn, 0), head_matrices(model.blocks[0].attn, 1)
    assert (m0["V"].T @ m1["V"]).abs().max() > 0.1  # two heads' value spaces are not orthogonal: i.i.d.


def test_osa_init_needs_two_heads():
    with pytest.raises(ModelArgumentError, match=r"needs 2 d_v <= d \(at least 2 heads\)"):
        create_vit("vit_tiny", embed_dim=16, num_heads=1, depth=1, attention="osa", init="osa")


# ---- the Jacobian at init (seeds/004, Theorems C.3-C.4) -------------------------------------------------------------

def effective_condition(jac: torch.Tensor, rank: int) -> tuple[float, float]:
    """(sigma_1 / sigma_rank, sigma_{rank+1} / sigma_1): the paper's footnote 3 on a matrix of known rank."""
    s = torch.linalg.svdvals(jac)
    return (s[0] / s[rank - 1]).item(), (s[rank] / s[0]).item() if rank < len(s) else 0.0


def head_condition(alpha: float, h: int = 0, n: int = 8, scale: float = 1 / math.sqrt(32)) -> float:
    attn = only_head(osa_layer(alpha=alpha), h)
    x = tokens(n, scale=scale)[0]
    jac = jacrev(lambda t: attn(t[None])[0])(x).reshape(x.numel(), x.numel())
    kappa, next_sv = effective_condition(jac, n * attn.head_dim)  # rank N d_v: the output lies in X -> . W^O_h
    assert next_sv < 1e-12
    return kappa


def test_one_heads_jacobian_is_near_isometric_at_init_and_degrades_with_alpha():
    """Effective kappa of ``X -> A(X) X W^V_h W^O_h`` (N = 8, d = 32, 4 heads, d_v = 8; dense float64 jacrev
    through the model's own QR path), head 0 | heads 0-3, measured:

        alpha                      0    0.001   0.01    0.03   0.1         0.3         1           3
        tokens with unit rows      1    1.0004  1.004   1.012  1.03-1.04   1.09-1.13   1.33-1.52   2.2-3.0
        (||X||_2 = 1.5)
        tokens with unit entries   1    1.01    1.10-1.14  1.31-1.49  2.3-3.2  5.8-8.1  16-23   45-67
        (||X||_2 = 8.4, as after a LayerNorm)

    Theorem C.4: 1 at alpha = 0 (``J = (W^V_h W^O_h)^T kron A`` with all non-zero singular values 1), then
    growing with alpha, linearly at first (Theorem C.3's ``||J_1|| <= C alpha``), with ``C`` growing like
    ``||X||^2``: the paper's alpha = 0.1 is "small" only for tokens of norm about 1.

    The whole multi-head layer is another matter: at alpha = 0 its Jacobian is ``(sum_h W^V_h W^O_h)^T kron I``,
    and a sum of h independent partial isometries is badly conditioned: kappa(J) = 1.8e3 here at every
    alpha <= 0.1 for unit rows (3.7e4 at alpha = 0.1 for unit entries), and ``kappa(sum_h W^V_h W^O_h)``
    over 5 draws measured 4e2-3e5 for d = 32 / 4 heads and 2e4-4e5 for ViT-S (d = 384, 6 heads), so
    ``kappa(K K^T)`` of a ViT-S OSA layer starts near 1e9-1e11. Drawing ``[W^V_1 .. W^V_h]`` and
    ``[W^O_1; ..; W^O_h]^T`` as one orthogonal d x d matrix each would keep every head's marginal
    uniform on the Stiefel manifold and make the sum orthogonal (kappa 1); the paper draws them i.i.d.
    and so do we (``init.osa_init_``).
    """
    kappas = [head_condition(a) for a in (0.0, 1e-3, 1e-2, 0.1, 0.3, 1.0)]
    assert kappas[0] == pytest.approx(1.0, abs=1e-6)  # the weights are float32 draws
    assert kappas[3] < 1.1  # the paper's alpha at init
    assert all(b > a for a, b in zip(kappas, kappas[1:]))
    assert 5 < (kappas[2] - 1) / (kappas[1] - 1) < 15  # linear in alpha near 0 (Theorem C.3)
    for h in (1, 2, 3):
        assert head_condition(0.1, h) < 1.1
    assert head_condition(0.1, scale=1.0) > 2  # larger tokens: the same alpha is no longer small


def test_the_layers_jacobian_at_alpha_zero_is_the_summed_value_output_product():
    """Whole layer, alpha = 0: kappa(J) = kappa(sum_h W^V_h W^O_h) (see the docstring above for its size)."""
    attn = osa_layer(alpha=0.0)
    x = tokens(8)[0]
    jac = jacrev(lambda t: attn(t[None])[0])(x).reshape(x.numel(), x.numel())
    wvo = sum(head_matrices(attn, h)["V"] @ head_matrices(attn, h)["O"] for h in range(4)).double()
    s = torch.linalg.svdvals(wvo)
    assert effective_condition(jac, x.numel())[0] == pytest.approx((s[0] / s[-1]).item(), rel=1e-6)
    assert (s[0] / s[-1]).item() > 10


def test_sub_block_condition_of_an_osa_block_matches_the_dense_jacobian():
    """The matrix-free kappa(K K^T) (Lanczos on vjp/jvp products, under ``use_explicit_attention``) of the
    attention branch against the dense jacrev Jacobian; 4 tokens of width 16, 2 heads."""
    torch.manual_seed(0)
    model = create_vit("vit_tiny", embed_dim=16, num_heads=2, depth=1, residual="skipless", attention="osa",
                       init="osa", norm="none", final_norm=False, attention_args={"alpha": 0.3}).eval()
    block, u = model.blocks[0], tokens(4, d=16).float()
    dense = dense_condition(sub_block_jacobian_dense(block, u, "attn"), gram=True)
    free = sub_block_jacobian_condition(block, u, "attn")
    assert dense.reason is None and free.reason is None and free.converged
    assert free.value == pytest.approx(dense.value, rel=1e-2)


# ---- arguments, refusals ---------------------------------------------------------------------------------------------

SMALL = dict(embed_dim=32, num_heads=4, depth=1)


def test_osa_is_registered_and_configured_from_its_defaults():
    assert ATTENTIONS["osa"] is OrthogonalAttention
    attn = create_vit("vit_tiny", attention="osa", init="osa", **SMALL).blocks[0].attn
    assert (attn.basis, attn.ns_steps, attn.alpha.item()) == ("qr", 6, pytest.approx(0.1))
    assert attn.qkv.bias is None and attn.proj.bias is None  # whatever timm passes (qkv_bias=True for ViTs)
    attn = create_vit("vit_tiny", attention="osa", attention_args={"basis": "newton-schulz", "ns_steps": 9,
                                                                   "alpha": 0.5}, **SMALL).blocks[0].attn
    assert (attn.basis, attn.ns_steps, attn.alpha.item()) == ("newton-schulz", 9, 0.5)


def test_alpha_is_one_learned_gain_per_layer_without_weight_decay():
    model = create_vit("vit_tiny", attention="osa", init="osa", norm="none", final_norm=False, **{**SMALL, "depth": 2})
    alphas = [n for n, _ in model.named_parameters() if n.endswith("attn.alpha")]
    assert alphas == ["blocks.0.attn.alpha", "blocks.1.attn.alpha"]
    no_decay = {id(p) for p in param_groups(model)[1]["params"]}
    assert all(id(blk.attn.alpha) in no_decay and blk.attn.alpha.numel() == 1 for blk in model.blocks)


def test_cutskip_cannot_initialise_osa_in_one_sentence():
    with pytest.raises(ModelArgumentError) as err:
        create_vit("vit_tiny", attention="osa", init="cutskip", **SMALL)
    assert str(err.value) == ("init=cutskip cannot initialise attention=osa: it is written for attention softmax or "
                              "linear; expected init timm or xavier or osa")
    with pytest.raises(ModelArgumentError, match="init=osa cannot initialise attention=softmax"):
        create_vit("vit_tiny", init="osa", **SMALL)


@pytest.mark.parametrize("args, message", [
    ({"basis": "svd"}, "unknown osa basis 'svd'; expected one of: qr, newton-schulz"),
    ({"ns_steps": 0}, "osa ns_steps must be a positive integer (the paper uses 6), got 0"),
    ({"ns_steps": 2.5}, "osa ns_steps must be a positive integer (the paper uses 6), got 2.5"),
    ({"alpha": float("nan")}, "osa alpha must be a finite number (the paper starts at 0.1), got nan"),
    ({"k": 16}, "attention_args ['k'] do not apply to attention=osa"),
])
def test_bad_osa_arguments_are_refused_in_one_sentence(args, message):
    with pytest.raises(ModelArgumentError) as err:
        create_vit("vit_tiny", attention="osa", attention_args=args, **SMALL)
    assert str(err.value).startswith(message) and str(err.value).count(". ") == 0


# ---- the OSA-Transformer end to end ------------------------------------------------------------------------------------

def osa_vit(seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    return create_vit("vit_tiny", depth=2, residual="skipless", attention="osa", init="osa", norm="none",
                      final_norm=False, **kwargs)


def test_an_osa_vit_trains_saves_reloads_and_gives_features(tmp_path):
    model = osa_vit()
    x = torch.randn(2, 3, 48, 32)
    model(x).pow(2).mean().backward()
    for name, p in model.named_parameters():
        if name.startswith("blocks."):
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().max() > 0, name
    model.eval()
    with torch.no_grad():
        model.blocks[1].attn.alpha.fill_(0.37)  # a learned alpha travels in the state dict
    path = save_backbone(tmp_path / "osa.pt", model)
    again = load_backbone(path).eval()
    assert again.skipless_args["attention"] == "osa" and again.blocks[1].attn.alpha.item() == pytest.approx(0.37)
    with torch.no_grad():
        assert torch.equal(again(x), model(x))
    feats = extract_features(again, x, layers="all", kinds=("k", "attn"))
    n = 1 + 3 * 2
    assert feats[("k", 1)].shape == (2, n, 192) and feats[("attn", 0)].shape == (2, 3, n, n)
    a = feats[("attn", 1)]
    torch.testing.assert_close(a @ a.transpose(-2, -1), torch.eye(n).expand_as(a), rtol=0, atol=1e-5)


def test_explicit_and_low_rank_paths_give_the_same_model_outputs():
    for basis in ("qr", "newton-schulz"):
        model = osa_vit(attention_args={"basis": basis, "alpha": 0.5}, embed_dim=32, num_heads=4).eval()
        x = torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            fused = model(x)
            with use_explicit_attention(model):
                explicit = model(x)
        torch.testing.assert_close(fused, explicit, rtol=1e-4, atol=1e-5)


def test_bfloat16_autocast_runs_the_basis_and_exponential_in_float32():
    model = osa_vit(attention_args={"alpha": 0.5}, embed_dim=32, num_heads=4).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        ref = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(x)
    assert low.dtype == torch.bfloat16
    assert ((low.float() - ref).norm() / ref.norm()).item() < 5e-2
