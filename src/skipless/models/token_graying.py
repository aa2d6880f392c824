"""Token graying: the image's patch matrix made better conditioned before the patch embedding.

Ji et al., "Always Skip Attention" (Section 5, Algorithms 1 and 2): a self-attention block without a
skip is as ill-conditioned as its input tokens, so the tokens are "grayed" first. ``X`` is the
(n patches x p*p*C values) matrix of one image; each row is a patch flattened in the order of the
patch-embedding convolution's weight, ``(C, p, p)``, and the rows run over patches in raster order.

* ``svd`` (Algorithm 1): ``X = U S V^T``, ``S' = max(S) (S / max(S))^eps``: every singular value is
  raised towards the largest, which stays, so ``kappa(X') = kappa(X)^eps``. The algorithm's box writes
  ``(S / max(S))^eps`` without multiplying ``max(S)`` back; the text before it keeps "the maximal element
  unchanged", as here. The condition number is the same either way; the tokens' scale differs by ``max(S)``.
* ``dct`` (Algorithm 2): the 2-D DCT-II ``Xh = D_n X D_d^T`` (orthonormal, Eq. 8-9), each coefficient
  ``sign(Xh) max|Xh| (|Xh| / max|Xh|)^eps``, then the inverse ``D_n^T Xh' D_d``. The paper's cheap
  stand-in for the SVD (its Table 1: 0.73 days against 4.55 for SVD and 0.72 without, ViT-B).

eps in (0, 1]: 1 changes nothing; the paper's default is 0.95 (Section 6). Both act on each image
separately, batched on the images' device, and are part of the model (``create_vit(token_graying=)``,
stored with the backbone), so every evaluator sees grayed tokens too.

The DCT is a product with the orthonormal DCT-II matrix rather than ``scipy.fft`` (NumPy on the CPU,
outside autograd and the device) or the ``torch-dct`` package (unmaintained); at ViT sizes (n = 196,
d = 768) the two products cost about what the patch embedding does. ``tests`` check both variants
against ``scipy``.
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch
from timm.layers import PatchEmbed

GRAYING_METHODS = ("none", "svd", "dct")
DEFAULT_EPS = 0.95  # the paper's default amplification (Section 6)


class TokenGrayingError(ValueError):
    """An image that the patches do not tile, or a method/eps token graying cannot use."""


def check_graying(method: str, eps: float) -> None:
    if method not in GRAYING_METHODS:
        raise TokenGrayingError(f"unknown token graying method {method!r}; expected one of {', '.join(GRAYING_METHODS)}")
    if not 0 < eps <= 1:
        raise TokenGrayingError(f"token graying eps must lie in (0, 1] (1 changes nothing), got {eps}")


@lru_cache(maxsize=32)
def dct_matrix(n: int, dtype: torch.dtype = torch.float64, device: torch.device | str | None = None) -> torch.Tensor:
    """The orthonormal DCT-II matrix ``D`` (n x n): ``D x`` is the DCT-II of ``x``, ``D^T`` its inverse.

    Built once per ``(n, dtype, device)`` and kept (4.7 MB for d = 768 in float64, on each device
    used), so a forward neither rebuilds it nor copies it onto the device again; it is shared, so no
    caller may change it in place."""
    i = torch.arange(n, dtype=torch.float64)
    d = torch.cos(math.pi * (2 * i[None, :] + 1) * i[:, None] / (2 * n))  # row k, column i (Eq. 9)
    d[0] *= math.sqrt(1 / n)
    d[1:] *= math.sqrt(2 / n)
    return d.to(device=device, dtype=dtype)


def patches_of(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, n, C*p*p): each row one patch in ``(C, p, p)`` order, rows in raster order."""
    B, C, H, W = images.shape
    if H % patch or W % patch:
        raise TokenGrayingError(f"token graying needs images the {patch}-px patches tile, got {H} x {W}; "
                                f"expected sides that are multiples of {patch} (e.g. {H // patch * patch} x {W // patch * patch})")
    x = images.reshape(B, C, H // patch, patch, W // patch, patch).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, (H // patch) * (W // patch), C * patch * patch)


def image_of(patches: torch.Tensor, shape: torch.Size, patch: int) -> torch.Tensor:
    """The inverse of ``patches_of`` for images of ``shape`` (B, C, H, W)."""
    B, C, H, W = shape
    x = patches.reshape(B, H // patch, W // patch, C, patch, patch).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(B, C, H, W)


def gray_svd(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Algorithm 1 on a batch of token matrices (B, n, d), in float64 and back."""
    u, s, vh = torch.linalg.svd(x.double(), full_matrices=False)
    top = s[..., :1].clamp_min(torch.finfo(torch.float64).tiny)
    s = top * (s / top) ** eps
    return ((u * s[..., None, :]) @ vh).to(x.dtype)


def gray_dct(x: torch.Tensor, eps: float) -> torch.Tensor:
    """Algorithm 2 on a batch of token matrices (B, n, d), in float64 and back."""
    n, d = x.shape[-2:]
    dn, dd = dct_matrix(n, device=x.device), dct_matrix(d, device=x.device)
    coef = dn @ x.double() @ dd.T
    top = coef.abs().amax(dim=(-2, -1), keepdim=True).clamp_min(torch.finfo(torch.float64).tiny)
    coef = torch.sign(coef) * top * (coef.abs() / top) ** eps
    return (dn.T @ coef @ dd).to(x.dtype)


def gray_images(images: torch.Tensor, patch: int, method: str, eps: float) -> torch.Tensor:
    """Token graying of a batch of images (B, C, H, W) whose sides are multiples of ``patch``."""
    check_graying(method, eps)
    if method == "none":
        return images
    x = patches_of(images, patch)
    x = gray_svd(x, eps) if method == "svd" else gray_dct(x, eps)
    return image_of(x, images.shape, patch)


class GrayedPatchEmbed(PatchEmbed):
    """timm's ``PatchEmbed`` (same parameter names) that grays the image's tokens first.

    Graying the patch matrix and then applying the patch embedding's linear map is the paper's
    order (Algorithms 1-2, line 8); the images themselves are never changed outside the model.
    """

    def __init__(self, *args, graying_method: str = "none", graying_eps: float = DEFAULT_EPS, **kwargs) -> None:
        check_graying(graying_method, graying_eps)
        super().__init__(*args, **kwargs)
        self.graying_method, self.graying_eps = graying_method, float(graying_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # a preprocessing of the input: nothing to learn, no gradient to the pixels
            grayed = gray_images(x, self.patch_size[0], self.graying_method, self.graying_eps)
        return super().forward(grayed)
