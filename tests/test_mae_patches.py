"""patchify / unpatchify in MAE's layout, and the per-patch normalised target."""
import numpy as np
import pytest
import torch

from skipless.errors import ModelArgumentError
from skipless.ssl.mae.autoencoder import normalized_target, patchify, unpatchify


def test_patchify_layout_matches_a_loop_over_rows_cols_py_px_channel():
    p, B, C, H, W = 4, 2, 3, 8, 12
    images = torch.randn(B, C, H, W)
    patches = patchify(images, p)
    rows, cols = H // p, W // p
    assert patches.shape == (B, rows * cols, p * p * C)
    for b in range(B):
        for i in range(rows):
            for j in range(cols):
                expected = [images[b, c, i * p + py, j * p + px].item()
                            for py in range(p) for px in range(p) for c in range(C)]
                assert patches[b, i * cols + j].tolist() == expected


def test_unpatchify_inverts_patchify_square_and_rectangular():
    square = torch.randn(2, 3, 32, 32)
    assert torch.equal(unpatchify(patchify(square, 8), 8), square)
    rect = torch.randn(2, 3, 16, 40)
    assert torch.equal(unpatchify(patchify(rect, 8), 8, grid=(2, 5)), rect)
    with pytest.raises(ModelArgumentError, match="grid"):
        unpatchify(patchify(rect, 8), 8)  # 10 patches are no square grid


def test_image_size_not_a_multiple_of_the_patch_is_refused():
    with pytest.raises(ModelArgumentError, match="not a multiple of the patch size 8"):
        patchify(torch.zeros(1, 3, 30, 32), 8)


def test_normalized_target_is_mae_unbiased_variance_plus_eps():
    patches = torch.randn(2, 5, 48, dtype=torch.float64) * 3 + 1
    patches[0, 0] = 0.25  # a flat patch: var 0, the eps keeps it finite
    target, mean, std = normalized_target(patches)
    x = patches.numpy()
    m = x.mean(-1, keepdims=True)
    v = x.var(-1, ddof=1, keepdims=True)
    np.testing.assert_allclose(target.numpy(), (x - m) / np.sqrt(v + 1e-6), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(std.numpy(), np.sqrt(v + 1e-6), rtol=1e-12)
    torch.testing.assert_close(target * std + mean, patches)
    assert (target[0, 0] == 0).all()
