"""The language model's signals at initialisation (``skipless.analysis.lm_signals``, issue 49) against the math
and against an explicit computation in numpy: the self-weight of uniform causal attention is 1/(t+1), identical
tokens have cosine 1 and orthogonal ones 0, and the self-weight the function reads is the diagonal of the causal
softmax of the block's own queries and keys, rotated by RoPE written out here."""
import math

import numpy as np
import pytest
import torch

from skipless.analysis.block_signals import mean_pairwise_cosine
from skipless.analysis.lm_signals import (causal_self_weight, distinct_query_key_heads, lm_init_signals,
                                          self_weight_at, uniform_self_weight)
from skipless.models import create_causal_lm
from skipless.models.init import query_key_matrices, set_query_key_

TINY = dict(embed_dim=32, depth=2, num_heads=4, mlp_hidden=48, vocab_size=50, context=24)  # heads of 8


def tiny(residual="skip", **kwargs):
    torch.manual_seed(0)
    return create_causal_lm("lm_demo", residual=residual, **{**TINY, **kwargs})


def tokens(batch=3, length=20, vocab=50, seed=1):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_uniform_causal_attention_puts_one_over_t_plus_one_on_itself():
    n = 9
    uniform = torch.ones(n, n, dtype=torch.float64).tril()
    uniform = (uniform / uniform.sum(-1, keepdim=True)).expand(2, 3, n, n)
    torch.testing.assert_close(causal_self_weight(uniform), uniform_self_weight(n), rtol=1e-15, atol=0)  # to rounding
    assert uniform_self_weight(4).tolist() == [1.0, 1 / 2, 1 / 3, 1 / 4]
    assert self_weight_at(uniform_self_weight(n), 1) == 1.0 and self_weight_at(uniform_self_weight(n), n) == 1 / n
    with pytest.raises(ValueError, match="no token that sees 10"):
        self_weight_at(uniform_self_weight(n), 10)


@pytest.mark.parametrize("residual", ["skip", "skipless"])
def test_a_model_with_zero_queries_and_keys_attends_uniformly(residual):
    model = tiny(residual)
    for block in model.blocks:
        set_query_key_(block.attn, torch.zeros(32, 32), torch.zeros(32, 32))  # every score 0
    s = lm_init_signals(model, tokens())
    assert len(s.self_weight) == 2 and s.length == 20 and s.sequences == 3
    for curve in s.self_weight:
        torch.testing.assert_close(curve, uniform_self_weight(20), rtol=1e-6, atol=0)


def test_identical_tokens_have_cosine_one_and_orthogonal_ones_zero():
    v = torch.randn(7, dtype=torch.float64)
    assert mean_pairwise_cosine(v.expand(2, 5, 7)) == pytest.approx(1.0, abs=1e-15)
    assert mean_pairwise_cosine(torch.eye(5, dtype=torch.float64)[None]) == 0.0
    assert mean_pairwise_cosine(torch.stack([v, -v])[None]) == pytest.approx(-1.0, abs=1e-15)


def test_a_repeated_token_stays_collapsed_through_every_block_and_one_hot_embeddings_are_orthogonal():
    model = tiny("skipless")
    s = lm_init_signals(model, torch.full((2, 12), 7))  # every position the same token: every block the same output
    assert s.embedding_cosine == pytest.approx(1.0, abs=1e-12)
    assert s.token_cosine == pytest.approx([1.0, 1.0], abs=1e-6)
    with torch.no_grad():
        model.embed.weight.zero_()
        model.embed.weight[:32] = torch.eye(32)
    assert lm_init_signals(model, torch.arange(12)[None]).embedding_cosine == 0.0


def numpy_signals(model, ids, theta=10_000.0):
    """Per block, from each attention's input (a forward pre-hook): q and k from ``qkv.weight`` (rows [Q; K; V],
    head-major), rotated by RoPE written here (pair (i, i + d_h/2) turned by t theta^(-2i/d_h)), the causal
    softmax of q k^T / sqrt(d_h), its diagonal averaged over sequences and heads; cosines and norms of the block
    outputs (a forward hook), all in float64."""
    inputs, outputs, handles = {}, {}, []
    for i, blk in enumerate(model.blocks):
        handles.append(blk.attn.register_forward_pre_hook(lambda m, a, i=i: inputs.__setitem__(i, a[0].detach())))
        handles.append(blk.register_forward_hook(lambda m, a, o, i=i: outputs.__setitem__(i, o.detach())))
    with torch.no_grad():
        model.eval()(ids)
    for h in handles:
        h.remove()
    result = []
    for i, blk in enumerate(model.blocks):
        u = inputs[i].double().numpy()
        w = blk.attn.qkv.weight.detach().double().numpy()
        B, n, d = u.shape
        heads, dh = blk.attn.num_heads, blk.attn.head_dim
        q = (u @ w[:d].T).reshape(B, n, heads, dh).transpose(0, 2, 1, 3)
        k = (u @ w[d:2 * d].T).reshape(B, n, heads, dh).transpose(0, 2, 1, 3)
        half = dh // 2
        angle = np.arange(n)[:, None] * theta ** (-2.0 * np.arange(half) / dh)[None, :]

        def rope(x):
            a, b = x[..., :half], x[..., half:]
            return np.concatenate([a * np.cos(angle) - b * np.sin(angle), b * np.cos(angle) + a * np.sin(angle)], -1)

        logits = rope(q) @ rope(k).transpose(0, 1, 3, 2) / math.sqrt(dh)
        logits = np.where(np.tril(np.ones((n, n), bool)), logits, -np.inf)
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out = outputs[i].double().numpy()
        unit = out / np.linalg.norm(out, axis=-1, keepdims=True)
        c = unit @ unit.transpose(0, 2, 1)
        cosine = float(np.mean((c.sum((1, 2)) - np.trace(c, axis1=1, axis2=2)) / (n * (n - 1))))
        result.append({"self_weight": np.diagonal(p, axis1=-2, axis2=-1).mean((0, 1)), "token_cosine": cosine,
                       "token_norm": float(np.linalg.norm(out, axis=-1).mean())})
    return result


@pytest.mark.parametrize("residual,init", [("skip", "fla"), ("skipless", "cutskip")])
def test_the_self_weight_is_the_diagonal_of_the_blocks_own_causal_softmax(residual, init):
    model = tiny(residual, init=init)
    ids = tokens()
    got = lm_init_signals(model, ids)
    expected = numpy_signals(model, ids)
    for i, e in enumerate(expected):
        np.testing.assert_allclose(got.self_weight[i].numpy(), e["self_weight"], rtol=1e-5, atol=1e-7)
        assert got.token_cosine[i] == pytest.approx(e["token_cosine"], rel=1e-5, abs=1e-7)
        assert got.token_norm[i] == pytest.approx(e["token_norm"], rel=1e-5)
    if init == "cutskip":  # Eq. 11's beta I: the last token puts far more than 1/20 on itself
        assert all(curve[-1] > 2 / 20 for curve in got.self_weight)


def test_the_model_is_left_as_it_was_found():
    model = tiny().train()
    lm_init_signals(model, tokens())
    assert model.training and all(not b.attn.explicit and not b.attn.capture and not b.attn.captured
                                  for b in model.blocks)


def test_distinct_heads_are_counted_by_their_query_and_key_weights():
    model = tiny("skipless", init="cutskip")  # qk=layer at alpha 0: orthogonal heads
    attn = model.blocks[0].attn
    assert distinct_query_key_heads(attn) == 4
    gen = torch.Generator().manual_seed(0)
    wq, wk = query_key_matrices(32, 4, 0.0, 0.5, gen, "layer")
    wq[:, 8:16], wk[:, 8:16] = wq[:, :8], wk[:, :8]  # head 1 a copy of head 0
    set_query_key_(attn, wq, wk)
    assert distinct_query_key_heads(attn) == 3
