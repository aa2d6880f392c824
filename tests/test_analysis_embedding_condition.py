"""Condition numbers of the sub-block output embeddings (skipless.analysis.embedding_condition),
checked against numpy SVDs of tensors caught with forward hooks on the model's own forward."""
import numpy as np
import pytest
import torch

from skipless.analysis.embedding_condition import EMBEDDINGS, embedding_conditions, log_condition_numbers
from skipless.models import create_vit
from skipless.models.features import FeatureRequestError


def small_vit(residual, **kw):
    torch.manual_seed(0)
    return create_vit("vit_tiny", residual=residual, depth=2, img_size=32, patch_size=8, **kw)


def hooked_intermediates(model, images):
    """Per block, numpy float64 copies of: block input, attention branch, the MLP's input stream, MLP branch."""
    caught = {}

    def keep(i, name, pre):
        def hook(module, args, output=None):
            caught.setdefault(i, {})[name] = (args[0] if pre else output).detach().double().numpy()
        return hook

    handles = []
    for i, blk in enumerate(model.blocks):
        handles += [blk.register_forward_pre_hook(keep(i, "x", True)),
                    blk.ls1.register_forward_hook(keep(i, "attn", False)),
                    blk.norm2.register_forward_pre_hook(keep(i, "mid", True)),
                    blk.ls2.register_forward_hook(keep(i, "mlp", False))]
    try:
        with torch.no_grad():
            model.eval()(images)
    finally:
        for h in handles:
            h.remove()
    return caught


def numpy_mean_log_kappa(batch):
    """Mean ln kappa, inf for a matrix numpy's matrix_rank (its default tolerance) calls rank-deficient."""
    logs = []
    for a in batch:
        s = np.linalg.svd(a, compute_uv=False)
        logs.append(np.inf if np.linalg.matrix_rank(a) < min(a.shape) else np.log(s.max() / s.min()))
    return float(np.mean(logs))


def with_singular_values(s, n=6, d=30, seed=0):
    """A (1, n, d) float64 matrix U diag(s) V^T, U and V with orthonormal columns (numpy QR)."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((n, len(s))))
    v, _ = np.linalg.qr(rng.standard_normal((d, len(s))))
    return torch.from_numpy((u * np.asarray(s)) @ v.T)[None]


@pytest.mark.parametrize("residual", ["skip", "skipless", "decayed"])
def test_matches_numpy_svd_of_hooked_tensors(residual):
    model = small_vit(residual)
    images = torch.randn(3, 3, 32, 32)
    got = embedding_conditions(model, images)
    caught = hooked_intermediates(model, images)
    assert sorted(got) == [0, 1]
    for i, t in caught.items():
        expected = {"in": t["x"], "attn": t["attn"], "attn+skip": t["x"] + t["attn"], "mlp": t["mlp"],
                    "mlp+skip": t["mid"] + t["mlp"]}
        assert set(got[i]) == set(EMBEDDINGS)
        for name, matrix in expected.items():
            assert got[i][name] == pytest.approx(numpy_mean_log_kappa(matrix), rel=1e-6), (i, name)
    if residual == "decayed":  # its branches' output projections start at zero
        assert got[0]["attn"] == got[0]["mlp"] == np.inf


def test_skip_model_with_skip_is_its_own_block_state():
    """For a skip model 'attn+skip' is the block's own mid, 'mlp+skip' its output."""
    model = small_vit("skip")
    images = torch.randn(2, 3, 32, 32)
    got = embedding_conditions(model, images, blocks=[-1])
    caught = hooked_intermediates(model, images)[1]
    assert list(got) == [1]
    assert got[1]["attn+skip"] == pytest.approx(numpy_mean_log_kappa(caught["mid"]), rel=1e-4)


def test_model_mode_and_grad_mode_restored_and_dropout_ignored():
    model = small_vit("skip", drop_path_rate=0.5, proj_drop_rate=0.5)
    model.train()
    model.blocks[0].mlp.eval()
    images = torch.randn(2, 3, 32, 32)
    first = embedding_conditions(model, images)
    assert model.training and model.blocks[1].attn.training and not model.blocks[0].mlp.training
    assert torch.is_grad_enabled()
    assert embedding_conditions(model, images) == first
    assert embedding_conditions(model.eval(), images) == first


def test_log_condition_numbers_of_known_matrices():
    diag = torch.zeros(1, 4, 6, dtype=torch.float64)
    diag[0, range(4), range(4)] = torch.tensor([8.0, 4.0, 2.0, 0.5], dtype=torch.float64)
    assert float(log_condition_numbers(diag)) == pytest.approx(np.log(8.0 / 0.5))
    rank_one = torch.ones(1, 4, 6)
    assert float(log_condition_numbers(rank_one)) == np.inf
    assert float(log_condition_numbers(torch.zeros(1, 4, 6))) == np.inf


THRESHOLD = 30 * np.finfo(np.float64).eps  # s_max * max(n, d) * eps for s_max = 1, n = 6, d = 30


@pytest.mark.parametrize("s_min", [1e-40, 1e-20, THRESHOLD / 10])
def test_a_singular_value_below_the_rule_is_zero_whatever_the_kernel_returns(s_min):
    """The matrix's smallest singular value is s_min in exact arithmetic; whatever the SVD returns for it
    (s_min, or rounding noise of the construction, both far below the threshold) it is numerically zero."""
    tokens = with_singular_values([1.0, 0.8, 0.5, 0.3, 0.2, s_min])
    assert np.linalg.matrix_rank(tokens[0].numpy()) == 5  # numpy agrees it is rank-deficient
    assert float(log_condition_numbers(tokens)) == np.inf


@pytest.mark.parametrize("s_min", [THRESHOLD * 100, 1e-3])
def test_a_singular_value_above_the_rule_stays_finite(s_min):
    tokens = with_singular_values([1.0, 0.8, 0.5, 0.3, 0.2, s_min])
    assert float(log_condition_numbers(tokens)) == pytest.approx(-np.log(s_min), abs=1e-2)


def test_what_a_kernel_leaves_for_exact_zeros_is_zero(monkeypatch):
    """MKL's AVX512 SVD of the all-ones 4 x 6 matrix: sqrt(24), then 6.7e-47 and 1.9e-78 where other
    kernels return exactly 0 (ln kappa 180.6 when decided by log(0))."""
    returned = torch.tensor([[24 ** 0.5, 6.7e-47, 1.9e-78, 1.9e-78]], dtype=torch.float64)
    monkeypatch.setattr(torch.linalg, "svdvals", lambda a: returned)
    assert float(log_condition_numbers(torch.ones(1, 4, 6))) == np.inf


def test_unknown_block_is_a_user_error():
    with pytest.raises(FeatureRequestError, match="out of range"):
        embedding_conditions(small_vit("skip"), torch.randn(2, 3, 32, 32), blocks=5)


def test_chunks_of_images_give_the_mean_over_every_image(monkeypatch):
    """Seed 003's 10% of a val split goes through the blocks CHUNK images at a time: the same means."""
    import skipless.analysis.embedding_condition as module

    model = small_vit("skip")
    images = torch.randn(5, 3, 32, 32)
    whole = embedding_conditions(model, images)
    monkeypatch.setattr(module, "CHUNK", 2)
    chunked = embedding_conditions(model, images)
    for i in whole:
        for name in EMBEDDINGS:
            assert chunked[i][name] == pytest.approx(whole[i][name], rel=1e-9)


def test_linear_attention_embedding_is_the_explicit_product_of_prop_4_1():
    """Seed 003's Fig. 3 (upper): the SA output of linear attention, (1/k) X_h W_Q W_K^T X_h^T X_h W_V per head
    (its Eq. 5 / Prop. 4.1, k = 16), heads concatenated and projected, built here from the block's weights with
    numpy; its ln kappa and that of X + SA(X) are what the evaluator reports."""
    model = small_vit("skip", attention="linear")
    images = torch.randn(2, 3, 32, 32)
    got = embedding_conditions(model, images)
    caught = hooked_intermediates(model, images)
    blk = model.blocks[0]
    attn = blk.attn
    heads, d = attn.num_heads, model.embed_dim
    hd = d // heads
    w_qkv, b_qkv = attn.qkv.weight.detach().double().numpy(), attn.qkv.bias.detach().double().numpy()
    w_o, b_o = attn.proj.weight.detach().double().numpy(), attn.proj.bias.detach().double().numpy()
    x = caught[0]["x"]
    ln = blk.norm1
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    u = (x - mu) / np.sqrt(var + ln.eps) * ln.weight.detach().double().numpy() + ln.bias.detach().double().numpy()
    qkv = u @ w_qkv.T + b_qkv
    q, k, v = qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
    out = np.concatenate([(q[..., h * hd:(h + 1) * hd] @ np.swapaxes(k[..., h * hd:(h + 1) * hd], -1, -2) / 16.0)
                          @ v[..., h * hd:(h + 1) * hd] for h in range(heads)], axis=-1) @ w_o.T + b_o
    np.testing.assert_allclose(out, caught[0]["attn"], rtol=1e-4, atol=1e-5)  # float32 forward against float64
    assert got[0]["attn"] == pytest.approx(numpy_mean_log_kappa(out), rel=1e-3)
    assert got[0]["attn+skip"] == pytest.approx(numpy_mean_log_kappa(x + out), rel=1e-3)
