"""The singular values of one block's sub-block Jacobians, as seed 003's Figs. 7-8 draw "the spectrum of the
Jacobian of one SAB" (``make conditioning spectrum=true``).

For each measured block, on the first image: the dense float64 Jacobian of the attention sub-block and of the MLP
sub-block with respect to their normalised input tokens (seed 000's Eq. 7 K_l, ``analysis/sub_blocks.py``), with
the block's own shortcut (``K_l + g I``: g = 1 for a skip,
0 for skipless, the decayed gain; the same matrices as ``dense_check``'s kappa), and all its singular values,
largest first. Dense, so small inputs only (``dense_max_entries``).

At a real input size (224 px: 197 tokens of a ViT-B/16, ``K`` of size 151 296 squared) the attention Jacobian's
ends are computed matrix-free instead, at every size (``spectrum_ends``): Lanczos (``analysis/lanczos.py``, ``ends``)
on ``(K + g I)(K + g I)^T``, each product one vector-Jacobian and one Jacobian-vector product of the branch
(``analysis/jacobians.gram_matvec``, the operator of the ``blocks`` measure), gives its ``k`` largest and ``k``
smallest eigenvalues, the squared singular values at both ends of the spectrum; ``kappa`` is the square root of
the operator's (the rules for ∞ and for a bound are ``condition_number.py``'s). Where the dense spectrum fits as
well, both are kept and their largest relative difference is recorded (``ends_vs_dense``): the check.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from skipless.analysis.condition_number import Solver, condition_from_spectrum, zero_threshold
from skipless.analysis.jacobians import BRANCHES, float_copy, gram_matvec, sub_block_jacobian_dense
from skipless.analysis.lanczos import extreme_eigenvalues
from skipless.analysis.sub_blocks import embed_tokens, has_finite_weights, shortcut_gains, traced_blocks
from skipless.models.attention import use_explicit_attention


def dense_block_jacobians(model: torch.nn.Module, image: torch.Tensor, blocks: Sequence[int],
                          max_entries: int) -> Iterator[tuple[int, str, torch.Tensor]]:
    """``(block, "attn" | "mlp", K + g I)`` for each block of ``blocks`` on one ``(1, 3, H, W)`` image: the dense
    float64 sub-block Jacobians with the block's own shortcut gain (``dense_check`` and ``spectrum`` read them)."""
    net = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        x = embed_tokens(net, image[:1].double())
    for i, block, t in traced_blocks(net, x, blocks):
        g_attn, g_mlp = shortcut_gains(block)
        for name, u, g in (("attn", t.u_attn, g_attn), ("mlp", t.u_mlp, g_mlp)):
            yield i, name, sub_block_jacobian_dense(block, u, name, g, max_entries=max_entries)


def block_spectra(model: torch.nn.Module, image: torch.Tensor, blocks: Sequence[int],
                  max_entries: int) -> dict[str, dict[str, list[float]]]:
    """``{block: {"attn": singular values, "mlp": singular values}}`` of ``K + g I``, largest first."""
    out: dict[str, dict[str, list[float]]] = {}
    for i, name, k in dense_block_jacobians(model, image, blocks, max_entries):
        out.setdefault(str(i), {})[name] = torch.linalg.svdvals(k).tolist()
    return out


def _sqrt(values: Sequence[float]) -> list[float]:
    return [max(float(v), 0.0) ** 0.5 for v in values]


def spectrum_ends(model: torch.nn.Module, image: torch.Tensor, blocks: Sequence[int], solver: Solver,
                  ends: int) -> dict[str, dict[str, dict[str, Any]]]:
    """``{block: {"attn": ends}}`` on one ``(1, 3, H, W)`` image, matrix-free: ``ends`` holds ``top`` (the ``ends``
    largest singular values of ``K + g I``, largest first), ``bottom`` (the smallest, smallest first), their relative
    residuals (``||A y - theta y|| / theta`` of ``A = (K + g I)(K + g I)^T``), ``dim`` (``n d``), ``kappa`` (of
    ``K + g I``: the square root of the operator's, ``inf`` by ``condition_number.py``'s rules), ``converged``,
    ``products`` and the operator's ``condition``. Lanczos runs as ``solver`` says."""
    net = float_copy(model, solver.dtype)
    with torch.no_grad():
        x = embed_tokens(net, image[:1].to(next(net.parameters()).device, solver.dtype))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    finite = has_finite_weights(net)
    for i, block, t in traced_blocks(net, x, blocks):
        g_attn, _ = shortcut_gains(block)
        for name, u, g in (("attn", t.u_attn, g_attn),):  # the SAB only: seeds/003 Figs. 7-8 (ours: the MLP's cost 2x)
            f = BRANCHES[name](block)
            with use_explicit_attention(block):
                matvec, dim = gram_matvec(f, u.detach(), float(g))
                s = extreme_eigenvalues(matvec, dim, tol=solver.tol, max_iter=solver.max_iter, seed=solver.seed,
                                        dtype=solver.dtype, device=u.device,
                                        zero_tol=zero_threshold(dim, solver.dtype), ends=ends) if finite else None
            if s is None:
                out.setdefault(str(i), {})[name] = {"kappa": float("inf"), "top": [], "bottom": [], "dim": dim}
                continue
            c = condition_from_spectrum(s, solver.dtype)
            out.setdefault(str(i), {})[name] = {
                "top": _sqrt(s.top), "bottom": _sqrt(s.bottom), "dim": dim,
                "top_residual": [r / abs(v) if v else float("inf") for r, v in zip(s.top_residuals, s.top)],
                "bottom_residual": [r / abs(v) if v else float("inf") for r, v in zip(s.bottom_residuals, s.bottom)],
                "kappa": c.value ** 0.5, "converged": c.converged, "reason": c.reason, "products": s.iterations,
                "condition": c.to_json()}
    return out


def ends_vs_dense(ends: dict[str, dict[str, dict[str, Any]]],
                  dense: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """The largest relative difference between each matrix-free end and the dense spectrum's same-rank value."""
    out: dict[str, dict[str, float]] = {}
    for b, row in ends.items():
        for name, e in row.items():
            values = dense.get(b, {}).get(name)
            if not values or not e["top"]:
                continue
            pairs = list(zip(e["top"], values)) + list(zip(e["bottom"], values[::-1]))
            out.setdefault(b, {})[name] = max(abs(a - v) / abs(v) for a, v in pairs)
    return out


def spectrum_figure(spectra: dict[str, dict[str, dict[str, list[float]]]], path: Path,
                    ends: dict[str, dict[str, dict[str, dict[str, Any]]]] | None = None) -> Path | None:
    """One panel per backbone: each block's attention (solid) and MLP (dashed) singular values, log scale, where the
    dense spectrum was formed; the matrix-free ends (``ends``: per backbone, ``spectrum_ends``' result) as dots at
    their ranks (the top ones at 0, 1, ..., the bottom ones at n d - 1, n d - 2, ...), hollow when unconverged."""
    ends = ends or {}
    names = list(dict.fromkeys([*spectra, *ends]))
    if not names:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4), squeeze=False, sharey=True)
    for ax, name in zip(axes[0], names):
        per_block, per_block_ends = spectra.get(name, {}), ends.get(name, {})
        blocks = list(dict.fromkeys([*per_block, *per_block_ends]))
        colours = plt.cm.viridis(torch.linspace(0, 0.9, max(1, len(blocks))).numpy())
        for colour, block in zip(colours, blocks):
            for branch, style in (("attn", "-"), ("mlp", "--")):
                if branch not in per_block.get(block, {}):
                    continue
                s = torch.tensor(per_block[block][branch]).clamp_min(1e-30)
                ax.semilogy(s.numpy(), style, color=colour, lw=1,
                            label=f"block {block} {branch}: kappa {float(s[0] / s[-1]):.3g}")
            for branch, e in per_block_ends.get(block, {}).items():
                if not e["top"]:
                    continue
                ranks = list(range(len(e["top"]))) + [e["dim"] - 1 - r for r in range(len(e["bottom"]))]
                values = [max(v, 1e-30) for v in [*e["top"], *e["bottom"]]]
                ax.semilogy(ranks, values, "o", ms=3, color=colour, mfc=colour if e["converged"] else "none",
                            label=f"block {block} {branch}, matrix-free ends (n d = {e['dim']}): "
                                  f"kappa {'≥ ' if not e['converged'] else ''}{e['kappa']:.3g}")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("singular value index")
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("singular value of K + g I")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def kappas(spectrum: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    """Each spectrum's sigma_max / sigma_min (``inf`` when the smallest is 0)."""
    return {b: {k: (v[0] / v[-1] if v[-1] > 0 else float("inf")) for k, v in row.items()} for b, row in spectrum.items()}
