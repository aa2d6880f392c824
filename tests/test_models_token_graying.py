"""Token graying (Ji et al., "Always Skip Attention", Algorithms 1 and 2) against a direct numpy/scipy
computation of both algorithms, the SVD variant's promise on the spectrum, and its place in the model."""
import numpy as np
import pytest
import scipy.fft
import torch

from skipless.models import create_vit, extract_features, load_backbone, save_backbone
from skipless.models.token_graying import (TokenGrayingError, dct_matrix, gray_images, image_of, patches_of)


def _images(b=2, c=3, h=32, w=48, seed=0):
    return torch.randn(b, c, h, w, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _numpy_patches(img: np.ndarray, p: int) -> np.ndarray:
    """One image (C, H, W) as the (n, C*p*p) token matrix, written with loops: row = patch in raster
    order, columns = the patch's values in (channel, row, column) order."""
    c, h, w = img.shape
    rows = []
    for i in range(h // p):
        for j in range(w // p):
            rows.append(img[:, i * p:(i + 1) * p, j * p:(j + 1) * p].reshape(-1))
    return np.stack(rows)


def test_patch_matrix_is_what_the_patch_embedding_multiplies():
    x = _images()
    model = create_vit("vit_tiny", depth=1, img_size=32).double()
    conv = model.patch_embed.proj
    tokens = patches_of(x, 16)
    np.testing.assert_allclose(tokens[0].numpy(), _numpy_patches(x[0].numpy(), 16))
    by_matrix = tokens @ conv.weight.reshape(conv.weight.shape[0], -1).T + conv.bias
    by_conv = conv(x).flatten(2).transpose(1, 2)
    torch.testing.assert_close(by_matrix, by_conv)
    torch.testing.assert_close(image_of(tokens, x.shape, 16), x)


@pytest.mark.parametrize("eps", [0.95, 0.6])
def test_svd_graying_is_algorithm_1(eps):
    x = _images()
    out = gray_images(x, 16, "svd", eps)
    for b in range(x.shape[0]):
        X = _numpy_patches(x[b].numpy(), 16)
        U, S, Vt = np.linalg.svd(X, full_matrices=False)
        expected = U @ np.diag(S.max() * (S / S.max()) ** eps) @ Vt
        np.testing.assert_allclose(_numpy_patches(out[b].numpy(), 16), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("eps", [0.95, 0.6])
def test_dct_graying_is_algorithm_2_with_scipys_dct(eps):
    x = _images()
    out = gray_images(x, 16, "dct", eps)
    for b in range(x.shape[0]):
        X = _numpy_patches(x[b].numpy(), 16)
        coef = scipy.fft.dctn(X, type=2, norm="ortho")
        top = np.abs(coef).max()
        coef = np.sign(coef) * top * (np.abs(coef) / top) ** eps
        expected = scipy.fft.idctn(coef, type=2, norm="ortho")
        np.testing.assert_allclose(_numpy_patches(out[b].numpy(), 16), expected, rtol=1e-9, atol=1e-9)


def test_dct_matrix_is_orthonormal_dct_ii():
    d = dct_matrix(12)
    torch.testing.assert_close(d @ d.T, torch.eye(12, dtype=torch.float64))
    v = np.random.default_rng(0).standard_normal(12)
    np.testing.assert_allclose((d @ torch.from_numpy(v)).numpy(), scipy.fft.dct(v, type=2, norm="ortho"), atol=1e-12)


def test_forwards_reuse_the_dct_matrices_built_by_the_first_and_give_the_same_result():
    """The matrices are built once per (size, dtype, device), not copied onto the device at each forward."""
    model = create_vit("vit_tiny", depth=1, token_graying={"method": "dct", "eps": 0.8})
    x = _images(h=64, w=48).float()
    dct_matrix.cache_clear()
    with torch.no_grad():
        first = model(x)
        built = dct_matrix.cache_info()
        second = model(x)
    assert built.misses == 2  # D_n (n = 12 patches) and D_d (d = 3 * 16 * 16)
    assert dct_matrix.cache_info().misses == 2 and dct_matrix.cache_info().hits == built.hits + 2
    assert dct_matrix(12, device=x.device) is dct_matrix(12, device=x.device)
    assert torch.equal(first, second)


def test_svd_graying_raises_the_small_singular_values_and_keeps_the_largest():
    x = _images(b=1)
    before = torch.linalg.svdvals(patches_of(x, 16))[0]
    after = torch.linalg.svdvals(patches_of(gray_images(x, 16, "svd", 0.7), 16))[0]
    torch.testing.assert_close(after[0], before[0])
    assert bool((after[1:] > before[1:]).all())
    kappa_before, kappa_after = before[0] / before[-1], after[0] / after[-1]
    torch.testing.assert_close(kappa_after, kappa_before ** 0.7)  # kappa(X') = kappa(X)^eps


@pytest.mark.parametrize("method", ["svd", "dct"])
def test_eps_one_changes_nothing(method):
    x = _images()
    torch.testing.assert_close(gray_images(x, 16, method, 1.0), x)


def test_the_model_grays_before_its_patch_embedding_and_keeps_it_in_its_file(tmp_path):
    torch.manual_seed(0)
    grayed = create_vit("vit_tiny", depth=2, token_graying={"method": "dct", "eps": 0.8})
    plain = create_vit("vit_tiny", depth=2)
    plain.load_state_dict(grayed.state_dict())  # same parameter names, same weights
    x = _images(h=64, w=48).float()
    with torch.no_grad():
        torch.testing.assert_close(grayed(x), plain(gray_images(x, 16, "dct", 0.8)))
        assert not torch.allclose(grayed(x), plain(x))
    path = save_backbone(tmp_path / "b.pt", grayed)
    loaded = load_backbone(path)
    assert loaded.skipless_args["token_graying"] == {"method": "dct", "eps": 0.8}
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), grayed(x))
        feats = extract_features(loaded, x, layers=[-1], kinds=("out", "k"))
    assert feats[("out", 1)].shape == (2, 1 + 4 * 3, 192)


def test_images_the_patches_do_not_tile_are_refused_in_one_sentence():
    with pytest.raises(TokenGrayingError, match=r"multiples of 16 \(e\.g\. 32 x 48\)"):
        gray_images(_images(h=40, w=50), 16, "svd", 0.9)
    model = create_vit("vit_tiny", depth=1, token_graying={"method": "svd"})
    with pytest.raises(TokenGrayingError, match="tile"):
        model(torch.randn(1, 3, 40, 40))


@pytest.mark.parametrize("graying, needle", [({"method": "dct", "eps": 0.0}, r"\(0, 1\]"),
                                              ({"method": "dct", "eps": 1.5}, r"\(0, 1\]"),
                                              ({"method": "dct", "strength": 1}, "expected method and eps")])
def test_bad_graying_arguments_are_refused(graying, needle):
    with pytest.raises(ValueError, match=needle):
        create_vit("vit_tiny", depth=1, token_graying=graying)
