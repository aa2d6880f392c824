"""The sub-block decomposition the conditioning diagnostics read (skipless.analysis.sub_blocks)."""
import pytest
import torch

from skipless.analysis.sub_blocks import embed_tokens, has_finite_weights, shortcut_gains, trace_block, traced_blocks
from skipless.models import RESIDUAL_MODES, create_vit


@pytest.mark.parametrize("residual", RESIDUAL_MODES)
def test_trace_reproduces_the_block_forward(residual):
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual=residual, depth=3).eval()
    x = embed_tokens(model, torch.randn(2, 3, 32, 32))
    for block in model.blocks:
        t = trace_block(block, x)
        y = block(x)
        # bit for bit, except Table 3b's scaled-sum: s (x + f) and s x + s f round differently
        exact = {} if residual == "scaled-sum" else {"rtol": 0, "atol": 0}
        torch.testing.assert_close(t.out, y, **exact)
        torch.testing.assert_close(t.u_attn, block.norm1(x))
        g_a, _ = shortcut_gains(block)
        torch.testing.assert_close(t.mid, g_a * x + t.attn)
        x = y


def test_shortcut_gains_per_mode():
    gains = {r: [shortcut_gains(b) for b in create_vit("vit_tiny", residual=r, depth=2).blocks] for r in RESIDUAL_MODES}
    assert gains["skip"] == [(1.0, 1.0)] * 2
    assert gains["skipless"] == [(0.0, 0.0)] * 2
    assert gains["attn-skip"] == [(1.0, 0.0)] * 2
    assert gains["mlp-skip"] == [(0.0, 1.0)] * 2
    assert gains["scaled-branch"] == [(1.0, 1.0)] * 2 and gains["scaled-sum"] == [(0.5 ** 0.5, 0.5 ** 0.5)] * 2
    decayed = [g for pair in gains["decayed"] for g in pair]
    assert decayed[0] == 1.0 and decayed[-1] == pytest.approx(0.6) and decayed == sorted(decayed, reverse=True)


def test_traced_blocks_yield_the_wanted_blocks_of_one_forward():
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="skipless", depth=4).eval()
    x = embed_tokens(model, torch.randn(1, 3, 32, 32))
    found = list(traced_blocks(model, x, [2, 0]))
    assert [i for i, _, _ in found] == [0, 2] and found[1][1] is model.blocks[2]
    y = model.blocks[1](model.blocks[0](x))
    torch.testing.assert_close(found[1][2].x, y)
    torch.testing.assert_close(found[1][2].out, model.blocks[2](y))


def test_finite_weights_check():
    model = create_vit("vit_tiny", depth=1)
    assert has_finite_weights(model)
    with torch.no_grad():
        model.blocks[0].norm1.bias[3] = float("inf")
    assert not has_finite_weights(model)
