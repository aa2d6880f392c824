"""MAE's masked MSE against a NumPy computation, and the mean-patch baseline."""
import numpy as np
import torch

from skipless.ssl.mae.autoencoder import masked_mse, mean_patch_baseline, reconstruction_target

P = 8


def _np_patches(images):
    """NumPy patchify, written independently: (B, C, H, W) -> (B, N, p * p * C) in (py, px, c) order."""
    B, C, H, W = images.shape
    x = images.reshape(B, C, H // P, P, W // P, P).transpose(0, 2, 4, 3, 5, 1)
    return x.reshape(B, (H // P) * (W // P), P * P * C)


def _case(seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.randn(3, 3, 32, 32, generator=g)
    pred = torch.randn(3, 16, P * P * 3, generator=g)
    mask = (torch.rand(3, 16, generator=g) < 0.75).float()
    mask[:, 0] = 1.0
    return images, pred, mask


def test_masked_mse_with_normalised_target_equals_numpy_on_masked_patches():
    images, pred, mask = _case()
    loss = masked_mse(pred, reconstruction_target(images, P, norm_pix=True), mask)
    t = _np_patches(images.double().numpy())
    t = (t - t.mean(-1, keepdims=True)) / np.sqrt(t.var(-1, ddof=1, keepdims=True) + 1e-6)
    per_patch = ((pred.double().numpy() - t) ** 2).mean(-1)
    m = mask.numpy().astype(bool)
    expected = per_patch[m].mean()  # every masked patch of the batch weighs the same
    assert loss.dtype == torch.float32
    np.testing.assert_allclose(loss.item(), expected, rtol=1e-5)


def test_masked_mse_with_plain_target_and_only_masked_patches_count():
    images, pred, mask = _case(1)
    target = reconstruction_target(images, P, norm_pix=False)
    np.testing.assert_array_equal(target.numpy(), _np_patches(images.numpy()))
    loss = masked_mse(pred, target, mask)
    changed = pred.clone()
    changed[mask == 0] += 100.0  # visible patches: no effect
    assert masked_mse(changed, target, mask).item() == loss.item()
    changed[mask == 1] += 1.0  # masked patches: counted
    assert masked_mse(changed, target, mask).item() > loss.item() + 0.5


def test_mean_patch_baseline_normalised_is_just_under_one_by_construction():
    images, _, mask = _case(2)
    D = P * P * 3
    t = _np_patches(images.double().numpy())
    v = t.var(-1, ddof=1)
    expected = ((D - 1) / D * v / (v + 1e-6))[mask.numpy().astype(bool)].mean()
    got = mean_patch_baseline(images, P, mask, norm_pix=True).item()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert abs(got - (1 - 1 / D)) < 1e-4


def test_mean_patch_baseline_plain_is_the_mean_biased_variance_of_masked_patches():
    images, _, mask = _case(3)
    t = _np_patches(images.double().numpy())
    expected = t.var(-1, ddof=0)[mask.numpy().astype(bool)].mean()
    np.testing.assert_allclose(mean_patch_baseline(images, P, mask, norm_pix=False).item(), expected, rtol=1e-5)
