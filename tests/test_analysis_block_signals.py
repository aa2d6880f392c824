"""Per-block training signals (skipless.analysis.block_signals) against direct computations."""
import math

import numpy as np
import pytest
import torch

from skipless.analysis.block_signals import (attention_signals, gradient_norms, mean_pairwise_cosine,
                                             parameter_snapshot, update_ratios)
from skipless.models import create_vit


def small_vit(residual="skip", **kw):
    torch.manual_seed(0)
    return create_vit("vit_tiny", residual=residual, depth=2, img_size=32, patch_size=8, **kw)


def silence_queries_and_keys(block):
    """Zero the q and k projections: every logit is 0, so the attention is uniform."""
    d = block.attn.qkv.in_features
    with torch.no_grad():
        block.attn.qkv.weight[: 2 * d] = 0
        if block.attn.qkv.bias is not None:
            block.attn.qkv.bias[: 2 * d] = 0


def numpy_signals(model, images):
    """Attention rows recomputed in numpy from each attention module's input, cosines from block outputs."""
    inputs, outputs = {}, {}
    handles = []
    for i, blk in enumerate(model.blocks):
        handles.append(blk.attn.register_forward_pre_hook(lambda m, a, i=i: inputs.__setitem__(i, a[0].detach())))
        handles.append(blk.register_forward_hook(lambda m, a, o, i=i: outputs.__setitem__(i, o.detach())))
    with torch.no_grad():
        model.eval()(images)
    for h in handles:
        h.remove()
    result = {}
    for i, blk in enumerate(model.blocks):
        attn = blk.attn
        u = inputs[i].double().numpy()
        w = attn.qkv.weight.detach().double().numpy()
        b = attn.qkv.bias.detach().double().numpy()
        qkv = u @ w.T + b
        B, n, _ = u.shape
        h, dh = attn.num_heads, attn.head_dim
        q = qkv[..., : h * dh].reshape(B, n, h, dh).transpose(0, 2, 1, 3)
        k = qkv[..., h * dh: 2 * h * dh].reshape(B, n, h, dh).transpose(0, 2, 1, 3)
        logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(dh)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        entropy = float(np.mean(-(p * np.log(p)).sum(-1)))
        diagonal = float(np.mean(np.diagonal(p, axis1=-2, axis2=-1)))
        cosines = []
        for tokens in outputs[i][:, 1:].double().numpy():
            unit = tokens / np.linalg.norm(tokens, axis=1, keepdims=True)
            c = unit @ unit.T
            m = len(c)
            cosines.append((c.sum() - np.trace(c)) / (m * (m - 1)))
        norm = float(np.linalg.norm(outputs[i][:, 1:].double().numpy(), axis=-1).mean())
        result[i] = {"attention_entropy": entropy, "attention_diagonal": diagonal, "token_cosine": float(np.mean(cosines)),
                     "token_norm": norm}
    return result


def test_attention_signals_match_numpy():
    model = small_vit()
    images = torch.randn(3, 3, 32, 32)
    got = attention_signals(model, images)
    expected = numpy_signals(model, images)
    assert sorted(got) == [0, 1]
    for i in expected:
        assert got[i]["tokens"] == 17
        for key, value in expected[i].items():
            assert got[i][key] == pytest.approx(value, rel=1e-5, abs=1e-7), (i, key)


def test_uniform_attention_and_collapsed_tokens():
    model = small_vit("skipless")
    silence_queries_and_keys(model.blocks[0])
    got = attention_signals(model, torch.randn(2, 3, 32, 32))[0]
    n = got["tokens"]
    assert got["attention_entropy"] == pytest.approx(math.log(n), rel=1e-6)
    assert got["attention_diagonal"] == pytest.approx(1 / n, rel=1e-6)
    # without a skip every token of the block is the same average of values, sent through the same MLP
    assert got["token_cosine"] == pytest.approx(1.0, abs=1e-6)


def test_attention_signals_restore_mode_and_run_without_grad():
    model = small_vit(drop_path_rate=0.5).train()
    model.blocks[1].mlp.eval()
    seen = []
    handle = model.blocks[0].register_forward_hook(lambda m, a, o: seen.append((m.training, torch.is_grad_enabled())))
    first = attention_signals(model, torch.ones(2, 3, 32, 32))
    handle.remove()
    assert seen == [(False, False)]
    assert model.training and model.blocks[0].training and not model.blocks[1].mlp.training
    assert attention_signals(model, torch.ones(2, 3, 32, 32)) == first
    assert all(not m.capture for m in (b.attn for b in model.blocks))


def loss_backward(model):
    model.zero_grad()
    model(torch.randn(2, 3, 32, 32)).square().mean().backward()


def test_gradient_norms_match_total_norm_and_skip_blocks_without_grads():
    model = small_vit()
    assert gradient_norms(model) == {}
    for p in model.blocks[0].parameters():
        p.requires_grad_(False)
    loss_backward(model)
    got = gradient_norms(model)
    assert list(got) == [1]
    grads = [p.grad for p in model.blocks[1].parameters()]
    assert got[1] == pytest.approx(float(torch.nn.utils.get_total_norm(grads)), rel=1e-5)
    flat = np.concatenate([g.double().numpy().ravel() for g in grads])
    assert got[1] == pytest.approx(float(np.linalg.norm(flat)), rel=1e-9)


def test_update_ratio_after_a_manual_sgd_step():
    model = small_vit()
    loss_backward(model)
    before = {i: np.concatenate([p.detach().double().numpy().ravel() for p in b.parameters()])
              for i, b in enumerate(model.blocks)}
    steps = {i: np.concatenate([p.grad.double().numpy().ravel() for p in b.parameters()])
             for i, b in enumerate(model.blocks)}
    snapshot = parameter_snapshot(model)
    lr = 0.1
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    got = update_ratios(model, snapshot)
    assert sorted(got) == [0, 1]
    for i in got:
        assert got[i] == pytest.approx(lr * np.linalg.norm(steps[i]) / np.linalg.norm(before[i]), rel=1e-4)
    assert update_ratios(model, parameter_snapshot(model)) == {0: 0.0, 1: 0.0}


@pytest.mark.parametrize("attention", ["linear", "osa"])
def test_attention_that_is_not_a_distribution_has_no_entropy_and_the_other_signals(attention):
    torch.manual_seed(0)
    model = create_vit("vit_tiny", depth=1, attention=attention, init="osa" if attention == "osa" else "timm")
    got = attention_signals(model, torch.randn(2, 3, 32, 32))[0]
    assert "attention_entropy" not in got
    assert math.isfinite(got["attention_diagonal"]) and math.isfinite(got["token_cosine"])


@pytest.mark.parametrize("scale", [1.0, 1e-20, 1e20])
def test_a_token_is_zero_relative_to_the_largest_of_its_image_so_cosines_do_not_depend_on_scale(scale):
    """Two equal tokens and a third along them: at 1e-13 of their norm (far above d * eps) it has their
    direction, every cosine is 1; at 1e-17 (below 4 * eps) it is rounding-level, numerically zero, and
    only the equal pair counts: 2 of the 6 ordered pairs."""
    e1 = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    for tiny, expected in ((1e-13, 1.0), (1e-17, 1 / 3), (0.0, 1 / 3)):
        tokens = torch.stack([e1, e1, tiny * e1])[None] * scale
        assert mean_pairwise_cosine(tokens) == pytest.approx(expected, rel=1e-12), tiny
