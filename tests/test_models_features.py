"""The feature API against independent computations."""
import pytest
import torch

from skipless.models import FeatureRequestError, create_vit, extract_features, patch_features, patch_grid, resolve_layers


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return create_vit("vit_tiny", residual="skipless", init="cutskip", depth=4).eval()


def test_block_outputs_match_timm_forward_intermediates(model):
    x = torch.randn(2, 3, 48, 64)
    feats = extract_features(model, x, layers="all", kinds=("out",))
    with torch.no_grad():
        ref = model.forward_intermediates(x, indices=[0, 1, 2, 3], norm=False, output_fmt="NLC",
                                          intermediates_only=True, return_prefix_tokens=False)
    for i, r in enumerate(ref):
        # timm returns patch tokens only; ours keeps the CLS token first
        torch.testing.assert_close(feats[("out", i)][:, 1:], r)


def test_keys_queries_values_match_a_direct_projection(model):
    x = torch.randn(1, 3, 32, 32)
    feats = extract_features(model, x, layers=[2], kinds=("q", "k", "v", "out"))
    h = extract_features(model, x, layers=[1], kinds=("out",))[("out", 1)]
    qkv = model.blocks[2].attn.qkv(model.blocks[2].norm1(h))
    d = model.embed_dim
    for i, kind in enumerate("qkv"):
        torch.testing.assert_close(feats[(kind, 2)], qkv[..., i * d:(i + 1) * d])


def test_attention_probabilities_sum_to_one_and_drive_the_output(model):
    x = torch.randn(1, 3, 32, 48)
    feats = extract_features(model, x, layers=[-1], kinds=("attn", "v"))
    a = feats[("attn", 3)]
    assert a.shape == (1, 3, 7, 7)
    torch.testing.assert_close(a.sum(-1), torch.ones(1, 3, 7))
    # capture is switched off afterwards
    assert all(not b.attn.capture and not b.attn.captured for b in model.blocks)


def test_negative_and_out_of_range_layers(model):
    x = torch.randn(1, 3, 32, 32)
    assert set(extract_features(model, x, layers=[-1, -2])) == {("out", 2), ("out", 3)}
    with pytest.raises(ValueError, match="out of range"):
        extract_features(model, x, layers=[4])
    with pytest.raises(ValueError, match="unknown feature kinds"):
        extract_features(model, x, kinds=("keys",))


def test_patch_grid_rejects_sizes_off_the_patch_grid(model):
    assert patch_grid(model, 48, 64) == (3, 4)
    with pytest.raises(ValueError, match="multiple of the patch size"):
        patch_grid(model, 50, 64)


@pytest.mark.parametrize("pool", ["token", "avg"])
def test_norm_applies_the_backbones_final_layer_norm_for_either_pool(pool):
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="skip", depth=2, global_pool=pool).eval()
    final = model.norm if pool == "token" else model.fc_norm
    assert isinstance(final, torch.nn.LayerNorm)  # timm moves the LayerNorm after pooling for avg
    with torch.no_grad():
        final.weight.uniform_(0.5, 2.0)  # not the identity at init, so a skipped norm shows
        final.bias.normal_()
    x = torch.randn(2, 3, 32, 32)
    raw = extract_features(model, x, [1])[("out", 1)]
    normed = extract_features(model, x, [1], norm=True)[("out", 1)]
    torch.testing.assert_close(normed, torch.nn.functional.layer_norm(raw, (raw.shape[-1],), final.weight,
                                                                      final.bias, final.eps))


def test_layers_are_all_an_index_or_a_list():
    assert resolve_layers("all", 3) == [0, 1, 2]
    assert resolve_layers(-1, 12) == [11] and resolve_layers([5, -1, 5], 12) == [5, 11]
    with pytest.raises(FeatureRequestError, match="'all', a block index"):
        resolve_layers("last", 12)
    with pytest.raises(FeatureRequestError, match="block 12 is out of range"):
        resolve_layers([0, 12], 12)


def test_patch_features_are_grids_without_prefix_tokens(model):
    """Against timm's forward_intermediates (NCHW, prefix dropped) and with registers: prefix slicing is exact."""
    x = torch.randn(2, 3, 48, 64)
    feats = patch_features(model, x, layers=[-1, 1])
    assert list(feats) == [1, 3] and feats[3].shape == (2, 3, 4, model.embed_dim)
    with torch.no_grad():
        ref = model.forward_intermediates(x, indices=[1, 3], norm=False, output_fmt="NCHW", intermediates_only=True)
    for r, b in zip(ref, (1, 3)):
        torch.testing.assert_close(feats[b], r.permute(0, 2, 3, 1))
    keys = patch_features(model, x, layers=2, kind="k")[2]
    torch.testing.assert_close(keys.flatten(1, 2), extract_features(model, x, [2], ("k",))[("k", 2)][:, 1:])
    torch.manual_seed(0)
    registers = create_vit("vit_tiny", residual="skip", depth=1, reg_tokens=4, no_embed_class=True).eval()
    assert registers.num_prefix_tokens == 5
    out = patch_features(registers, x, 0)[0]
    torch.testing.assert_close(out.flatten(1, 2), extract_features(registers, x, [0])[("out", 0)][:, 5:])
    with pytest.raises(FeatureRequestError, match="multiple of the patch size"):
        patch_features(model, torch.randn(1, 3, 40, 40))
