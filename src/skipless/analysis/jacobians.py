"""Condition numbers of the network Jacobian ``kappa(J J^T)`` and of the sub-block kernels ``kappa(K K^T)``.

Ji et al., "Cutting the Skip" (Section 4: F in Eq. 5, the bound in Eq. 6, K in Eq. 7; Appendix A.7, Tables 5 and 6):

* ``J = dF/dtheta`` where ``F`` stacks the output tokens of the last block for ``m`` images and
  ``theta`` is every parameter of the blocks (LayerNorms, attention, MLP, LayerScale). The paper's
  ``f(x; theta)`` omits the token embedding and the head, so the input here is the fixed token
  embedding ``embed_tokens(model, images)`` (patch embedding, CLS, position embedding: not in
  ``theta``) and ``F`` is taken before the final LayerNorm, all ``n`` tokens, CLS included. ``J`` is
  ``mnd x p``; ``kappa(J J^T)`` is finite only if ``mnd <= p`` (always so for ViT-S: 75 648 rows for
  one 224 px image against 21.3 M parameters).
* ``K = d branch(u) / du``, the Jacobian of the attention (or MLP) branch with respect to its
  *normalised* input ``u = norm1(x)`` (``norm2(mid)``), ``nd x nd`` for one image, with
  ``shortcut * I`` added: a skip model passes ``g = 1`` and gets Table 6's
  ``kappa((K + I)(K + I)^T)``, a skipless one ``g = 0`` and ``kappa(K K^T)``, the decayed mode its
  coefficient (``shortcut_gains``). Why at the normalised input: the LayerNorm Jacobian is singular
  (each token loses its mean and its radial direction), so ``x -> attn(norm1(x))`` has
  ``kappa = ∞`` for every initialisation and would say nothing; Eq. 7's ``K_l = d f_SA / d x^`` is the
  branch's own Jacobian.

Matrix-free: ``J J^T u = J (J^T u)``, one vector-Jacobian product (``torch.func.vjp``, whose pullback
is built once and called every iteration) and one Jacobian-vector product (``torch.func.jvp``;
``torch.func.linearize`` was measured no faster per product on CPU, 0.50 s per ``J J^T v`` either
way on ViT-S at 112 px in float64 on one thread, and costs about 6 s of tracing up front), fed to
Lanczos (``lanczos.py``); the rules for ∞ are ``condition_number.py``'s. Forward-mode autodiff does
not go through the fused SDPA kernels, so everything runs under ``use_explicit_attention``. The caller's
model is never touched: we work on a deep copy in ``dtype`` (float64 by default) in eval mode.
``*_dense`` form the Jacobian with ``torch.func.jacrev`` for small cases (the tests' reference).
"""
from __future__ import annotations

import copy
import warnings
from typing import Callable, Iterable

import torch
from torch import nn
from torch.func import functional_call, jacrev, jvp, vjp

from ..errors import SkiplessError
from ..models.attention import use_explicit_attention
from .condition_number import DIVERGED, OVERFLOW, Condition, Solver, infinite_condition, operator_condition
from .sub_blocks import attention_branch, embed_tokens, has_finite_weights, mlp_branch, shortcut_gains, traced_blocks

__all__ = [
    "JacobianArgumentError", "JacobianTooLargeError", "network_jacobian_condition", "network_jacobian_dense",
    "sub_block_jacobian_condition", "sub_block_jacobian_dense", "block_jacobian_conditions", "check_dense_size",
    "float_copy", "gram_matvec",
]

BRANCHES = {"attn": attention_branch, "mlp": mlp_branch}
Watch = Callable[[int, float, float, float, float], bool]  # lanczos.extreme_eigenvalues' watch
DEFAULT_MAX_ENTRIES = 20_000_000


class JacobianArgumentError(SkiplessError, ValueError):
    """Images, tokens, a branch name or block indices the Jacobian diagnostics cannot use."""


class JacobianTooLargeError(SkiplessError, ValueError):
    """A dense Jacobian that would not fit the allowed number of entries."""


def float_copy(module: nn.Module, dtype: torch.dtype) -> nn.Module:
    """A deep copy of ``module`` in ``dtype``, in eval mode, with no parameter requiring a gradient."""
    copied = copy.deepcopy(module).to(dtype).eval()
    for p in copied.parameters():
        p.requires_grad_(False)
    return copied


def _check_images(images: torch.Tensor) -> torch.Tensor:
    if images.ndim == 3:
        images = images.unsqueeze(0)
    if images.ndim != 4:
        raise JacobianArgumentError(f"expected images of shape (m, C, H, W), got {tuple(images.shape)}")
    return images


def check_dense_size(rows: int, cols: int, max_entries: float, lower: str) -> None:
    if rows * cols > max_entries:
        raise JacobianTooLargeError(
            f"the dense Jacobian would be {rows} x {cols} = {rows * cols:.3g} entries, above "
            f"max_entries = {max_entries:.3g}; lower {lower} or use the matrix-free condition number")


def _load_jvp_decompositions_quietly() -> None:
    """torch loads its forward-mode decompositions on the first ``jvp`` of a process and scripts them with
    its own deprecated ``torch.jit.script``: one FutureWarning that is torch's, not the user's (issue 27,
    item 12). A first tiny ``jvp`` under a filter for that message only; later calls load nothing."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
        jvp(torch.sin, (torch.zeros(1),), (torch.ones(1),))


def gram_matvec(f: Callable, primal, shortcut: float = 0.0) -> tuple[Callable[[torch.Tensor], torch.Tensor], int]:
    """``v -> (A + g I)(A + g I)^T v`` for ``A = df/dprimal`` (``g I`` only when the input and output
    spaces coincide), and the output size."""
    _load_jvp_decompositions_quietly()
    out, pullback = vjp(f, primal)

    def matvec(v: torch.Tensor) -> torch.Tensor:
        v = v.view_as(out)
        (w,) = pullback(v)
        if shortcut:
            w = w + shortcut * v
        y = jvp(f, (primal,), (w,))[1]
        if shortcut:
            y = y + shortcut * w
        return y.reshape(-1)

    return matvec, out.numel()


def _network(model: nn.Module, images: torch.Tensor, dtype: torch.dtype):
    """The float copy, ``F(theta) = blocks(x0)`` and the blocks' parameters."""
    net = float_copy(model, dtype)
    with torch.no_grad():
        x0 = embed_tokens(net, _check_images(images).to(next(net.parameters()).device, dtype))
    params = {k: v.detach() for k, v in net.blocks.named_parameters()}
    return net, (lambda p: functional_call(net.blocks, p, (x0,))), params, x0


def network_jacobian_condition(
    model: nn.Module,
    images: torch.Tensor,
    solver: Solver = Solver(),
    *,
    watch: Watch | None = None,
) -> Condition:
    """``kappa(J J^T)`` of the blocks' output tokens with respect to the blocks' parameters (Table 5).

    Args:
        model: a ``SkiplessViT`` (not modified).
        images: ``(m, C, H, W)`` (or one ``(C, H, W)`` image); ``J J^T`` has size ``m * n * d``.
        solver: Lanczos' settings and the working dtype (``condition_number.Solver``).
        watch: Lanczos' (progress lines and a time budget: ``solve_budget.py``).
    """
    net, f, params, x0 = _network(model, images, solver.dtype)
    if not has_finite_weights(net):
        return infinite_condition(DIVERGED, x0.numel())
    with use_explicit_attention(net), torch.no_grad():
        if not bool(torch.isfinite(f(params)).all()):
            return infinite_condition(OVERFLOW, x0.numel())
    with use_explicit_attention(net):
        matvec, dim = gram_matvec(f, params)
        return operator_condition(matvec, dim, solver, device=x0.device, watch=watch)


def network_jacobian_dense(
    model: nn.Module, images: torch.Tensor, *, max_entries: float = DEFAULT_MAX_ENTRIES,
    dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """The dense ``J`` (``m n d x p``, parameters in ``model.blocks.named_parameters()`` order), for
    small cases; refuses beyond ``max_entries`` entries."""
    net, f, params, x0 = _network(model, images, dtype)
    cols = sum(p.numel() for p in params.values())
    check_dense_size(x0.numel(), cols, max_entries, "the number of images, the resolution or the depth")
    with use_explicit_attention(net):
        jac = jacrev(f)(params)
    return torch.cat([j.reshape(x0.numel(), -1) for j in jac.values()], dim=1)


def _branch(block: nn.Module, u: torch.Tensor, branch: str, dtype: torch.dtype):
    if branch not in BRANCHES:
        raise JacobianArgumentError(f"branch must be one of {', '.join(BRANCHES)}, got {branch!r}")
    if u.ndim != 3:
        raise JacobianArgumentError(f"expected normalised tokens of shape (1, n, d), got {tuple(u.shape)}")
    blk = float_copy(block, dtype)
    return blk, BRANCHES[branch](blk), u.detach().to(next(blk.parameters()).device, dtype)


def sub_block_jacobian_condition(
    block: nn.Module,
    u: torch.Tensor,
    branch: str = "attn",
    shortcut: float = 0.0,
    solver: Solver = Solver(),
    *,
    watch: Watch | None = None,
) -> Condition:
    """``kappa((K + g I)(K + g I)^T)``, ``K`` the ``branch``'s Jacobian at its normalised input ``u``.

    Args:
        block: a ``ResidualBlock`` (not modified).
        u: ``(1, n, d)`` tokens, ``norm1(x)`` for ``"attn"``, ``norm2(mid)`` for ``"mlp"``
            (``trace_block`` gives both).
        branch: ``"attn"`` or ``"mlp"``.
        shortcut: ``g``, the matching entry of ``shortcut_gains(block)`` (1 skip, 0 skipless).
        watch: Lanczos' (``solve_budget.py``).
    """
    blk, f, u = _branch(block, u, branch, solver.dtype)
    if not has_finite_weights(blk):
        return infinite_condition(DIVERGED, u.numel())
    with use_explicit_attention(blk):
        with torch.no_grad():
            if not (bool(torch.isfinite(u).all()) and bool(torch.isfinite(f(u)).all())):
                return infinite_condition(OVERFLOW, u.numel())
        matvec, dim = gram_matvec(f, u, float(shortcut))
        return operator_condition(matvec, dim, solver, device=u.device, watch=watch)


def sub_block_jacobian_dense(
    block: nn.Module, u: torch.Tensor, branch: str = "attn", shortcut: float = 0.0, *,
    max_entries: float = DEFAULT_MAX_ENTRIES, dtype: torch.dtype = torch.float64,
) -> torch.Tensor:
    """The dense ``K + g I`` (``nd x nd``) for small cases; refuses beyond ``max_entries`` entries."""
    blk, f, u = _branch(block, u, branch, dtype)
    check_dense_size(u.numel(), u.numel(), max_entries, "the resolution (fewer tokens) or the width")
    with use_explicit_attention(blk):
        k = jacrev(f)(u).reshape(u.numel(), u.numel())
    return k + shortcut * torch.eye(u.numel(), dtype=k.dtype, device=k.device)


def block_jacobian_conditions(
    model: nn.Module,
    image: torch.Tensor,
    blocks: Iterable[int],
    solver: Solver = Solver(),
    *,
    watches: Callable[[str], Watch | None] | None = None,
) -> dict[int, dict[str, Condition]]:
    """Table 6's per-block kernels: ``{block: {"attn": Condition, "mlp": Condition}}`` for one image.

    One traced forward (``trace_block``) gives each wanted block's ``u_attn`` and ``u_mlp``; each
    branch's ``K`` gets that sub-block's own shortcut gain. One image, not an average over several:
    ``K`` depends on the image only through the tokens it is evaluated at. ``watches``: gives each
    solve its Lanczos ``watch`` from its name (``kappa_attn/block4``: ``solve_budget.py``).
    """
    wanted = sorted(set(int(b) for b in blocks))
    depth = len(model.blocks)
    if not wanted or wanted[0] < 0 or wanted[-1] >= depth:
        raise JacobianArgumentError(f"blocks must be indices in 0..{depth - 1}, got {wanted}")
    image = _check_images(image)
    if image.shape[0] != 1:
        raise JacobianArgumentError(f"expected one image, got a batch of {image.shape[0]}")
    net = float_copy(model, solver.dtype)
    with torch.no_grad():
        x = embed_tokens(net, image.to(next(net.parameters()).device, solver.dtype))
    if not has_finite_weights(net):
        return {b: {k: infinite_condition(DIVERGED, x.numel()) for k in BRANCHES} for b in wanted}
    result: dict[int, dict[str, Condition]] = {}
    for i, blk, t in traced_blocks(net, x, wanted):
        g_a, g_m = shortcut_gains(blk)
        result[i] = {
            name: sub_block_jacobian_condition(blk, u, name, g, solver,
                                               watch=None if watches is None else watches(f"kappa_{name}/block{i}"))
            for name, u, g in (("attn", t.u_attn, g_a), ("mlp", t.u_mlp, g_m))
        }
    return result
