"""eval/pca/maps.py: PCA against numpy, the sign rule, min-max scaling, masking, shapes."""
import numpy as np
import pytest
import torch

from skipless.eval.pca.maps import aligned_signs, minmax, pca_rows, principal_projections, rgb_map, skew_signs


def _feats(n=48, c=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    scales = torch.linspace(3.0, 0.2, c)  # distinct variances: well-defined components
    return torch.randn(n, c, generator=gen) * scales + torch.randn(c, generator=gen)


def test_projections_are_the_top_principal_components():
    f = _feats()
    proj = principal_projections(f)
    x = f.double().numpy() - f.double().numpy().mean(0)
    values, vectors = np.linalg.eigh(np.cov(x.T))
    expected = x @ vectors[:, ::-1][:, :3]
    for k in range(3):
        assert abs(abs(np.corrcoef(proj[:, k], expected[:, k])[0, 1]) - 1) < 1e-9
    assert np.all(np.diff(proj.var(0)) < 0)
    assert principal_projections(torch.randn(5, 2)).shape == (5, 3)  # fewer channels than components


def test_skew_rule_makes_the_long_tail_positive():
    col = np.array([0.0, 0.1, -0.1, 0.05, 3.0])
    assert skew_signs(col[:, None])[0] == 1 and skew_signs(-col[:, None])[0] == -1


def test_alignment_follows_the_reference_column_by_column():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(30, 3))
    proj = ref * np.array([-2.0, 0.5, -1.0]) + 0.01 * rng.normal(size=(30, 3))
    np.testing.assert_array_equal(aligned_signs(proj, ref), [-1, 1, -1])


def test_colours_are_stable_when_a_blocks_features_flip_sign():
    blocks = [_feats(seed=s) for s in range(4)]
    grid = (6, 8)
    maps = pca_rows(blocks, grid)
    flipped = pca_rows([blocks[0], -blocks[1], blocks[2], -blocks[3]], grid)
    all_flipped = pca_rows([-b for b in blocks], grid)
    for a, b, c in zip(maps, flipped, all_flipped):
        np.testing.assert_allclose(a, b, atol=1e-9)
        np.testing.assert_allclose(a, c, atol=1e-9)


def test_a_slowly_changing_block_keeps_its_colours():
    base = _feats(seed=1)
    drift = base + 0.05 * _feats(seed=2)
    maps = pca_rows([base, drift], (6, 8))
    assert np.abs(maps[0] - maps[1]).mean() < 0.05


def test_minmax_spans_zero_to_one_per_channel_and_constant_is_zero():
    proj = np.stack([np.linspace(-3, 5, 10), np.full(10, 2.0), np.arange(10.0) ** 2], axis=1)
    out = minmax(proj)
    np.testing.assert_allclose(out.min(0), [0, 0, 0])
    np.testing.assert_allclose(out.max(0), [1, 0, 1])
    keep = np.arange(10) < 5
    part = minmax(proj, keep)
    assert part[keep].min() == 0 and part[keep][:, 0].max() == 1 and part.max() <= 1


def test_masking_blacks_out_background_and_shapes():
    proj = np.zeros((12, 3))
    proj[:4, 0] = 5.0  # foreground: high first component
    proj[:, 1] = np.arange(12)
    rgb = rgb_map(proj, (3, 4), threshold=0.5)
    assert rgb.shape == (3, 4, 3)
    assert np.all(rgb.reshape(12, 3)[4:] == 0) and rgb.reshape(12, 3)[:4, 1].max() == 1
    maps = pca_rows([_feats(n=12)] * 2, (3, 4))
    assert len(maps) == 2 and all(m.shape == (3, 4, 3) and 0 <= m.min() and m.max() <= 1 for m in maps)


def test_collapsed_tokens_give_a_black_map():
    same = torch.ones(12, 8)
    assert np.all(pca_rows([same], (3, 4))[0] == 0)


@pytest.mark.parametrize("threshold", [None, 0.3])
def test_every_pixel_is_a_valid_colour(threshold):
    m = pca_rows([_feats()], (6, 8), threshold)[0]
    assert np.isfinite(m).all() and m.min() >= 0 and m.max() <= 1
