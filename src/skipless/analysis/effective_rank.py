"""Effective rank of a batch of features (Zhang et al., "Residual connections harm ...", Section 5).

Seed 002 (``/work/shared/seeds/002_*.txt``), Section 5, "Effective rank" (lines 189-195 of the seed
text) defines, after Roy & Vetterli [51],

    rho(A) = - sum_{i <= min(m, n)} s_i log s_i,    s_i = sigma_i / sum_j sigma_j     (its Eq. 6)

and then: "to compute the effective rank, we use the singular values from the covariance matrix
A_theta of the last-layer features, where A_theta(i, j) denotes the covariance of the learned class
tokens for the i-th and j-th samples."

The variant pinned here:

- The matrix is that N x N sample covariance: ``A[i, j] = cov(f_i, f_j)`` over the C feature
  coordinates, i.e. ``numpy.cov(features)`` with each sample (row) a variable: each sample's
  feature vector is centred on its own mean, ``A = F_c F_c^T / (C - 1)``. A is symmetric positive
  semi-definite, so its singular values are its eigenvalues; the 1 / (C - 1) cancels in the
  normalisation.
- ``effective_rank`` is Roy & Vetterli's ``exp(rho)``, which reads as a number of dimensions
  (N for a covariance proportional to the identity, 1 for rank one). The paper's Eq. 6 writes the
  entropy ``rho`` itself, without the exponential; ``spectral_entropy`` gives it, and
  ``effective_rank = exp(spectral_entropy)``: the two order models identically.
- Natural logarithms; ``0 log 0 = 0``; float64.
- Numerically zero, by explicit rules (``condition_number.numerically_zero``, numpy's
  ``matrix_rank`` tolerance) rather than by whatever the SVD kernel returns: the covariance's
  eigenvalues are the squared singular values of the centred ``F_c`` (over ``C - 1``), and one whose
  singular value is ``<= s_max * max(N, C) * eps`` is exactly 0 (it then adds nothing to the entropy).
  The centred features as a whole are numerically zero when their largest singular value is
  ``<= max(N, C) * eps`` times that of the uncentred features: every sample's features were constant
  and centring left rounding only. Their covariance has rank 0 and ``effective_rank`` returns 0, not
  the entropy of rounding noise nor the NaN of 0 / 0.

``block_effective_ranks`` applies it per block to the class tokens (the paper's choice) and, since
the skipless backbones are evaluated on dense features too, to the mean patch token of each image.
"""
from __future__ import annotations

import math
from typing import Iterable

import torch
from torch import nn

from ..errors import SkiplessError
from ..models.features import extract_features, resolve_layers
from .condition_number import numerically_zero, zero_threshold
from .eval_mode import measuring

__all__ = ["EffectiveRankError", "sample_covariance", "covariance_eigenvalues", "spectral_entropy", "effective_rank",
           "rho_and_erank", "block_effective_ranks"]


class EffectiveRankError(SkiplessError, ValueError):
    """Features an effective rank cannot be computed from (fewer than two samples)."""


def _centred(features: torch.Tensor) -> torch.Tensor:
    """``F_c``: each sample (row) of an (N, C) matrix centred on its own mean, float64."""
    if features.ndim != 2 or features.shape[0] < 2 or features.shape[1] < 2:
        raise EffectiveRankError(f"effective rank needs an (N, C) feature matrix with N >= 2 samples and C >= 2 "
                                 f"features, got shape {tuple(features.shape)}")
    f = features.detach().double()
    return f - f.mean(dim=1, keepdim=True)


def sample_covariance(features: torch.Tensor) -> torch.Tensor:
    """The N x N covariance A[i, j] = cov(f_i, f_j) of the rows of an (N, C) matrix, float64 (``numpy.cov``)."""
    f = _centred(features)
    return f @ f.T / (f.shape[1] - 1)


def covariance_eigenvalues(features: torch.Tensor) -> torch.Tensor:
    """The eigenvalues of ``sample_covariance(features)``, descending, those numerically zero set to
    exactly 0, all of them when the centred features are numerically zero (the module's rules)."""
    f = _centred(features)
    rows, cols = f.shape
    s = torch.linalg.svdvals(f)
    scale = torch.linalg.matrix_norm(features.detach().double(), ord=2)
    if bool(s[0] <= scale * zero_threshold(max(rows, cols), s.dtype)):
        return torch.zeros_like(s)
    return torch.where(numerically_zero(s, rows, cols), 0.0, s * s / (cols - 1))


def spectral_entropy(singular_values: torch.Tensor) -> float:
    """The paper's rho: Shannon entropy (nats) of the singular values normalised to sum to one."""
    s = singular_values.double().clamp_min(0)
    p = s / s.sum()
    return float(-torch.special.xlogy(p, p).sum())


def effective_rank(features: torch.Tensor) -> float:
    """Roy & Vetterli's exp(rho) of the sample covariance of an (N, C) feature matrix, in [1, N]; 0 when
    the covariance is numerically zero (see the module docstring)."""
    eigenvalues = covariance_eigenvalues(features)
    return math.exp(spectral_entropy(eigenvalues)) if bool(eigenvalues[0] > 0) else 0.0


def rho_and_erank(features: torch.Tensor) -> dict[str, float]:
    """``{"rho", "erank"}`` of an (N, C) feature matrix: the paper's entropy (Eq. 6) and its exponential, both 0
    when the covariance is numerically zero: what the rank monitor records (class tokens or pooled features)."""
    eigenvalues = covariance_eigenvalues(features)
    if not bool(eigenvalues[0] > 0):
        return {"rho": 0.0, "erank": 0.0}
    rho = spectral_entropy(eigenvalues)
    return {"rho": rho, "erank": math.exp(rho)}


def block_effective_ranks(model: nn.Module, images: torch.Tensor,
                          blocks: Iterable[int] | int | str = "all") -> dict[int, dict[str, float]]:
    """Effective rank over the batch of each block's output class tokens and mean patch tokens.

    Args:
        model: a ``SkiplessViT``; measured in eval mode without gradients, its mode restored.
        images: (B, 3, H, W) with B >= 2: the rank is of the B x B covariance between images.
        blocks: ``"all"``, a block index or a list of them (``features.resolve_layers``).

    Returns:
        ``{block: {"cls": erank of the class tokens, "patch_mean": erank of the mean patch tokens}}``.
    """
    if images.ndim != 4 or images.shape[0] < 2:
        raise EffectiveRankError(f"effective rank is of a batch of images and needs at least 2, "
                                 f"got a tensor of shape {tuple(images.shape)}")
    wanted = resolve_layers(blocks, len(model.blocks))
    prefix = int(getattr(model, "num_prefix_tokens", 1))
    with measuring(model):
        feats = extract_features(model, images, wanted, ("out",))
    return {i: {"cls": effective_rank(t[:, 0]), "patch_mean": effective_rank(t[:, prefix:].mean(dim=1))}
            for (_, i), t in sorted(feats.items())}
