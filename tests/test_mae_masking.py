"""MAE's random masking: how many patches stay, that the draw is per sample, and that the mask and
restore index describe the kept tokens."""
import pytest
import torch

from skipless.errors import ModelArgumentError
from skipless.ssl.mae.autoencoder import random_masking, visible_count


def _tokens(B, N, C=3):
    """Distinct tokens: token n of sample b is (b, n, b * N + n) in its first three channels."""
    b, n = torch.meshgrid(torch.arange(B), torch.arange(N), indexing="ij")
    x = torch.stack([b, n, b * N + n], dim=-1).float()
    return torch.cat([x, torch.randn(B, N, C - 3)], dim=-1) if C > 3 else x


@pytest.mark.parametrize("N, ratio, keep", [(16, 0.75, 4), (196, 0.75, 49), (10, 0.5, 5), (49, 0.6, 19), (7, 0.5, 3)])
def test_keeps_exactly_int_n_times_one_minus_ratio_in_every_sample(N, ratio, keep):
    visible, mask, ids_restore = random_masking(_tokens(5, N, 4), ratio, torch.Generator().manual_seed(0))
    assert visible.shape == (5, keep, 4)
    assert mask.dtype == torch.float32 and mask.shape == (5, N)
    assert mask.sum(dim=1).tolist() == [N - keep] * 5


def test_visible_tokens_mask_and_restore_index_agree():
    B, N = 6, 16
    x = _tokens(B, N)
    visible, mask, ids_restore = random_masking(x, 0.75, torch.Generator().manual_seed(1))
    keep = visible.shape[1]
    for b in range(B):
        assert sorted(ids_restore[b].tolist()) == list(range(N))  # a permutation
        for n in range(N):
            assert mask[b, n] == float(ids_restore[b, n] >= keep)
            if mask[b, n] == 0:  # visible: found where the restore index says
                torch.testing.assert_close(visible[b, ids_restore[b, n]], x[b, n])
        kept = {int(t[1]) for t in visible[b]}
        assert kept == {n for n in range(N) if mask[b, n] == 0}
        assert all(int(t[0]) == b for t in visible[b])  # no token from another sample
    # Putting the visible tokens back with the restore index gives the original tokens in place.
    filled = torch.cat([visible, torch.full((B, N - keep, 3), -1.0)], dim=1)
    restored = filled.gather(1, ids_restore[..., None].expand(-1, -1, 3))
    torch.testing.assert_close(restored[mask == 0], x[mask == 0])
    assert (restored[mask == 1] == -1).all()


def test_each_sample_draws_its_own_mask_uniformly():
    B, N = 4000, 16
    _, mask, _ = random_masking(torch.zeros(B, N, 1), 0.75, torch.Generator().manual_seed(2))
    # Every position is masked 3 times in 4; neighbours in the batch agree on a position as often as two
    # independent draws do (0.75^2 + 0.25^2 = 0.625, not 1 as with one mask shared by the batch).
    torch.testing.assert_close(mask.mean(0), torch.full((N,), 0.75), atol=0.035, rtol=0)
    agree = (mask[1:] == mask[:-1]).float().mean().item()
    assert abs(agree - 0.625) < 0.02, agree


def test_generator_makes_the_draw_reproducible():
    x = torch.randn(3, 16, 8)
    a = random_masking(x, 0.75, torch.Generator().manual_seed(5))
    b = random_masking(x, 0.75, torch.Generator().manual_seed(5))
    c = random_masking(x, 0.75, torch.Generator().manual_seed(6))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a[1], c[1])


@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.1, 1.5, True, "0.75", None])
def test_ratio_outside_the_open_interval_is_refused(ratio):
    with pytest.raises(ModelArgumentError, match="strictly between 0 and 1"):
        random_masking(torch.zeros(1, 16, 2), ratio)


def test_ratio_that_leaves_no_visible_or_no_masked_patch_is_refused():
    assert int(10 * (1 - 0.9)) == 0  # MAE's truncated product, in floating point
    with pytest.raises(ValueError, match="keeps int"):
        visible_count(10, 0.9)
    with pytest.raises(ModelArgumentError, match="at least one visible and one masked"):
        visible_count(16, 1e-20)  # 1 - 1e-20 == 1.0: nothing masked
    assert visible_count(16, 0.75) == 4
