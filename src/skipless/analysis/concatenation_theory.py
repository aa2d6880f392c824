"""Seed 000's assumption that the network Jacobian is no worse conditioned than its worst sub-block (Eq. 6) and
the bound behind it (Appendix A.4.4, Eq. 37), as computations.

- Eq. 6: ``kappa(J) <= max_l {kappa(J_l), kappa(J^_l)}``, ``J = [J_1, J^_1, ..., J_L, J^_L]`` the Jacobian of the
  last block's output tokens (``mnd`` rows) with respect to the parameters of each attention sub-block
  (``J_l``: its pre-norm and attention) and MLP sub-block (``J^_l``: its pre-norm, MLP and LayerScale).
  ``eq6_terms`` forms the dense ``J`` (``jacobians.network_jacobian_dense``), splits its columns by sub-block
  and returns every ``kappa``. Here ``kappa`` of an ``r x c`` matrix is ``sqrt(lambda_max / lambda_min)`` of its
  ``r x r`` Gram matrix (``row_kappa``: infinite when fewer than ``r`` columns or a rank-deficient block). As
  ``J J^T`` is the sum of the blocks' ``J_l J_l^T``, and ``(a_1 + ... ) / (b_1 + ...) <= max_l a_l / b_l`` for
  positive ``a_l, b_l`` (the largest and smallest eigenvalues of a sum of positive semi-definite matrices are
  at most and at least the sums of theirs), Eq. 6 holds exactly whenever every sub-block has full row rank:
  no coherence or balance is needed for a Jacobian that is wide, as a network's is.
- Eq. 37: for ``M = [A B]`` with tall blocks (``sigma_min`` as the minimum of ``|A x| / |x|``), ``kappa(M) <= tau
  sqrt((1 + rho / s_max^2) / (1 - rho / s_min^2)) kappa_max``, ``rho = ||A^T B||_2``, ``tau`` the ratio of the
  blocks' norms, valid while ``rho < s_min^2``. ``concatenation_terms`` returns both sides.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .jacobians import network_jacobian_dense


SUB_BLOCK_PARTS = {"attn": ("norm1", "attn", "ls1"), "mlp": ("norm2", "mlp", "ls2")}  # timm's Block's children


def row_kappa(m: torch.Tensor) -> float:
    """``sqrt(lambda_max / lambda_min)`` of ``m m^T`` (``r x r``): ``sigma_max / sigma_min`` over all ``r`` rows,
    infinite when ``m`` has fewer than ``r`` columns or rows that its columns do not span."""
    rows, cols = m.shape
    if cols < rows:
        return math.inf
    s = torch.linalg.svdvals(m.double())
    return math.inf if float(s[-1]) <= float(s[0]) * 1e-13 else float(s[0] / s[-1])


def sub_block_columns(model: nn.Module) -> dict[str, list[int]]:
    """``{"attn 0": [column, ...], "mlp 0": [...], ...}``: the columns of ``network_jacobian_dense`` (parameters
    in ``model.blocks.named_parameters()`` order) that belong to each sub-block's parameters."""
    out: dict[str, list[int]] = {}
    start = 0
    for name, p in model.blocks.named_parameters():
        index, part = name.split(".")[:2]
        kind = next((k for k, parts in SUB_BLOCK_PARTS.items() if part in parts), None)
        if kind is None:
            raise ValueError(f"blocks.{name} belongs to no sub-block; expected a part among {SUB_BLOCK_PARTS}")
        out.setdefault(f"{kind} {index}", []).extend(range(start, start + p.numel()))
        start += p.numel()
    return out


def eq6_terms(model: nn.Module, images: torch.Tensor) -> dict[str, float | dict[str, float]]:
    """``{"kappa_J", "blocks": {sub-block: kappa}, "max_block", "holds"}`` on ``images`` (dense, float64)."""
    jac = network_jacobian_dense(model, images)
    blocks = {name: row_kappa(jac[:, cols]) for name, cols in sub_block_columns(model).items()}
    whole = row_kappa(jac)
    worst = max(blocks.values())
    return {"kappa_J": whole, "blocks": blocks, "max_block": worst, "holds": whole <= worst * (1 + 1e-9)}


def concatenation_terms(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """Both sides of Eq. 37 for ``M = [a b]`` (tall blocks: at least as many rows as columns), with ``rho``,
    ``tau``, ``s_max``, ``s_min`` and ``valid`` (``rho < s_min^2``, where the bound is defined)."""
    sa, sb = torch.linalg.svdvals(a.double()), torch.linalg.svdvals(b.double())
    s_max, s_min = max(float(sa[0]), float(sb[0])), min(float(sa[-1]), float(sb[-1]))
    rho = float(torch.linalg.matrix_norm(a.double().T @ b.double(), ord=2))
    tau = max(float(sa[0]), float(sb[0])) / min(float(sa[0]), float(sb[0]))
    kappa_max = max(float(sa[0] / sa[-1]), float(sb[0] / sb[-1]))
    s = torch.linalg.svdvals(torch.cat([a, b], dim=1).double())
    valid = rho < s_min ** 2
    bound = tau * math.sqrt((1 + rho / s_max ** 2) / (1 - rho / s_min ** 2)) * kappa_max if valid else math.inf
    return {"kappa_M": float(s[0] / s[-1]), "bound": bound, "rho": rho, "tau": tau, "s_max": s_max, "s_min": s_min,
            "kappa_max": kappa_max, "valid": valid}
