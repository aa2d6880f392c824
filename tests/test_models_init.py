"""The cutskip initialisation against the paper's Section 5 and Proposition 1."""
import math

import pytest
import torch

from skipless.models import create_vit, extract_features, paper_matrices
from skipless.analysis.attention_conditioning import attention_condition_numbers, gaussian_tokens


@pytest.fixture(scope="module")
def small_cutskip():
    torch.manual_seed(0)
    return create_vit("vit_small", residual="skipless", init="cutskip", depth=2,
                      init_args=dict(alpha=1.8, beta=1.0, c=3.0)).eval()


def test_value_output_product_is_scaled_orthogonal(small_cutskip):
    for blk in small_cutskip.blocks:
        m = paper_matrices(blk.attn)
        s = torch.linalg.svdvals((m["V"] @ m["O"]).double())
        torch.testing.assert_close(s, torch.full_like(s, 9.0), rtol=1e-4, atol=0)  # c^2 = 9


def test_each_head_query_key_product_has_rank_head_dim(small_cutskip):
    attn = small_cutskip.blocks[0].attn
    m = paper_matrices(attn)
    d, dh = m["Q"].shape[0], attn.head_dim
    for h in range(attn.num_heads):
        prod = m["Q"][:, h * dh:(h + 1) * dh].double() @ m["K"][:, h * dh:(h + 1) * dh].double().T
        s = torch.linalg.svdvals(prod)
        assert torch.linalg.matrix_rank(prod).item() == dh
        assert s[dh:].max() < 1e-4 * s[0]
        # alpha Z + beta I with Z ~ N(0, 1/d): singular values of the rank-d_h truncation are the
        # largest of alpha Z + beta I, which lie near beta + alpha * 2 (the edge of the circular law
        # of alpha Z shifted by beta); a loose check that the identity term is present.
        assert 1.0 < s[0] < 1.0 + 1.8 * 2.5


def test_query_key_mapping_matches_the_attention_the_model_computes(small_cutskip):
    """softmax(X W^Q_h (X W^K_h)^T / sqrt(d_h)) from the paper's matrices equals the model's attention."""
    torch.manual_seed(1)
    attn = small_cutskip.blocks[0].attn
    m = paper_matrices(attn)
    x = torch.randn(1, 3, 32, 48)
    feats = extract_features(small_cutskip, x, layers=[0], kinds=("attn", "out"))
    tokens = small_cutskip.blocks[0].norm1(_block_input(small_cutskip, x))
    dh = attn.head_dim
    for h in range(attn.num_heads):
        q = tokens[0] @ m["Q"][:, h * dh:(h + 1) * dh]
        k = tokens[0] @ m["K"][:, h * dh:(h + 1) * dh]
        a = torch.softmax(q @ k.T / math.sqrt(dh), dim=-1)
        torch.testing.assert_close(feats[("attn", 0)][0, h], a, atol=1e-5, rtol=1e-4)
    # value/output: sum_h A_h X W^V_h W^O_h equals the attention module's output (biases are zero).
    out = sum(feats[("attn", 0)][0, h] @ tokens[0] @ m["V"][:, h * dh:(h + 1) * dh] @ m["O"][h * dh:(h + 1) * dh]
              for h in range(attn.num_heads))
    torch.testing.assert_close(attn(tokens)[0], out, atol=1e-4, rtol=1e-4)


def _block_input(model, x):
    from skipless.models.features import embed_tokens
    return embed_tokens(model, x)


def test_mlp_weights_are_scaled_uniform_orthogonal(small_cutskip):
    fc1, fc2 = small_cutskip.blocks[0].mlp.fc1.weight.double(), small_cutskip.blocks[0].mlp.fc2.weight.double()
    # fc1: (4d, d), fan_out/fan_in = 4 -> scale 2, W^T W = 4 I
    torch.testing.assert_close(fc1.T @ fc1, 4 * torch.eye(fc1.shape[1], dtype=torch.float64), atol=1e-5, rtol=0)
    # fc2: (d, 4d), fan_out/fan_in = 1/4 -> scale max(1, 1/2) = 1, W W^T = I
    torch.testing.assert_close(fc2 @ fc2.T, torch.eye(fc2.shape[0], dtype=torch.float64), atol=1e-5, rtol=0)


def test_cutskip_biases_are_zero(small_cutskip):
    attn, mlp = small_cutskip.blocks[0].attn, small_cutskip.blocks[0].mlp
    for b in (attn.qkv.bias, attn.proj.bias, mlp.fc1.bias, mlp.fc2.bias):
        assert b.abs().max() == 0


def test_proposition_1_cutskip_attention_is_near_identity_and_well_conditioned():
    """Gaussian tokens through the first LayerNorm: cutskip gives diagonal-dominant, well-conditioned
    attention; timm's init gives near-uniform, ill-conditioned attention (Ji et al., Prop. 1)."""
    tokens = gaussian_tokens(197, 384, seed=0)
    torch.manual_seed(0)
    cut = attention_condition_numbers(create_vit("vit_small", residual="skipless", init="cutskip", depth=1), tokens)
    torch.manual_seed(0)
    plain = attention_condition_numbers(create_vit("vit_small", residual="skipless", init="timm", depth=1), tokens)
    assert cut["mean_diagonal"] > 20 / 197  # far above the uniform weight 1/n
    assert plain["mean_diagonal"] < 2 / 197
    assert cut["median_condition"] * 100 < plain["median_condition"]


def test_uniform_attention_is_singular_by_the_rule_whatever_the_kernel_returns(monkeypatch):
    """Zero queries and keys: each head's attention is ones / N, of rank one; its other singular values
    are 0 or rounding noise depending on the SVD kernel (both tried), and numerically zero either way."""
    model = create_vit("vit_small", residual="skipless", init="timm", depth=1)
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight[: 2 * 384] = 0
        model.blocks[0].attn.qkv.bias[: 2 * 384] = 0
    r = attention_condition_numbers(model, gaussian_tokens(17, 384))
    assert r["per_head_condition"] == [math.inf] * 6 and r["mean_diagonal"] == pytest.approx(1 / 17)
    svdvals = torch.linalg.svdvals
    monkeypatch.setattr(torch.linalg, "svdvals", lambda a: svdvals(a).clamp_min(1e-78))  # what MKL's AVX512 path leaves
    assert attention_condition_numbers(model, gaussian_tokens(17, 384))["per_head_condition"] == [math.inf] * 6


def test_gelu_mean_closed_form_matches_monte_carlo():
    from skipless.models.init import gelu_mean
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(2_000_000, generator=gen, dtype=torch.float64)
    for sigma in (0.5, 1.0, 2.0):
        mc = torch.nn.functional.gelu(sigma * z).mean()
        assert abs(float(gelu_mean(torch.tensor(sigma, dtype=torch.float64))) - float(mc)) < 2e-3


def test_centered_mlp_has_zero_mean_output_on_normalised_tokens():
    torch.manual_seed(0)
    plain = create_vit("vit_tiny", residual="skipless", init="cutskip", depth=1, img_size=32)
    torch.manual_seed(0)
    centred = create_vit("vit_tiny", residual="skipless", init="cutskip", depth=1, img_size=32,
                         init_args={"center_mlp": True})
    x = torch.nn.functional.layer_norm(torch.randn(20000, 192), (192,))
    with torch.no_grad():
        mean_plain = plain.blocks[0].mlp(x).mean(0)
        mean_centred = centred.blocks[0].mlp(x).mean(0)
    # same weights, only fc2's bias differs; the shared output vector is removed
    assert torch.equal(plain.blocks[0].mlp.fc2.weight, centred.blocks[0].mlp.fc2.weight)
    assert mean_plain.norm() > 1.0
    assert mean_centred.norm() < 0.05 * mean_plain.norm()


def _last_block_patch_cosine(model, x):
    with torch.no_grad():
        out = extract_features(model, x, layers=(-1,), kinds=("out",))[("out", len(model.blocks) - 1)][:, 1:]
    t = torch.nn.functional.normalize(out, dim=-1)
    sim = t @ t.transpose(1, 2)
    n = sim.shape[-1]
    return float((sim.sum((1, 2)) - n).mean() / (n * (n - 1)))


def test_centered_mlp_prevents_token_collapse_of_a_deep_skipless_vit_at_init():
    """Without the correction every token of a 12-block skipless ViT points the same way after the
    last block, even for noise images; with it they stay as spread as they came in."""
    x = torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    cos = {}
    for center in (False, True):
        torch.manual_seed(0)
        model = create_vit("vit_tiny", residual="skipless", init="cutskip", img_size=64,
                           init_args={"center_mlp": center}).eval()
        cos[center] = _last_block_patch_cosine(model, x)
    assert cos[False] > 0.9
    assert abs(cos[True]) < 0.1
