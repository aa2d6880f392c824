"""Seed 003's Eq. 6 (the MLP) and App. B's Eq. 24 (the depthwise convolution), skipless/analysis/mlp_conv_theory.py:
kappa against the Gram matrix's eigenvalues, the convolution's matrices against torch's conv2d, the bounds on
random draws, and the cases where they cannot hold."""
import math

import pytest
import torch
import torch.nn.functional as F

from skipless.analysis.mlp_conv_theory import (depthwise_conv, depthwise_operators, eq6_gaussian_terms, eq6_terms,
                                               eq24_counterexample, eq24_terms)
from skipless.models.timm_family import TIMM_CLASSES


def _gram_kappa(m: torch.Tensor) -> float:
    """kappa over the min(rows, columns) singular values, from the smaller Gram matrix's eigenvalues."""
    gram = m @ m.T if m.shape[0] <= m.shape[1] else m.T @ m
    eig = torch.linalg.eigvalsh(gram)
    return math.sqrt(float(eig[-1] / eig[0]))


def test_eq6_terms_are_the_condition_numbers_of_the_linear_mlp_output():
    g = torch.Generator().manual_seed(0)
    x, up, down = (torch.randn(*s, generator=g, dtype=torch.float64) for s in ((30, 8), (32, 8), (8, 32)))
    mlp = torch.nn.Sequential(torch.nn.Linear(8, 32, bias=False), torch.nn.Linear(32, 8, bias=False)).double()
    with torch.no_grad():
        mlp[0].weight.copy_(up)
        mlp[1].weight.copy_(down)
        out = mlp(x)  # tokens as rows: the transpose of W_down W_up X^T
    r = eq6_terms(x, up, down)
    assert r["left"] == pytest.approx(_gram_kappa(out), rel=1e-6)
    assert r["right"] == pytest.approx(_gram_kappa(down) * _gram_kappa(up) * _gram_kappa(x), rel=1e-6)


def test_eq6_holds_with_square_factors_and_fails_with_the_mlps_wide_and_tall_ones():
    """The result, not a bug of the suite: kappa(AB) <= kappa(A) kappa(B) needs square factors."""
    g = torch.Generator().manual_seed(0)
    square = [eq6_gaussian_terms(48, 12, 1, g) for _ in range(20)]
    assert all(r["left"] <= r["right"] * (1 + 1e-9) for r in square)
    mlp = [eq6_gaussian_terms(48, 12, 4, g) for _ in range(20)]
    assert sum(r["left"] <= r["right"] for r in mlp) <= 2
    assert all(r["kappa_product"] > r["C_up"] * r["C_down"] for r in mlp)  # the step kappa(AB) <= kappa(A) kappa(B)
    # kappa(W_up) = kappa(W_down) = 1 and a zero product: no bound in C_down C_up can hold
    up = torch.cat([torch.eye(4), torch.zeros(4, 4)]).double()
    down = torch.cat([torch.zeros(4, 4), torch.eye(4)], dim=1).double()
    assert float(torch.linalg.matrix_norm(down @ up)) == 0.0
    assert _gram_kappa(up) == _gram_kappa(down) == 1.0


def test_depthwise_operators_are_each_channels_convolution():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(3, 1, 5, 5, generator=g, dtype=torch.float64)
    x = torch.randn(3, 7, 7, generator=g, dtype=torch.float64)
    t = depthwise_operators(weight, 7)
    conv = torch.nn.Conv2d(3, 3, 5, padding="same", groups=3, bias=False).double()
    with torch.no_grad():
        conv.weight.copy_(weight)
        expected = conv(x.unsqueeze(0)).reshape(3, 49)
    torch.testing.assert_close(torch.einsum("cpq,cq->cp", t, x.reshape(3, 49)), expected)


def test_convmixers_depthwise_convolution_is_found():
    model = TIMM_CLASSES["convmixer"](dim=8, depth=2, kernel_size=5, patch_size=2, num_classes=0)
    conv = depthwise_conv(model)
    assert conv is model.blocks[0][0].fn[0] and conv.groups == 8
    with pytest.raises(ValueError, match="no depthwise convolution"):
        depthwise_conv(torch.nn.Linear(2, 2))


def test_eq24_holds_with_one_shared_kernel_and_on_random_convmixer_kernels():
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    for shared in (True, False):
        for _ in range(5):
            weight = depthwise_conv(TIMM_CLASSES["convmixer"](dim=6, depth=1, kernel_size=5, patch_size=2,
                                                              num_classes=0)).weight.detach().double()
            if shared:
                weight = weight[:1].expand_as(weight)
            x = torch.randn(6, 6, 6, generator=g, dtype=torch.float64)
            r = eq24_terms(x, weight)
            out = F.conv2d(x.unsqueeze(0), weight, padding="same", groups=6).reshape(6, 36)
            assert r["left"] == pytest.approx(_gram_kappa(out), rel=1e-5)
            assert r["left"] <= r["right"] * (1 + 1e-9)


def test_eq24_is_not_a_theorem_for_a_kernel_per_channel():
    """Two orthonormal channels and two well-conditioned kernels whose outputs are the same vector."""
    x, weight = eq24_counterexample(6)
    flat = x.reshape(2, -1)
    torch.testing.assert_close(flat @ flat.T, torch.eye(2, dtype=torch.float64))  # kappa(X) = 1
    out = F.conv2d(x.unsqueeze(0), weight, padding="same", groups=2).reshape(2, -1)
    torch.testing.assert_close(out[0], out[1])  # rank 1
    r = eq24_terms(x, weight)
    assert r["C_CD"] < 1.5 and r["kappa_x"] == pytest.approx(1.0) and r["left"] == math.inf
