"""The ViT family: timm equivalence, residual modes, the attention paths, the factory's errors."""
import pytest
import timm
import torch

from skipless.models import (
    RESIDUAL_MODES, create_vit, decayed_gains, drop_path_rates, use_explicit_attention,
)


def test_timm_state_dict_loads_into_skip_model_with_identical_outputs():
    torch.manual_seed(0)
    ref = timm.create_model("vit_small_patch16_224", num_classes=0, pretrained=False).eval()
    ours = create_vit("vit_small", residual="skip").eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        diff = (ref(x) - ours(x)).abs().max().item()
    assert diff < 1e-5


@pytest.mark.parametrize("residual", RESIDUAL_MODES)
def test_residual_wiring_with_zeroed_branches(residual):
    """With attn.proj and mlp.fc2 zeroed, each branch outputs 0 and only shortcuts carry x."""
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual=residual, depth=2, alpha_min=0.5).eval()
    block = model.blocks[1]
    with torch.no_grad():
        for lin in (block.attn.proj, block.mlp.fc2):
            lin.weight.zero_()
            lin.bias.zero_()
        x = torch.randn(2, 5, model.embed_dim)
        y = block(x)
    g1, g2 = decayed_gains(2, 0.5)[1].tolist()
    expected = {
        "skip": x,
        "skipless": torch.zeros_like(x),
        "decayed": x * g1 * g2,
        "attn-skip": torch.zeros_like(x),  # x + 0, then no shortcut around the MLP
        "mlp-skip": torch.zeros_like(x),  # no shortcut around attention, then 0 + 0
        "scaled-branch": x,  # x + sqrt(.5) 0, twice
        "scaled-sum": x * 0.5,  # sqrt(.5) (x + 0), twice
    }[residual]
    torch.testing.assert_close(y, expected, atol=1e-6, rtol=0)


def test_attn_skip_keeps_input_when_only_mlp_has_no_shortcut_but_mlp_is_identity_free():
    """attn-skip: a zeroed attention branch passes x to the MLP; mlp-skip: the MLP shortcut passes it on."""
    torch.manual_seed(0)
    x = torch.randn(1, 4, 192)
    m = create_vit("vit_tiny", residual="attn-skip", depth=1).eval()
    with torch.no_grad():
        m.blocks[0].attn.proj.weight.zero_()
        m.blocks[0].attn.proj.bias.zero_()
        expected = m.blocks[0].mlp(m.blocks[0].norm2(x))
        torch.testing.assert_close(m.blocks[0](x), expected)
    m = create_vit("vit_tiny", residual="mlp-skip", depth=1).eval()
    with torch.no_grad():
        a = m.blocks[0].attn(m.blocks[0].norm1(x))
        expected = a + m.blocks[0].mlp(m.blocks[0].norm2(a))
        torch.testing.assert_close(m.blocks[0](x), expected)


def test_decayed_gains_fall_linearly_from_one_to_alpha_min():
    g = decayed_gains(12, 0.6).flatten()
    assert g.shape == (24,)
    assert g[0].item() == pytest.approx(1.0)
    assert g[-1].item() == pytest.approx(0.6)
    steps = g[1:] - g[:-1]
    torch.testing.assert_close(steps, torch.full_like(steps, -0.4 / 23))


def test_decayed_model_starts_as_scaled_shortcut():
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="decayed", depth=3, alpha_min=0.6).eval()
    for blk in model.blocks:
        assert blk.attn.proj.weight.abs().sum() == 0 and blk.mlp.fc2.weight.abs().sum() == 0
    x = torch.randn(2, 7, 192)
    with torch.no_grad():
        h = x
        for blk in model.blocks:
            h = blk(h)
    total = decayed_gains(3, 0.6).prod()
    torch.testing.assert_close(h, x * total)


def test_drop_path_is_forced_off_where_there_is_no_shortcut():
    rates = {r: drop_path_rates(create_vit("vit_tiny", residual=r, depth=2, drop_path_rate=0.2))
             for r in ("skip", "skipless", "attn-skip", "mlp-skip")}
    assert rates["skip"][1] == pytest.approx((0.2, 0.2))
    assert rates["skipless"] == [(0.0, 0.0), (0.0, 0.0)]
    assert rates["attn-skip"][1] == pytest.approx((0.2, 0.0))
    assert rates["mlp-skip"][1] == pytest.approx((0.0, 0.2))


def test_explicit_and_fused_attention_give_the_same_outputs():
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="skipless", init="cutskip", depth=3).eval()
    x = torch.randn(2, 3, 64, 48)
    with torch.no_grad():
        fused = model(x)
        with use_explicit_attention(model):
            assert all(b.attn.explicit for b in model.blocks)
            explicit = model(x)
    assert not any(b.attn.explicit for b in model.blocks)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_dynamic_image_size_accepts_global_and_local_crops():
    model = create_vit("vit_tiny", depth=1)
    for size in (224, 96, 48):
        assert model(torch.randn(1, 3, size, size)).shape == (1, 192)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(arch="vit_huge"), "vit_tiny, vit_small, vit_base"),
    (dict(residual="none"), "skip, skipless, decayed, attn-skip, mlp-skip"),
    (dict(init="lecun"), "timm, cutskip, xavier"),
    (dict(attention="performer"), "softmax, linear"),
    (dict(pos_embed_interp="nearest"), "dino, timm"),
    (dict(norm="rmsnorm"), "layernorm, none"),
    (dict(token_graying={"method": "fft"}), "none, svd, dct"),
])
def test_unknown_names_list_the_valid_choices(kwargs, needle):
    arch = kwargs.pop("arch", "vit_tiny")
    with pytest.raises(ValueError, match=needle):
        create_vit(arch, **kwargs)


def test_model_remembers_its_arguments():
    m = create_vit("vit_tiny", residual="decayed", alpha_min=0.7, depth=2)
    assert m.skipless_args["residual"] == "decayed"
    assert m.skipless_args["alpha_min"] == 0.7 and m.skipless_args["depth"] == 2


# --- position-embedding resample (pos_embed.py) ---------------------------------------------------

@pytest.mark.parametrize("new_grid", [(6, 6), (10, 14), (30, 30), (7, 28), (14, 14)])
def test_dino_resample_follows_dinos_interpolate_pos_encoding(new_grid):
    """Against dino_reference (DINO's rule written independently, from pixel sizes)."""
    from dino_reference import interpolate_pos_encoding
    from skipless.models.pos_embed import resample_pos_embed
    pos = torch.randn(1, 1 + 14 * 14, 8)
    ours = resample_pos_embed(pos, new_grid, (14, 14), num_prefix_tokens=1, mode="dino")
    rows, cols = new_grid
    ref = interpolate_pos_encoding({"pos_embed": pos}, rows * cols, rows * 16, cols * 16, patch=16)
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)


def test_timm_mode_is_timms_own_resample_at_every_size():
    torch.manual_seed(0)
    ref = timm.create_model("vit_tiny_patch16_224", num_classes=0, dynamic_img_size=True).eval()
    ours = create_vit("vit_tiny", pos_embed_interp="timm").eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(1, 3, 96, 160)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)
        ours.pos_embed_interp = "dino"  # and the two rules do differ off the native grid
        assert (ours(x) - ref(x)).abs().max() > 1e-3


def test_new_models_resample_as_dino_and_remember_it():
    m = create_vit("vit_tiny", depth=1)
    assert m.pos_embed_interp == "dino" and m.skipless_args["pos_embed_interp"] == "dino"
    assert create_vit("vit_tiny", depth=1, pos_embed_interp="timm").skipless_args["pos_embed_interp"] == "timm"
