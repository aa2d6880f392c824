"""The singular values of one block's sub-block Jacobians, as seed 003's Figs. 7-8 draw "the spectrum of the
Jacobian of one SAB" (``make conditioning spectrum=true``).

For each measured block, on the first image: the dense float64 Jacobian of the attention sub-block and of the MLP
sub-block with respect to their normalised input tokens (seed 000's Eq. 7 K_l, ``analysis/sub_blocks.py``), with
the block's own shortcut (``K_l + g I``: g = 1 for a skip,
0 for skipless, the decayed gain; the same matrices as ``dense_check``'s kappa), and all its singular values,
largest first. Dense, so small inputs only (``dense_max_entries``; the check before any measurement names
``image_size``): at large sizes the extreme values are the Lanczos kappa of the other measures.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from skipless.analysis.jacobians import sub_block_jacobian_dense
from skipless.analysis.sub_blocks import embed_tokens, shortcut_gains, traced_blocks


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


def spectrum_figure(spectra: dict[str, dict[str, dict[str, list[float]]]], path: Path) -> Path | None:
    """One panel per backbone: each block's attention (solid) and MLP (dashed) singular values, log scale."""
    if not spectra:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(spectra), figsize=(4.2 * len(spectra), 3.4), squeeze=False, sharey=True)
    for ax, (name, per_block) in zip(axes[0], spectra.items()):
        colours = plt.cm.viridis(torch.linspace(0, 0.9, max(1, len(per_block))).numpy())
        for colour, (block, values) in zip(colours, per_block.items()):
            for branch, style in (("attn", "-"), ("mlp", "--")):
                s = torch.tensor(values[branch]).clamp_min(1e-30)
                ax.semilogy(s.numpy(), style, color=colour, lw=1,
                            label=f"block {block} {branch}: kappa {float(s[0] / s[-1]):.3g}")
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
