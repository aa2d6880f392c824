"""Seed 003's bounds for the sub-blocks that are not attention: the MLP (Sec. 4.1, Eq. 6) and ConvMixer's
depthwise convolution (App. B, Eq. 24), each beside linear attention's (Prop. 4.1, ``attention_theory.py``).

- Eq. 6: ``kappa(MLP(X)) = kappa(W_down W_up X) <= C_down C_up sigma_max / sigma_min`` with a linear activation,
  ``C = kappa(W)`` and sigma of ``X``; "the MLP transformation does not worsen conditioning as severely [as
  self-attention], since it has a much lower bound". Read here: no biases; ``X`` the d x n token matrix
  (columns are tokens, as the equation writes it; kappa is the same for its transpose), ``W_up`` (h x d) and
  ``W_down`` (d x h) as timm's ``fc1.weight`` and ``fc2.weight``; kappa of a rectangular matrix is Eq. 4's
  ``||A||_2 ||A^+||_2``, the ratio of its extreme nonzero singular values (``attention_theory.kappa``: all
  min(rows, columns) of them are nonzero for the matrices drawn here). ``eq6_terms`` returns both sides. The step
  behind it, ``kappa(AB) <= kappa(A) kappa(B)``, holds when the factors are square (or the left one has full
  column rank and the right one full row rank); the MLP's ``W_down`` is wide and ``W_up`` tall, and their
  product ``W_down W_up`` (d x d) can be as ill-conditioned as a square Gaussian matrix although each factor has
  kappa about 3 (h = 4d): ``W_up = [I; 0]``, ``W_down = [0, I]`` has kappa 1 each and a zero product.
- Eq. 24: ``kappa(W_CD X_l) <= kappa(W_CD) kappa(X_l) <= C_CD kappa(X_l)`` for the depthwise convolution, linear
  and without batch norm, and "compared to the self-attention mechanism, the ConvDepthwise transformation
  demonstrates better conditioning with a lower bound". Read here: ``X_l`` the h x P matrix of h channels over P
  positions; ``W_CD`` the convolution as the linear map of ``vec(X_l)`` it is, block-diagonal over channels, each
  block ``T_c`` the P x P matrix of channel c's k x k kernel with zero "same" padding (timm's ConvMixer), no bias;
  ``kappa(W_CD)`` its condition number (the largest singular value of any ``T_c`` over the smallest of any);
  ``W_CD X_l`` the h x P output. With one kernel shared by every channel the output is the matrix product
  ``X_l T^T`` and the bound holds (T is square); with a kernel per channel, as a depthwise convolution has, the
  output is not a product of ``X_l`` with one matrix and the bound can fail: ``eq24_counterexample`` gives two
  channels with orthonormal rows (kappa(X_l) = 1) and two well-conditioned kernels (kappa(W_CD) about 1.4) whose
  outputs are parallel (kappa infinite).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .attention_theory import kappa


def eq6_terms(x: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> dict[str, float]:
    """Eq. 6's two sides for tokens ``x`` (n x d, rows are tokens) through a linear MLP ``x -> x W_up^T W_down^T``
    (``w_up`` h x d, ``w_down`` d x h): ``left`` = kappa(W_down W_up X^T), ``right`` = C_down C_up kappa(X), and
    ``C_up``, ``C_down``, ``kappa_x``, ``kappa_product`` = kappa(W_down W_up)."""
    x, w_up, w_down = x.double(), w_up.double(), w_down.double()
    c_up, c_down, kappa_x = kappa(w_up), kappa(w_down), kappa(x)
    return {"left": kappa(w_down @ w_up @ x.T), "right": c_down * c_up * kappa_x, "C_up": c_up, "C_down": c_down,
            "kappa_x": kappa_x, "kappa_product": kappa(w_down @ w_up)}


def eq6_gaussian_terms(n: int, d: int, ratio: int, generator: torch.Generator) -> dict[str, float]:
    """One draw of Eq. 6 with X (n x d), W_up (ratio d x d) and W_down (d x ratio d) i.i.d. N(0, 1)."""
    x, w_up, w_down = (torch.randn(*shape, generator=generator, dtype=torch.float64)
                       for shape in ((n, d), (ratio * d, d), (d, ratio * d)))
    return eq6_terms(x, w_up, w_down)


def depthwise_conv(module: torch.nn.Module) -> torch.nn.Conv2d:
    """The first depthwise convolution (``groups`` = channels > 1) of ``module``, e.g. a ConvMixer's first block's."""
    for m in module.modules():
        if isinstance(m, torch.nn.Conv2d) and m.groups == m.in_channels == m.out_channels > 1:
            return m
    raise ValueError(f"{type(module).__name__} has no depthwise convolution (a Conv2d with groups = channels)")


def depthwise_operators(weight: torch.Tensor, size: int) -> torch.Tensor:
    """Each channel's convolution as a matrix: ``(h, P, P)``, ``P = size^2``, for a depthwise ``weight`` (h, 1, k, k)
    with zero "same" padding and no bias: ``T[c] @ x[c].flatten() == conv(x)[c].flatten()``."""
    h, positions = weight.shape[0], size * size
    basis = torch.eye(positions, dtype=weight.dtype).reshape(positions, 1, size, size).expand(positions, h, size, size)
    out = F.conv2d(basis, weight, padding="same", groups=h)  # (P inputs, h, size, size)
    return out.reshape(positions, h, positions).permute(1, 2, 0)


def eq24_terms(x: torch.Tensor, weight: torch.Tensor) -> dict[str, float]:
    """Eq. 24's two sides for ``x`` (h, size, size) through the depthwise ``weight`` (h, 1, k, k), float64:
    ``left`` = kappa(W_CD X_l), ``right`` = kappa(W_CD) kappa(X_l), ``C_CD``, ``kappa_x``."""
    x, weight = x.double(), weight.double()
    h, size = x.shape[0], x.shape[-1]
    out = F.conv2d(x.unsqueeze(0), weight, padding="same", groups=h).reshape(h, size * size)
    s = torch.linalg.svdvals(depthwise_operators(weight, size))  # (h, P)
    c_cd = float(s.max() / s.min())
    out_s = torch.linalg.svdvals(out)
    left = math.inf if float(out_s[-1]) <= float(out_s[0]) * 1e-13 else float(out_s[0] / out_s[-1])
    kappa_x = kappa(x.reshape(h, -1))
    return {"left": left, "right": c_cd * kappa_x, "C_CD": c_cd, "kappa_x": kappa_x}


def eq24_counterexample(size: int = 6) -> tuple[torch.Tensor, torch.Tensor]:
    """Two channels ``x`` (2, size, size) with orthonormal rows and a depthwise 3 x 3 ``weight`` (2, 1, 3, 3), each
    kernel a horizontal ``[-a, 1, a]`` and ``[a, 1, -a]`` (``T_c = I +- a K``, K the skew-symmetric horizontal
    difference, kappa(T_c) <= sqrt(1 + 4 a^2)), chosen so that both channels' outputs are the same vector:
    ``x_2 = T_2^-1 T_1 x_1`` is orthogonal to ``x_1`` when ``a lambda = 1`` for an eigenvalue ``i lambda`` of K (the
    Cayley transform ``(I - aK)^-1 (I + aK)`` then turns that eigenplane by 90 degrees)."""
    a = 1 / (2 * math.cos(math.pi / (size + 1)))  # K's largest eigenvalue is 2 cos(pi / (size + 1)) i
    weight = torch.zeros(2, 1, 3, 3, dtype=torch.float64)
    weight[0, 0, 1] = torch.tensor([-a, 1.0, a], dtype=torch.float64)
    weight[1, 0, 1] = torch.tensor([a, 1.0, -a], dtype=torch.float64)
    t = depthwise_operators(weight, size)
    values, vectors = torch.linalg.eig((t[0] - t[1]) / (2 * a))  # K
    x1 = vectors[:, int(torch.argmax(values.imag))].real
    x1 = x1 / x1.norm()
    x2 = torch.linalg.solve(t[1], t[0] @ x1)
    return torch.stack([x1, x2 / x2.norm()]).reshape(2, size, size), weight
