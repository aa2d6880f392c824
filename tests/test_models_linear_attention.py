"""Linear self-attention (Ji et al., "Always Skip Attention", Eq. 2 with a linear eta, Table 2):
``(1/k) Q K^T V`` per head, recomputed by hand from timm's fused weights; its fast path equals its
explicit one; ``k`` is the key that scales it."""
import pytest
import torch

from skipless.models import create_vit, extract_features, use_explicit_attention
from skipless.models.attention import LinearAttention


def _by_hand(attn, x, k):
    """proj(concat_h (1/k) Q_h K_h^T V_h), the weights read off qkv's rows [Q; K; V], head-major."""
    d, h = x.shape[-1], attn.num_heads
    dh = d // h
    q, kk, v = (x @ attn.qkv.weight[i * d:(i + 1) * d].T + attn.qkv.bias[i * d:(i + 1) * d] for i in range(3))
    heads = []
    for j in range(h):
        s = slice(j * dh, (j + 1) * dh)
        heads.append(q[..., s] @ kk[..., s].transpose(-2, -1) @ v[..., s] / k)
    return attn.proj(torch.cat(heads, dim=-1))


@pytest.mark.parametrize("k", [16.0, 4.0])
def test_linear_attention_is_q_kt_v_over_k(k):
    torch.manual_seed(0)
    model = create_vit("vit_tiny", depth=1, attention="linear", attention_args={"k": k}).double()
    attn = model.blocks[0].attn
    assert isinstance(attn, LinearAttention) and attn.divisor == k
    x = torch.randn(2, 7, 192, dtype=torch.float64)
    with torch.no_grad():
        fast = attn(x)
        with use_explicit_attention(model):
            explicit = attn(x)
    expected = _by_hand(attn, x, k)
    torch.testing.assert_close(fast, expected)
    torch.testing.assert_close(explicit, expected)


def test_captured_attention_is_the_unnormalised_q_kt_over_k():
    torch.manual_seed(0)
    model = create_vit("vit_tiny", depth=1, attention="linear").eval()
    x = torch.randn(1, 3, 32, 32)
    feats = extract_features(model, x, layers=[0], kinds=("q", "k", "attn"))
    heads = lambda t: t.reshape(1, 5, 3, 64).transpose(1, 2)  # (B, 1+N, D) -> (B, heads, 1+N, d_h)
    q, k, a = heads(feats[("q", 0)]), heads(feats[("k", 0)]), feats[("attn", 0)]
    torch.testing.assert_close(a, q @ k.transpose(-2, -1) / 16.0)
    assert not torch.allclose(a.sum(-1), torch.ones_like(a.sum(-1)))  # no softmax


def test_the_default_k_is_the_papers_and_a_softmax_argument_is_refused():
    assert create_vit("vit_tiny", depth=1, attention="linear").skipless_args["attention_args"] == {"k": 16.0}
    with pytest.raises(ValueError, match=r"do not apply to attention=softmax; it takes no arguments"):
        create_vit("vit_tiny", depth=1, attention_args={"k": 16})
