"""Seeds 003 (Props. 4.1-4.2) and 004 (Thm 2.2) checked numerically (skipless/analysis/attention_theory.py):
the bounds against dense SVDs, the kernel spectra through the suite's own attention modules."""
import pytest
import torch

from skipless.analysis.attention_theory import (attention_stack_spectra, kappa, orthogonal_value_output,
                                                prop41_terms, prop42_terms)
from skipless.models import create_vit


def test_kappa_is_the_ratio_of_extreme_singular_values():
    assert kappa(torch.diag(torch.tensor([4.0, 2.0, 0.5]))) == pytest.approx(8.0)
    assert kappa(torch.tensor([[3.0, 0.0, 0.0], [0.0, 1.0, 0.0]])) == pytest.approx(3.0)  # 2 x 3: its 2 values


def test_prop_4_1_bound_holds_on_every_draw_but_c_is_far_from_unity():
    g = torch.Generator().manual_seed(0)
    rows = [prop41_terms(24, 8, g) for _ in range(40)]
    assert all(r["left"] <= r["right"] * (1 + 1e-9) for r in rows)
    assert sorted(r["C"] for r in rows)[20] > 100  # "statistically close to unity" does not hold: kappa(W)^3


def test_prop_4_2_the_skip_improves_conditioning_at_init_scale_not_at_unit_weights():
    g = torch.Generator().manual_seed(0)
    small = [prop42_terms(48, 16, 0.02, g) for _ in range(20)]
    assert all(r["with_skip"] < r["without_skip"] / 10 for r in small)
    unit = [prop42_terms(48, 16, 1.0, g) for _ in range(20)]
    assert sum(r["with_skip"] < r["without_skip"] / 10 for r in unit) < 10


def _stack(attention: str, depth: int = 4):
    g = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    model = create_vit("vit_tiny", depth=depth, attention=attention, residual="skipless", num_heads=1, norm="none",
                       final_norm=False, img_size=32)
    attentions = [block.attn for block in model.blocks]
    for attn in attentions:
        orthogonal_value_output(attn, g)
    return attentions, torch.randn(12, model.embed_dim, generator=g)


def test_thm_2_2_an_osa_only_skipless_stack_keeps_the_kernel_spectrum():
    attentions, x = _stack("osa")
    spectra = attention_stack_spectra(attentions, x)
    for later in spectra[1:]:
        torch.testing.assert_close(later, spectra[0], rtol=1e-4, atol=1e-3)


def test_the_same_stack_with_softmax_attention_loses_rank():
    attentions, x = _stack("softmax")
    spectra = attention_stack_spectra(attentions, x)
    ranks = [int((s > 1e-6 * s[0]).sum()) for s in spectra]
    assert ranks[0] == 12 and ranks[-1] == 1
