"""Effective rank (skipless.analysis.effective_rank): known spectra, and numpy on hooked block outputs."""
import math

import numpy as np
import pytest
import torch

from skipless.analysis.effective_rank import (EffectiveRankError, block_effective_ranks, covariance_eigenvalues,
                                              effective_rank, sample_covariance, spectral_entropy)
from skipless.errors import SkiplessError
from skipless.models import create_vit


def numpy_effective_rank(features):
    """exp of the entropy of the normalised singular values of numpy.cov (rows = samples as variables)."""
    s = np.linalg.svd(np.cov(np.asarray(features, dtype=np.float64)), compute_uv=False)
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def test_covariance_is_numpy_cov_of_the_samples():
    f = torch.randn(5, 7)
    np.testing.assert_allclose(sample_covariance(f).numpy(), np.cov(f.double().numpy()), rtol=1e-12, atol=1e-12)


def test_identity_covariance_has_full_rank():
    # rows e_i - e_{i+4}: zero mean each, orthogonal, equal norms -> covariance proportional to I_4
    f = torch.cat([torch.eye(4), -torch.eye(4)], dim=1)
    np.testing.assert_allclose(sample_covariance(f).numpy(), np.eye(4) * 2 / 7, atol=1e-15)
    assert effective_rank(f) == pytest.approx(4.0, rel=1e-12)


def test_rank_one_features_have_rank_one():
    a, v = torch.randn(6, 1, dtype=torch.float64), torch.randn(1, 10, dtype=torch.float64)
    assert effective_rank(a * v + 3.0) == pytest.approx(1.0, abs=1e-12)  # a per-sample offset is centred away


def centred_with_singular_values(s, c=40, seed=0):
    """(len(s), c) float64 features U diag(s) W^T whose rows have zero mean (W orthogonal to the ones)."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.standard_normal((len(s), len(s))))
    w = rng.standard_normal((c, len(s)))
    w, _ = np.linalg.qr(w - w.mean(axis=0))
    return torch.from_numpy((u * np.asarray(s)) @ w.T)


@pytest.mark.parametrize("s_min", [1e-40, 1e-20, 1e-16])
def test_eigenvalues_below_the_rule_are_exactly_zero(s_min):
    """s_min <= s_max * max(N, C) * eps: zero whatever the SVD returns for it (s_min or rounding noise)."""
    eig = covariance_eigenvalues(centred_with_singular_values([2.0, 1.0, s_min]))
    assert eig[2].item() == 0.0
    assert eig[:2].numpy() == pytest.approx(np.array([4.0, 1.0]) / 39, rel=1e-12)
    assert effective_rank(centred_with_singular_values([2.0, 1.0, s_min])) == pytest.approx(
        math.exp(spectral_entropy(torch.tensor([4.0, 1.0]))), rel=1e-12)


def test_an_eigenvalue_above_the_rule_is_kept():
    s_min = 2.0 * 40 * np.finfo(np.float64).eps * 100  # a hundred times the threshold
    eig = covariance_eigenvalues(centred_with_singular_values([2.0, 1.0, s_min]))
    assert eig[2].item() == pytest.approx(s_min ** 2 / 39, rel=1e-2)


@pytest.mark.parametrize("constants", [(0.0, 0.0, 0.0), (0.1, 1 / 3, 0.7), (1e-30, -5.0, 1e20)])
def test_features_constant_per_sample_have_rank_zero(constants):
    """Centring leaves nothing but (kernel-dependent) rounding: the covariance is numerically zero."""
    f = torch.tensor(constants, dtype=torch.float64)[:, None].expand(3, 7)
    assert covariance_eigenvalues(f).tolist() == [0.0, 0.0, 0.0]
    assert effective_rank(f) == 0.0


def test_hand_computed_two_value_spectrum():
    # covariance eigenvalues proportional to (3, 1, 0): p = (3/4, 1/4)
    f = torch.zeros(3, 6, dtype=torch.float64)
    f[0, 0], f[0, 1] = math.sqrt(3), -math.sqrt(3)
    f[1, 2], f[1, 3] = 1.0, -1.0
    entropy = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert spectral_entropy(torch.tensor([3.0, 1.0, 0.0])) == pytest.approx(entropy, rel=1e-12)
    assert effective_rank(f) == pytest.approx(math.exp(entropy), rel=1e-9)


def test_random_features_match_numpy():
    f = torch.randn(16, 40) @ torch.randn(40, 40)
    assert effective_rank(f) == pytest.approx(numpy_effective_rank(f.numpy()), rel=1e-9)


def test_block_ranks_match_numpy_on_hooked_outputs():
    torch.manual_seed(0)
    model = create_vit("vit_tiny", depth=2, img_size=32, patch_size=8).train()
    images = torch.randn(6, 3, 32, 32)
    outputs = {}
    handles = [blk.register_forward_hook(lambda m, a, out, i=i: outputs.__setitem__(i, out.detach().double().numpy()))
               for i, blk in enumerate(model.blocks)]
    with torch.no_grad():
        model.eval()(images)
    for h in handles:
        h.remove()
    model.train()
    got = block_effective_ranks(model, images)
    assert model.training
    assert sorted(got) == [0, 1]
    for i, out in outputs.items():
        assert got[i]["cls"] == pytest.approx(numpy_effective_rank(out[:, 0]), rel=1e-6)
        assert got[i]["patch_mean"] == pytest.approx(numpy_effective_rank(out[:, 1:].mean(axis=1)), rel=1e-6)
        assert 1.0 <= got[i]["cls"] <= 6.0
    assert list(block_effective_ranks(model, images, blocks=-1)) == [1]


def test_fewer_than_two_images_is_refused_in_one_sentence():
    model = create_vit("vit_tiny", depth=1, img_size=32)
    with pytest.raises(EffectiveRankError, match="at least 2") as err:
        block_effective_ranks(model, torch.randn(1, 3, 32, 32))
    assert isinstance(err.value, SkiplessError) and str(err.value).count(". ") == 0
    with pytest.raises(EffectiveRankError, match="N >= 2"):
        effective_rank(torch.randn(1, 8))


def test_class_token_rank_is_the_effective_rank_of_the_last_blocks_cls_before_and_after_the_norm():
    """Seed 002's Fig. 5 quantity (analysis/class_token_rank.py) against the features read directly: the
    last block's CLS rows, normed by the backbone's own final LayerNorm for the "after" reading, batched or not."""
    import math

    from skipless.analysis.class_token_rank import class_token_rank
    from skipless.analysis.effective_rank import covariance_eigenvalues, spectral_entropy
    from skipless.models import create_vit
    from skipless.models.features import extract_features

    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="skip", depth=2, img_size=32).eval()
    model.norm.weight.data.uniform_(0.5, 2.0)  # a norm that is not the identity on normalised rows
    images = torch.randn(12, 3, 32, 32)
    with torch.no_grad():
        raw = extract_features(model, images, [1], ("out",))[("out", 1)][:, 0]
        normed = extract_features(model, images, [1], ("out",), norm=True)[("out", 1)][:, 0]
    result = class_token_rank(model, images, batch_size=5)
    for key, feats in (("rho_pre_norm", raw), ("rho", normed)):
        assert result[key] == pytest.approx(spectral_entropy(covariance_eigenvalues(feats)), rel=1e-5)
    assert result["erank"] == pytest.approx(math.exp(result["rho"]), rel=1e-9) and result["images"] == 12
    assert abs(result["rho"] - result["rho_pre_norm"]) > 1e-3  # the two readings are different features
