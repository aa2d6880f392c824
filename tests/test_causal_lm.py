"""The causal language model (``skipless.models.causal_lm``, seeds/000 App. A.8, issue 49) against the math:
causality on both attention paths, RoPE against a rotation written here with complex numbers, the skip and
skipless models against a reference forward written here with plain torch ops on the same weights, the
parameter counts by formula, the loss against an explicit per-token log-softmax, and save/restore."""
import math

import pytest
import torch
import torch.nn.functional as F

from skipless.errors import ModelArgumentError
from skipless.models import (LM_ARCHS, RESIDUAL_MODES, BackboneLoadError, CausalLM, create_causal_lm, load_backbone,
                             lm_parameter_count, next_token_log_probs, next_token_loss, save_backbone)
from skipless.models.attention import SoftmaxAttention
from skipless.models.rope import apply_rope, rope_angles

TINY = dict(embed_dim=32, depth=2, num_heads=4, mlp_hidden=48, vocab_size=50, context=24)  # heads of 8


def tiny(residual="skip", **kwargs):
    torch.manual_seed(0)
    return create_causal_lm("lm_demo", residual=residual, **{**TINY, **kwargs}).eval()


def tokens(batch=2, length=16, vocab=50, seed=1):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- presets and counts

def independent_count(d, layers, hidden, vocab):
    """Written out term by term: tied embedding; per layer q, k, v, o (d x d each), SwiGLU gate, up (h x d) and
    down (d x h), two RMSNorm weights; the final RMSNorm weight. No biases."""
    embedding = vocab * d
    attention = 4 * (d * d)
    swiglu = 2 * (hidden * d) + d * hidden
    norms = 2 * d
    return embedding + layers * (attention + swiglu + norms) + d


def built_on_meta(arch, **kwargs):
    with torch.device("meta"):
        return create_causal_lm(arch, **kwargs)


def test_lm_110m_has_exactly_109_529_856_parameters():
    model = built_on_meta("lm_110m")
    count = sum(p.numel() for p in model.parameters())
    assert independent_count(768, 12, 2048, 32_000) == 109_529_856
    assert count == 109_529_856
    assert lm_parameter_count(**model.skipless_args) == count


@pytest.mark.parametrize("arch", sorted(LM_ARCHS))
def test_every_preset_counts_as_the_formula_and_has_no_bias(arch):
    model = built_on_meta(arch)
    a = LM_ARCHS[arch]
    assert sum(p.numel() for p in model.parameters()) == independent_count(
        a["embed_dim"], a["depth"], a["mlp_hidden"], a["vocab_size"])
    names = [n for n, _ in model.named_parameters()]
    assert not [n for n in names if n.endswith("bias")]
    assert "embed.weight" in names and not [n for n in names if "head" in n]  # the output reuses the embedding


def test_presets_sizes():
    assert LM_ARCHS["lm_110m"] == dict(embed_dim=768, depth=12, num_heads=12, mlp_hidden=2048, vocab_size=32_000,
                                       context=2048)
    assert LM_ARCHS["lm_110m_gpt2"]["vocab_size"] == 50_257  # GPT-2's vocabulary, unpadded
    assert sum(p.numel() for p in built_on_meta("lm_110m_gpt2").parameters()) == 123_551_232
    demo = LM_ARCHS["lm_demo"]
    assert demo["vocab_size"] == 4096 and demo["depth"] == 4 and demo["num_heads"] == 4


def test_an_unknown_preset_is_refused_with_the_valid_names():
    with pytest.raises(ModelArgumentError) as err:
        create_causal_lm("lm_7b")
    assert all(name in str(err.value) for name in LM_ARCHS)


def test_an_unknown_size_argument_or_odd_head_width_is_refused():
    with pytest.raises(ModelArgumentError, match="embed_dim"):
        create_causal_lm("lm_demo", widht=64)
    with pytest.raises(ModelArgumentError, match="even"):
        create_causal_lm("lm_demo", embed_dim=36, num_heads=4, mlp_hidden=8, depth=1)


def test_the_block_is_the_suites_residual_block_with_rmsnorm_swiglu_and_causal_rope_attention():
    from skipless.models import ResidualBlock
    from skipless.models.causal_lm import CausalAttention, SwiGLU

    model = tiny()
    block = model.blocks[0]
    assert isinstance(block, ResidualBlock) and isinstance(block.attn, CausalAttention)
    assert isinstance(block.mlp, SwiGLU) and block.mlp.fc1_g.weight.shape == (48, 32)
    assert isinstance(block.norm1, torch.nn.RMSNorm) and block.norm1.eps == 1e-6
    assert isinstance(model.norm, torch.nn.RMSNorm)
    assert block.attn.qkv.weight.shape == (96, 32) and block.attn.head_dim == 8 and block.attn.num_heads == 4


# ---------------------------------------------------------------- RoPE

def rotate_by_complex_numbers(x, theta=10_000.0):
    """x (T, d_h): coordinate pairs (i, i + d_h/2) as complex numbers z_i, position t multiplied by
    exp(1j t theta^(-2i/d_h)) (the rotate-half convention of fla and HF Llama), in float64."""
    length, dh = x.shape
    half = dh // 2
    z = torch.complex(x[:, :half].double(), x[:, half:].double())
    freq = theta ** (-2.0 * torch.arange(half, dtype=torch.float64) / dh)
    phase = torch.polar(torch.ones(length, half, dtype=torch.float64),
                        torch.arange(length, dtype=torch.float64)[:, None] * freq[None])
    w = z * phase
    return torch.cat((w.real, w.imag), dim=-1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_rope_is_the_rotation_of_coordinate_pairs_i_and_i_plus_half(dtype):
    x = torch.randn(40, 16, generator=torch.Generator().manual_seed(2), dtype=dtype)
    cos, sin = rope_angles(40, 16, device="cpu", dtype=torch.float64 if dtype == torch.float64 else torch.float32)
    got = apply_rope(x, cos, sin)
    assert got.dtype == dtype
    tol = dict(atol=1e-12, rtol=0) if dtype == torch.float64 else dict(atol=2e-5, rtol=0)
    torch.testing.assert_close(got.double(), rotate_by_complex_numbers(x), **tol)


def test_rope_scores_depend_on_the_offset_only_and_leave_the_self_score_unrotated():
    gen = torch.Generator().manual_seed(3)
    q, k = torch.randn(16, dtype=torch.float64, generator=gen), torch.randn(16, dtype=torch.float64, generator=gen)
    cos, sin = rope_angles(30, 16, dtype=torch.float64)
    rq, rk = apply_rope(q.expand(30, 16), cos, sin), apply_rope(k.expand(30, 16), cos, sin)
    scores = rq @ rk.T  # scores[t, s] = <R_t q, R_s k>
    for offset in (0, 3, -5):
        diagonal = torch.diagonal(scores, offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-10, rtol=0)
    torch.testing.assert_close(scores[7, 7], q @ k, atol=1e-12, rtol=0)


# ---------------------------------------------------------------- causality and the two attention paths

@pytest.mark.parametrize("residual", ["skip", "skipless"])
@pytest.mark.parametrize("explicit", [False, True])
def test_later_tokens_leave_earlier_logits_unchanged(residual, explicit):
    model = tiny(residual)
    x = tokens()
    y = x.clone()
    y[:, 9:] = (y[:, 9:] + 7) % 50
    with torch.no_grad():
        a, b = model(x, explicit=explicit), model(y, explicit=explicit)
    torch.testing.assert_close(a[:, :9], b[:, :9], atol=0, rtol=0)
    assert (a[:, 9:] - b[:, 9:]).abs().max() > 1e-3  # the later positions do see the change


@pytest.mark.parametrize("residual", RESIDUAL_MODES)
@pytest.mark.parametrize("init", ["fla", "cutskip"])
def test_sdpa_and_explicit_paths_agree_in_every_residual_mode(residual, init):
    model = tiny(residual, init=init, init_args=dict(alpha=1.0) if init == "cutskip" else None)
    x = tokens()
    with torch.no_grad():
        fused, explicit = model(x, explicit=False), model(x, explicit=True)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_the_explicit_attention_matrix_is_lower_triangular_and_stochastic():
    model = tiny()
    attn = model.blocks[0].attn
    h = model.blocks[0].norm1(model.embed(tokens(batch=1)))
    qkv = attn.qkv(h).reshape(1, 16, 3, 4, 8).permute(2, 0, 3, 1, 4)
    q, k = attn.rotate(qkv[0], qkv[1])
    a = attn.matrix(q, k)
    assert (a.triu(1) == 0).all()
    torch.testing.assert_close(a.sum(-1), torch.ones(1, 4, 16))


@pytest.mark.parametrize("explicit", [False, True])
def test_bf16_autocast_forward_and_backward_stay_finite_and_near_float32(explicit):
    model = tiny("skipless", init="cutskip", init_args=dict(alpha=1.0))
    x = tokens()
    with torch.no_grad():
        want = model(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = model(x, explicit=explicit)
        loss = next_token_loss(got, x)
    loss.backward()
    assert got.dtype == torch.bfloat16 and loss.dtype == torch.float32
    assert (got.float() - want).abs().max() < 0.05 * want.abs().max()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_a_vit_attention_still_refuses_a_causal_call():
    attn = SoftmaxAttention(32, num_heads=4)
    with pytest.raises(NotImplementedError):
        attn(torch.randn(1, 5, 32), is_causal=True)


def test_a_sequence_longer_than_the_context_is_refused():
    with pytest.raises(ValueError, match="context 24"):
        tiny()(tokens(length=25))


# ---------------------------------------------------------------- the reference forward

def reference_logits(state, x, depth, heads, residual, eps=1e-6, theta=10_000.0):
    """The model written out with plain torch ops on its state dict (float64): pre-RMSNorm, attention with RoPE
    (complex-number form) and a causal mask, SwiGLU, final RMSNorm, logits through the embedding."""
    def rms(h, weight):
        return h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps) * weight

    h = state["embed.weight"][x]
    length, d = x.shape[1], h.shape[-1]
    dh = d // heads
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    for layer in range(depth):
        p = f"blocks.{layer}."
        u = rms(h, state[p + "norm1.weight"])
        w = state[p + "attn.qkv.weight"]
        q, k, v = u @ w[:d].T, u @ w[d:2 * d].T, u @ w[2 * d:].T
        heads_out = []
        for b in range(x.shape[0]):
            per_head = []
            for i in range(heads):
                cols = slice(i * dh, (i + 1) * dh)
                qi = rotate_by_complex_numbers(q[b, :, cols], theta)
                ki = rotate_by_complex_numbers(k[b, :, cols], theta)
                scores = (qi @ ki.T / math.sqrt(dh)).masked_fill(future, float("-inf"))
                per_head.append(torch.softmax(scores, dim=-1) @ v[b, :, cols])
            heads_out.append(torch.cat(per_head, dim=-1))
        a = torch.stack(heads_out) @ state[p + "attn.proj.weight"].T
        h = h + a if residual == "skip" else a
        u = rms(h, state[p + "norm2.weight"])
        gate, up = u @ state[p + "mlp.fc1_g.weight"].T, u @ state[p + "mlp.fc1_x.weight"].T
        m = (gate * torch.sigmoid(gate) * up) @ state[p + "mlp.fc2.weight"].T
        h = h + m if residual == "skip" else m
    return rms(h, state["norm.weight"]) @ state["embed.weight"].T


@pytest.mark.parametrize("residual", ["skip", "skipless"])
@pytest.mark.parametrize("explicit", [False, True])
def test_the_model_is_the_reference_forward_on_the_same_weights(residual, explicit):
    model = tiny(residual, init="cutskip", init_args=dict(alpha=1.0)).double()
    with torch.no_grad():  # give the norms weights other than 1, so the test sees them
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    x = tokens()
    state = {k: v.detach() for k, v in model.state_dict().items()}
    with torch.no_grad():
        got = model(x, explicit=explicit)
    want = reference_logits(state, x, TINY["depth"], TINY["num_heads"], residual)
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


# ---------------------------------------------------------------- the loss

def test_the_loss_is_the_mean_next_token_negative_log_likelihood():
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(3, 7, 11, generator=gen, dtype=torch.float64)
    labels = torch.randint(0, 11, (3, 7), generator=gen)
    terms = []
    for b in range(3):
        for t in range(6):  # position t predicts label t + 1; the last position predicts nothing
            row = logits[b, t]
            log_softmax = row - torch.log(torch.exp(row - row.max()).sum()) - row.max()
            terms.append(-log_softmax[labels[b, t + 1]])
    want = torch.stack(terms).mean()
    torch.testing.assert_close(next_token_loss(logits, labels).double(), want, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(-next_token_log_probs(logits, labels).mean().double(), want, atol=1e-6, rtol=1e-6)


def test_the_loss_skips_ignored_labels_and_starts_near_log_vocabulary():
    gen = torch.Generator().manual_seed(5)
    logits = torch.randn(2, 6, 9, generator=gen)
    labels = torch.randint(0, 9, (2, 6), generator=gen)
    masked = labels.clone()
    masked[0, 3:] = -100
    keep = masked[:, 1:] != -100
    want = -next_token_log_probs(logits, labels)[keep].mean()
    torch.testing.assert_close(next_token_loss(logits, masked), want)
    model = tiny()  # fla's N(0, 0.02^2) init: nearly uniform predictions
    with torch.no_grad():
        loss = next_token_loss(model(tokens()), tokens())
    assert abs(loss.item() - math.log(50)) < 0.05


# ---------------------------------------------------------------- initialisation

def test_cutskip_value_output_swiglu_and_query_key_properties():
    from skipless.models import LM_CUTSKIP_DEFAULTS
    from skipless.models.init import paper_matrices

    model = tiny("skipless", init="cutskip", init_args=dict(alpha=1.0, beta=0.5, c=3.0))
    d, dh, hidden = 32, 8, 48
    for block in model.blocks:
        m = paper_matrices(block.attn)
        s = torch.linalg.svdvals((m["V"] @ m["O"]).double())
        torch.testing.assert_close(s, torch.full_like(s, 9.0), rtol=1e-5, atol=0)  # c^2
        for h in range(4):
            prod = m["Q"][:, h * dh:(h + 1) * dh].double() @ m["K"][:, h * dh:(h + 1) * dh].double().T
            assert torch.linalg.matrix_rank(prod).item() == dh
        g, u, down = (lin.weight.double() for lin in (block.mlp.fc1_g, block.mlp.fc1_x, block.mlp.fc2))
        for w in (g, u):  # (hidden, d): W^T W = (hidden / d) I
            torch.testing.assert_close(w.T @ w, hidden / d * torch.eye(d, dtype=torch.float64), atol=1e-5, rtol=0)
        torch.testing.assert_close(down @ down.T, torch.eye(d, dtype=torch.float64), atol=1e-5, rtol=0)
    assert model.skipless_args["init_args"] == dict(alpha=1.0, beta=0.5, c=3.0, qk=LM_CUTSKIP_DEFAULTS["qk"])


def test_lm_cutskip_defaults_are_the_seeds_alpha_and_beta_and_qk_is_passed_through():
    from skipless.models import LM_CUTSKIP_DEFAULTS

    assert (LM_CUTSKIP_DEFAULTS["alpha"], LM_CUTSKIP_DEFAULTS["beta"], LM_CUTSKIP_DEFAULTS["c"]) == (0.0, 0.5, 3.0)
    with pytest.raises(ModelArgumentError, match="qk='nope'"):
        create_causal_lm("lm_demo", init="cutskip", init_args=dict(qk="nope"), **TINY)


def test_fla_init_draws_weights_at_std_0_02_and_norms_at_one():
    torch.manual_seed(0)
    model = create_causal_lm("lm_demo", embed_dim=64, depth=2, num_heads=4, mlp_hidden=128, vocab_size=512)
    assert abs(model.embed.weight.std().item() - 0.02) < 0.001
    assert abs(model.blocks[0].mlp.fc1_g.weight.std().item() - 0.02) < 0.001
    assert (model.blocks[1].norm2.weight == 1).all() and (model.norm.weight == 1).all()


def test_the_decayed_mode_zeroes_the_output_projections_and_takes_its_gains():
    model = tiny("decayed", alpha_min=0.5)
    for block in model.blocks:
        assert (block.attn.proj.weight == 0).all() and (block.mlp.fc2.weight == 0).all()
    torch.testing.assert_close(model.blocks[1].shortcut_gains, torch.tensor([1 - 2 / 3 * 0.5, 0.5]))


# ---------------------------------------------------------------- save and restore

def test_a_saved_lm_is_rebuilt_from_its_arguments_and_loads_strictly(tmp_path):
    model = tiny("skipless", init="cutskip", init_args=dict(alpha=1.0))
    path = save_backbone(tmp_path / "backbone.pt", model)
    loaded = load_backbone(path)
    assert isinstance(loaded, CausalLM) and loaded.skipless_args == model.skipless_args
    assert loaded.skipless_args["family"] == "lm"
    x = tokens()
    with torch.no_grad():
        torch.testing.assert_close(loaded.eval()(x), model(x), atol=0, rtol=0)


def test_an_lm_file_of_another_shape_and_an_lm_given_to_an_image_evaluator_are_refused(tmp_path):
    from skipless.models.backbone_items import resolve_backbones

    model = tiny()
    payload_path = save_backbone(tmp_path / "backbone.pt", model)
    payload = torch.load(payload_path, weights_only=True)
    payload["args"]["mlp_hidden"] = 40
    torch.save(payload, tmp_path / "other.pt")
    with pytest.raises(BackboneLoadError, match="shape mismatches"):
        load_backbone(tmp_path / "other.pt")
    with pytest.raises(BackboneLoadError, match="model.family=lm"):
        resolve_backbones(str(payload_path))


def test_the_random_floor_of_an_lm_is_an_lm_of_the_same_arguments():
    from skipless.models.backbone_items import BackboneSpec, spec_model

    args = tiny("skipless").skipless_args
    floor = spec_model(BackboneSpec("random", None, None, dict(args), "random"), seed=0)
    assert isinstance(floor, CausalLM) and floor.skipless_args == args


def test_the_rmsnorm_computes_in_float32_and_takes_a_bf16_input_without_the_fused_kernels_dtype_warning():
    """Under bf16 autocast a block's input is bf16 and the norm's weight float32: the norm is computed in float32
    (as fla's) and returned in bf16; in float32 it is nn.RMSNorm itself."""
    import warnings

    from skipless.models.block import rms_norm

    torch.manual_seed(0)
    norm = rms_norm(64)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 5, 64) * 40
    plain = torch.nn.RMSNorm(64, eps=norm.eps)
    plain.load_state_dict(norm.state_dict())
    torch.testing.assert_close(norm(x), plain(x), rtol=0, atol=0)
    low = x.bfloat16()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = norm(low)
    ms = low.double().pow(2).mean(-1, keepdim=True)
    want = (low.double() / (ms + norm.eps).sqrt() * norm.weight.double()).bfloat16()
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), want.double(), rtol=2 ** -7, atol=0)
