"""PCA images of patch features: 3 principal components per patch, shown as RGB.

The skipless paper's qualitative figures (Ji et al., "Cutting the Skip", Section 6.3 and
Appendix A.5, Figures 4, 7 and 8; after DINOv2, Oquab et al. 2023, Figure 1) project each patch
feature of one image onto the image's first three principal components and show them as colours:
patches of one object share a colour when the features group them.

- PCA is fitted per image and per block on its patch tokens (CLS excluded), centred, by SVD.
- Each channel is min-max scaled to [0, 1] over the image's (foreground) patches; a constant
  channel (e.g. collapsed tokens) is shown as 0.
- Signs. A principal direction has no sign, so the colours of two blocks could swap for no reason.
  Rule: in the first column of a row of maps (the first block shown, or the first checkpoint),
  each component is signed so that its projections have a positive third moment (skewness: the
  long tail, usually the smaller salient region, is bright); in every later column, each
  component takes the sign that correlates positively, over the same patches, with the same
  component of the column before it (the previous block, or the previous checkpoint). Both rules
  give the same picture when a block's features change sign.
- Optional foreground masking (DINOv2's trick): patches whose scaled first component is at or
  below ``threshold`` are shown black and left out of the colour scaling.
"""
from __future__ import annotations

import numpy as np
import torch


def principal_projections(feats: torch.Tensor, k: int = 3) -> np.ndarray:
    """Projections (N, k) float64 of patch features (N, C) on their first ``k`` principal directions."""
    x = feats.detach().double().cpu()
    x = x - x.mean(0, keepdim=True)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    proj = (x @ vh[:k].T).numpy()
    if proj.shape[1] < k:  # fewer patches or channels than components
        proj = np.pad(proj, ((0, 0), (0, k - proj.shape[1])))
    return proj


def skew_signs(proj: np.ndarray) -> np.ndarray:
    """Per column, +1 or -1 so that the column's third central moment is >= 0."""
    centred = proj - proj.mean(0)
    return np.where((centred ** 3).sum(0) >= 0, 1.0, -1.0)


def aligned_signs(proj: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per column, the sign that makes it correlate positively with ``reference``'s same column.

    A column uncorrelated with its reference (exactly 0) falls back to ``skew_signs``.
    """
    dots = ((proj - proj.mean(0)) * (reference - reference.mean(0))).sum(0)
    return np.where(dots > 0, 1.0, np.where(dots < 0, -1.0, skew_signs(proj)))


def signed_series(projections: list[np.ndarray]) -> list[np.ndarray]:
    """Apply the sign rule along a row of maps: skewness for the first, alignment for the rest."""
    out: list[np.ndarray] = []
    for proj in projections:
        signs = skew_signs(proj) if not out else aligned_signs(proj, out[-1])
        out.append(proj * signs)
    return out


def minmax(proj: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    """Scale each column to [0, 1] over the rows in ``keep`` (all rows when None); constant -> 0."""
    ref = proj if keep is None else proj[keep]
    if ref.size == 0:
        return np.zeros_like(proj)
    lo, hi = ref.min(0), ref.max(0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return np.clip((proj - lo) / span, 0.0, 1.0) * (hi > lo)


def rgb_map(proj: np.ndarray, grid: tuple[int, int], threshold: float | None = None) -> np.ndarray:
    """(rows, cols, 3) RGB in [0, 1] of signed projections (N, 3); background black if ``threshold``."""
    keep = None
    if threshold is not None:
        keep = minmax(proj[:, :1])[:, 0] > threshold
    rgb = minmax(proj, keep)
    if keep is not None:
        rgb[~keep] = 0.0
    return rgb.reshape(*grid, 3)


def pca_rows(features: list[torch.Tensor], grid: tuple[int, int], threshold: float | None = None) -> list[np.ndarray]:
    """One row of maps (e.g. the blocks of one image): RGB maps with the sign rule applied along it."""
    projections = signed_series([principal_projections(f) for f in features])
    return [rgb_map(p, grid, threshold) for p in projections]
