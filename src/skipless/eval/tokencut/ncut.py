"""The normalized cut of TokenCut: patch graph, second generalized eigenvector, seed, box.

TokenCut (Wang et al., "TokenCut: Segmenting Objects in Images and Videos with Self-supervised
Transformer and Normalized Cut", TPAMI 2023; reference code YangtaoWANG95/TokenCut,
``object_discovery.py``) finds the main object of an image from its patch features alone:

1. graph: ``A_ij = cos(f_i, f_j)`` over the patch tokens (CLS excluded), binarised at ``tau``
   (0.2): 1 where the similarity is above ``tau``, ``eps`` (1e-5) elsewhere, so that the graph
   stays connected (``affinity``);
2. Ncut (Shi and Malik 2000): the eigenvector of the second-smallest eigenvalue of
   ``(D - A) x = lambda D x``, ``D = diag(A 1)`` (``second_eigenvectors``);
3. foreground = entries above the mean of ``x``; the seed is ``argmax |x|``; if the seed falls
   outside, the partition is flipped, so the seed is always foreground (``bipartition``). Exact
   ties are common in a binary graph (patches with the same neighbours get equal entries), and
   the reference settles them by rounding noise or by the arbitrary sign of the eigenvector. Here
   they are settled by rule, so every solver and either sign give the same box: entries within
   ``TIE_RTOL * max |x|`` of each other are equal; the seed is the first of the tied maxima, and
   the foreground is the entries strictly on the seed's side of the mean (entries at the mean are
   background);
4. the 4-connected component of the foreground patch mask that holds the seed (the rule of
   ``scipy.ndimage.label``'s default structure, as in the reference), its extent in patches, times
   the patch size, clipped to the image: the box (``seed_component``, ``component_box``).

Speed. The reference solves the dense generalized problem in float64 on the CPU for each image
(``scipy.linalg.eigh(D - A, D, subset_by_index=[1, 2])``). Here the same eigenvector comes from the
symmetric normalised Laplacian ``L = D^-1/2 (D - A) D^-1/2 = I - D^-1/2 A D^-1/2``: if ``L y = lambda y``
then ``x = D^-1/2 y`` solves the generalized problem with the same lambda, and ``x^T D x = y^T y = 1``,
the normalisation scipy uses. Two solvers of that symmetric problem:

- ``ncut_spectrum``: ``torch.linalg.eigh``, all blocks of an image in one batched call on the
  device that holds the features (the GPU path);
- ``lapack_spectrum``: LAPACK's MRRR driver (``syevr``) asked for eigenpairs 1..2 only, float64,
  one block at a time (the CPU path: a full eigendecomposition is wasted work there).

The sign of an eigenvector is arbitrary, and so is any positive scale: the mean split and the
seed rule are invariant to both (a flipped vector gives the complementary split, which the seed
rule flips back), so no sign convention is needed. ``bench/tokencut_solvers.py`` times them all.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import torch
import torch.nn.functional as F
from scipy import ndimage

TAU = 0.2
EPS = 1e-5
TIE_RTOL = 1e-5  # entries of x closer than this times max |x| count as equal (float32 solves included)
UNIQUE_GAP = 1e-6  # lambda_3 - lambda_2 below this: no unique Ncut vector, the box is arbitrary


def affinity(feats: torch.Tensor, tau: float = TAU, eps: float = EPS) -> torch.Tensor:
    """The binarised cosine-similarity graph of TokenCut.

    Args:
        feats: patch features (..., N, C), CLS token already removed.
        tau: similarity threshold; edges with similarity <= tau get weight ``eps`` (the reference
            keeps ``A > tau`` as 1), the others weight 1. The diagonal is 1 (self-similarity).
        eps: weight of a cut edge, small but positive so the graph stays connected.

    Returns:
        A (..., N, N) in the dtype of ``feats``.
    """
    unit = F.normalize(feats, p=2, dim=-1)
    sim = unit @ unit.transpose(-2, -1)
    return torch.where(sim > tau, torch.ones_like(sim), torch.full_like(sim, eps))


def ncut_spectrum(adjacency: torch.Tensor, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Ncut vectors and the gaps ``lambda_3 - lambda_2`` of ``(D - A) x = lambda D x``.

    Solved as the symmetric standard problem of ``I - D^-1/2 A D^-1/2`` with one batched
    ``torch.linalg.eigh`` on ``adjacency``'s device, mapped back by ``x = D^-1/2 y``.

    Args:
        adjacency: (..., N, N) symmetric, positive entries (``affinity``), N >= 3.
        dtype: solver precision. float64 agrees with the reference's float64 solve; float32 is
            faster on GPUs (see ``bench/tokencut_solvers.py``).

    Returns:
        ``(x (..., N), gap (...))`` in ``dtype``: the second-smallest generalized eigenvectors,
        ``x^T D x = 1``, sign arbitrary; a gap below ``UNIQUE_GAP`` means ``x`` is not unique
        (e.g. a complete graph, where every similarity is above tau).
    """
    a = adjacency.to(dtype)
    inv_sqrt = a.sum(-1).rsqrt()
    n = a.shape[-1]
    laplacian = torch.eye(n, dtype=dtype, device=a.device) - inv_sqrt[..., :, None] * a * inv_sqrt[..., None, :]
    laplacian = (laplacian + laplacian.transpose(-2, -1)) / 2  # exact symmetry for eigh
    values, vectors = torch.linalg.eigh(laplacian)  # ascending eigenvalues
    return inv_sqrt * vectors[..., 1], values[..., 2] - values[..., 1]


def second_eigenvectors(adjacency: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The Ncut vectors (..., N) alone (see ``ncut_spectrum``)."""
    return ncut_spectrum(adjacency, dtype)[0]


def lapack_spectrum(adjacency: np.ndarray) -> tuple[np.ndarray, float]:
    """Ncut vector and gap from the normalised Laplacian's eigenpairs 1..2 only (LAPACK ``syevr``, float64).

    Args:
        adjacency: (N, N), N >= 3.

    Returns:
        ``(x (N,) float64 with x^T D x = 1, gap lambda_3 - lambda_2)``, as ``ncut_spectrum``.
    """
    a = np.asarray(adjacency, dtype=np.float64)
    inv_sqrt = 1.0 / np.sqrt(a.sum(1))
    laplacian = np.eye(len(a)) - inv_sqrt[:, None] * a * inv_sqrt[None, :]
    values, vectors = scipy.linalg.eigh(laplacian, subset_by_index=[1, 2], driver="evr")
    return inv_sqrt * vectors[:, 0], float(values[1] - values[0])


def reference_spectrum(adjacency: np.ndarray, subset: bool = True) -> tuple[np.ndarray, float]:
    """The reference solve: dense generalized float64 ``scipy.linalg.eigh(D - A, D)`` on the CPU.

    Args:
        adjacency: (N, N).
        subset: ask LAPACK for eigenpairs 1..2 only, as TokenCut does; False solves them all.

    Returns:
        ``(x (N,) float64 with x^T D x = 1, gap lambda_3 - lambda_2)``.
    """
    a = np.asarray(adjacency, dtype=np.float64)
    d = np.diag(a.sum(1))
    if subset:
        values, vectors = scipy.linalg.eigh(d - a, d, subset_by_index=[1, 2])
        return vectors[:, 0], float(values[1] - values[0])
    values, vectors = scipy.linalg.eigh(d - a, d)
    return vectors[:, 1], float(values[2] - values[1])


def second_eigenvector_reference(adjacency: np.ndarray, subset: bool = True) -> np.ndarray:
    """The reference Ncut vector alone (see ``reference_spectrum``)."""
    return reference_spectrum(adjacency, subset)[0]


def bipartition(vector: np.ndarray) -> tuple[np.ndarray, int]:
    """Foreground = entries above the mean, flipped if needed so that the seed is foreground.

    Args:
        vector: an Ncut vector (N,), any sign and scale.

    Returns:
        ``(foreground (N,) bool, seed index)``. The seed is ``argmax |x|``, the first of the
        entries within ``TIE_RTOL * max |x|`` of the maximum; the foreground is the entries beyond
        the mean by more than that, on the seed's side (the same for ``x`` and ``-x``).
    """
    vector = np.asarray(vector, dtype=np.float64)
    magnitude = np.abs(vector)
    tol = TIE_RTOL * magnitude.max()
    seed = int(np.flatnonzero(magnitude >= magnitude.max() - tol)[0])
    centred = vector - vector.mean()
    if centred[seed] < 0:
        centred = -centred
    foreground = centred > tol
    foreground[seed] = True  # only matters for a constant vector, which no Ncut vector is
    return foreground, seed


def seed_component(foreground: np.ndarray, seed: tuple[int, int]) -> np.ndarray:
    """The 4-connected component of the (rows, cols) ``foreground`` mask that contains ``seed``.

    It is the seed's component, not the largest one: TokenCut trusts the most salient patch.
    """
    labels, _ = ndimage.label(foreground)  # default structure: 4-connectivity
    label = labels[seed]
    if label == 0:
        raise ValueError(f"the seed {seed} is not in the foreground mask")
    return labels == label


def component_box(component: np.ndarray, patch: int, image_size: tuple[int, int]) -> np.ndarray:
    """Box ``x0, y0, x1, y1`` in pixels of a patch mask: its extent times the patch size, clipped.

    Args:
        component: (rows, cols) bool mask.
        patch: patch size in pixels.
        image_size: (height, width) of the image before padding; only ``x1, y1`` can exceed it
            (padding is added at the right and bottom), so only they are clipped.
    """
    rows, cols = np.nonzero(component)
    height, width = image_size
    return np.array([cols.min() * patch, rows.min() * patch,
                     min((cols.max() + 1) * patch, width), min((rows.max() + 1) * patch, height)],
                    dtype=np.float64)


@dataclass
class Discovery:
    """What TokenCut finds in one image from one block's features.

    Attributes:
        box: ``x0, y0, x1, y1`` in pixels of the unpadded image.
        seed: (row, col) of the seed patch.
        foreground: (rows, cols) bool, the mean split after the seed rule.
        component: (rows, cols) bool, the seed's connected component (the object).
        vector: (rows, cols) the Ncut vector, signed so that the foreground is where it is large.
    """

    box: np.ndarray
    seed: tuple[int, int]
    foreground: np.ndarray
    component: np.ndarray
    vector: np.ndarray


def discover(vector: np.ndarray, grid: tuple[int, int], patch: int, image_size: tuple[int, int]) -> Discovery:
    """Steps 3-4 of TokenCut on one Ncut vector (N = rows * cols, row-major)."""
    vector = np.asarray(vector, dtype=np.float64)
    foreground, seed = bipartition(vector)
    signed = vector if vector[seed] >= vector.mean() else -vector
    seed_rc = (seed // grid[1], seed % grid[1])
    fg = foreground.reshape(grid)
    component = seed_component(fg, seed_rc)
    return Discovery(component_box(component, patch, image_size), seed_rc, fg, component, signed.reshape(grid))
