"""``make paper EXP=theory``: the seeds' claims that seconds of computation can check, as a report with
figures (``<root>/theory/report.md``). No training: every scale writes the same report.

| claim | seed, place | computed by |
|---|---|---|
| a diagonal-dominant logit matrix gives a well-conditioned softmax, a diffuse one an ill-conditioned one | 000, App. A.4.1, Fig. 5 | ``analysis/softmax_theory.py`` |
| the moments of ``X X^T``, ``X Z X^T`` and the logits under the init | 000, App. A.4.1, Eqs. 14-20 | ``analysis/softmax_theory.py`` |
| the tokens after the pre-LN look like isotropic Gaussians under the init | 000, App. A.4.1, Fig. 6 | ``fig6`` here |
| linear attention's output kappa <= C kappa(X)^3, C close to 1 | 003, Prop. 4.1 | ``analysis/attention_theory.py`` |
| the skip lowers the attention output's kappa | 003, Prop. 4.2 | ``analysis/attention_theory.py`` |
| a skipless OSA-only stack keeps the token kernel's spectrum | 004, Thm 2.2 | ``analysis/attention_theory.py`` |
| kappa(J) <= max_l kappa(J_l) over the sub-blocks, and the concatenation bound behind it | 000, Eq. 6, App. A.4.4 | ``analysis/concatenation_theory.py`` |

Each row is also a test (tests/test_softmax_theory.py, tests/test_attention_theory.py,
tests/test_concatenation_theory.py).
"""
from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Callable

import torch

from skipless.analysis.attention_theory import (attention_stack_spectra, orthogonal_value_output, prop41_terms,
                                                prop42_terms)
from skipless.analysis.concatenation_theory import concatenation_terms, eq6_terms
from skipless.analysis.softmax_theory import (FIG5_CASES, FIG5_D, FIG5_N, derived_moments, logit_matrices,
                                              monte_carlo_moments, paper_moments, softmax_kappa)
from skipless.atomic import atomic_write
from skipless.config import load_config
from skipless.models import create_vit
from skipless.models.from_config import vit_from_config
from skipless.training.data import diagnostic_images

NAME = "theory"
DRAWS = 1000          # Fig. 5's kappa over this many draws
MOMENT_DRAWS = 4000   # matrices behind each Monte Carlo moment
SEED = 0


def _pyplot():
    """matplotlib's pyplot on the file backend (imported when a figure is drawn: the tests of the numbers need none)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _quantiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=10)
    return f"{statistics.median(values):.3g} (10-90%: {q[0]:.3g} to {q[-1]:.3g})"


def fig5(folder: Path) -> tuple[list[str], dict[str, float]]:
    """Fig. 5: one draw of each case as a picture, and kappa over ``DRAWS`` draws."""
    plt = _pyplot()

    g = torch.Generator().manual_seed(SEED)
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
    lines, medians = [], {}
    for ax, (name, (alpha, beta)) in zip(axes, FIG5_CASES.items()):
        many = softmax_kappa(logit_matrices(FIG5_N, FIG5_D, alpha, beta, g, DRAWS)["C"]).tolist()
        one = logit_matrices(FIG5_N, FIG5_D, alpha, beta, g)["C"][0]
        image = ax.imshow(torch.softmax(one, -1).numpy(), cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"{name}: alpha {alpha:g}, beta {beta:g}\nkappa {float(softmax_kappa(one)):.3g}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        medians[name] = statistics.median(many)
        lines.append(f"| {name} | {alpha:g} | {beta:g} | {_quantiles(many)} | "
                     f"{'about 1.1' if name == 'peak' else 'about 730 (one draw)'} |")
    fig.colorbar(image, ax=axes, shrink=0.8, label="softmax(C)")
    fig.savefig(folder / "fig5-softmax.png", dpi=120)
    plt.close(fig)
    table = [f"Seed 000, App. A.4.1, Fig. 5: softmax of C = alpha X Z X^T + beta X X^T, n = {FIG5_N}, d = {FIG5_D} "
             f"(the appendix leaves d open), kappa over {DRAWS} draws. ![Fig. 5](fig5-softmax.png)", "",
             "| case | alpha | beta | kappa(softmax(C)): median | the appendix |", "|---|---|---|---|---|", *lines]
    return table, medians


def moments(d: int = 64) -> list[str]:
    """Eqs. 14-20 as printed, as derived here, and by Monte Carlo, for two (alpha, beta)."""
    rows = ["| alpha, beta | quantity | printed (mean, var) | derived | Monte Carlo | printed holds |",
            "|---|---|---|---|---|---|"]
    g = torch.Generator().manual_seed(SEED)
    for alpha, beta in ((0.1, 5.0), (1.0, 0.0)):
        printed, derived = dataclasses.asdict(paper_moments(d, alpha, beta)), dataclasses.asdict(derived_moments(d, alpha, beta))
        mc = dataclasses.asdict(monte_carlo_moments(FIG5_N, d, alpha, beta, MOMENT_DRAWS, g))
        for name in printed:
            (p_mean, p_var), (m_mean, m_var) = printed[name], mc[name]
            holds = abs(p_mean - m_mean) <= 0.05 * m_var ** 0.5 and abs(p_var - m_var) <= 0.06 * m_var
            rows.append(f"| {alpha:g}, {beta:g} | {name} | {printed[name][0]:.4g}, {printed[name][1]:.4g} | "
                        f"{derived[name][0]:.4g}, {derived[name][1]:.4g} | {mc[name][0]:.4g}, {mc[name][1]:.4g} | "
                        f"{'yes' if holds else '**no**'} |")
    return [f"Seed 000, App. A.4.1, Eqs. 14-20 (d = {d}, n = {FIG5_N}, {MOMENT_DRAWS} draws): a printed (mean, "
            "variance) holds when its mean is within 0.05 standard deviations of the Monte Carlo mean and its "
            "variance within 6% of the Monte Carlo variance. Derived: Var(B_ij) = d (paper/theory.py's module).", "", *rows]


def props(draws: int = 100) -> list[str]:
    """Seed 003's Props. 4.1 and 4.2 over ``draws`` draws each."""
    g = torch.Generator().manual_seed(SEED)
    out = ["Seed 003, Prop. 4.1 (linear attention, no skip): kappa(X W_Q W_K^T X^T X W_V) <= C kappa(X)^3 with "
           "C = kappa(W_Q) kappa(W_K) kappa(W_V), \"statistically close to unity\"; N(0, 1) entries.", "",
           "| tokens n | width d | the bound holds | median C |", "|---|---|---|---|"]
    for n, d in ((64, 16), (197, 64), (16, 64)):
        rows = [prop41_terms(n, d, g) for _ in range(draws)]
        held = sum(r["left"] <= r["right"] * (1 + 1e-9) for r in rows)
        out.append(f"| {n} | {d} | {held} of {draws} | {statistics.median(r['C'] for r in rows):.3g} |")
    out += ["", "Seed 003, Prop. 4.2: kappa(X M + X) << kappa(X M), M = W_Q W_K^T X^T X W_V; X (197 x 64) N(0, 1), "
            "weights N(0, std^2).", "", "| weight std | the skip lowers kappa 10x or more | median kappa with skip | "
            "median kappa without | median kappa(X) |", "|---|---|---|---|---|"]
    for std in (0.02, 0.125, 1.0):
        rows = [prop42_terms(197, 64, std, g) for _ in range(draws // 2)]
        lower = sum(r["with_skip"] * 10 <= r["without_skip"] for r in rows)
        out.append(f"| {std:g} | {lower} of {len(rows)} | {statistics.median(r['with_skip'] for r in rows):.3g} | "
                   f"{statistics.median(r['without_skip'] for r in rows):.3g} | "
                   f"{statistics.median(r['kappa_x'] for r in rows):.3g} |")
    return out


def thm22(folder: Path, depth: int = 6, tokens: int = 50) -> list[str]:
    """Seed 004's Thm 2.2 through the suite's attention modules: the kernel spectrum per layer, OSA vs softmax."""
    plt = _pyplot()

    fig, axes = plt.subplots(1, 2, figsize=(8, 3.4), sharey=True)
    lines = []
    for ax, attention in zip(axes, ("osa", "softmax")):
        g = torch.Generator().manual_seed(SEED)
        torch.manual_seed(SEED)
        model = create_vit("vit_tiny", depth=depth, attention=attention, residual="skipless", num_heads=1,
                           norm="none", final_norm=False, img_size=32)
        attentions = [block.attn for block in model.blocks]
        for attn in attentions:
            orthogonal_value_output(attn, g)
        spectra = attention_stack_spectra(attentions, torch.randn(tokens, model.embed_dim, generator=g))
        for layer, s in enumerate(spectra):
            ax.semilogy(s.clamp_min(1e-12).numpy(), color=plt.cm.viridis(layer / depth), label=f"layer {layer}")
        ranks = [int((s > 1e-6 * s[0]).sum()) for s in spectra]
        change = max(float((s - spectra[0]).abs().max() / spectra[0][0]) for s in spectra)
        lines.append(f"| {attention} | {' / '.join(map(str, ranks))} | {change:.2g} |")
        same = " (every layer's line on layer 0's)" if change < 1e-3 else ""
        ax.set_title(f"skipless {attention}-only stack, 1 head{same}", fontsize=9)
        ax.set_xlabel("eigenvalue index")
    axes[0].set_ylabel("eigenvalue of X_l X_l^T")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "thm22-spectra.png", dpi=120)
    plt.close(fig)
    return [f"Seed 004, Thm 2.2: {depth} attention modules of the suite, one head, W_V W_O orthogonal, no skips, norms "
            f"or MLPs, {tokens} tokens N(0, 1). ![Thm 2.2](thm22-spectra.png)", "",
            "| attention | rank of X_l X_l^T, layers 0..L | largest change of an eigenvalue / the top one |",
            "|---|---|---|", *lines]


def token_images(count: int, size: int) -> torch.Tensor:
    """``count`` fixed centre crops of the embedded default's val images (generated if missing), as the
    pretraining diagnostics read them (``training/data.diagnostic_images``)."""

    return diagnostic_images(load_config("pretrain"), size, count, split="val")


@torch.no_grad()
def pre_ln_tokens(model: torch.nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """Per block, the tokens after its pre-LN (``norm1``'s output): ``(B, n, d)`` each."""
    caught: list[torch.Tensor] = []
    hooks = [block.norm1.register_forward_hook(lambda m, i, o: caught.append(o.detach())) for block in model.blocks]
    try:
        model.eval()(images)
    finally:
        for hook in hooks:
            hook.remove()
    return caught


def fig6(folder: Path, images: Callable[[int, int], torch.Tensor] = token_images, count: int = 8,
         size: int = 224) -> list[str]:
    """Fig. 6: the tokens after each block's pre-LN under the paper's init (DINO ViT-S/16, model=skipless,
    the paper's recipe), on the default's images: the entries' histogram (the figure's view) beside the mean
    cosine between an image's patch tokens, which independent isotropic tokens keep near 0."""
    plt = _pyplot()


    torch.manual_seed(SEED)
    model = vit_from_config(load_config("pretrain", ["model=skipless", "recipe=paper"]).model)
    tokens = pre_ln_tokens(model, images(count, size))
    shown = [0, 3, 7, 11]
    fig, axes = plt.subplots(1, len(shown) + 1, figsize=(14, 2.8))
    rows, cosines = [], []
    for block, t in enumerate(tokens):
        patches = torch.nn.functional.normalize(t[:, 1:].double(), dim=-1)
        cos = patches @ patches.transpose(1, 2)
        n = cos.shape[-1]
        mean_cos = float((cos.sum((1, 2)) - n).mean() / (n * (n - 1)))  # off the diagonal
        entries = t.flatten().double()
        kurtosis = float(((entries - entries.mean()) ** 4).mean() / entries.var() ** 2)
        cosines.append(mean_cos)
        rows.append(f"| {block} | {float(entries.mean()):.3f} | {float(entries.std()):.3f} | {kurtosis:.2f} | {mean_cos:.3f} |")
        if block in shown:
            ax = axes[shown.index(block)]
            ax.hist(entries.numpy(), bins=100, density=True, color="tab:blue")
            grid = torch.linspace(-4, 4, 200)
            ax.plot(grid.numpy(), (torch.exp(-grid ** 2 / 2) / (2 * torch.pi) ** 0.5).numpy(), color="k", lw=1)
            ax.set_title(f"block {block}: kurtosis {kurtosis:.1f}, cos {mean_cos:.2f}", fontsize=9)
            ax.set_xlim(-5, 5)
    axes[-1].plot(range(len(cosines)), cosines, marker="o")
    axes[-1].set_xlabel("block")
    axes[-1].set_ylabel("mean cosine, patch tokens")
    axes[-1].set_ylim(-0.05, 1.05)
    fig.tight_layout()
    fig.savefig(folder / "fig6-pre-ln-tokens.png", dpi=110)
    plt.close(fig)
    return [f"Seed 000, App. A.4.1, Fig. 6: the tokens after each block's pre-LN under the paper's init (DINO ViT-S/16, "
            f"model=skipless, recipe=paper) on {count} of the default's val images at {size} px; N(0, 1) in black. An "
            "isotropic Gaussian has kurtosis 3 and, token to token, a mean cosine near 0. "
            "![Fig. 6](fig6-pre-ln-tokens.png)", "",
            "| block | mean | std | kurtosis | mean cosine between patch tokens |", "|---|---|---|---|---|", *rows]


def _kappa_text(value: float) -> str:
    return "inf" if value == float("inf") else f"{value:.3g}"


def eq6(draws: int = 200) -> list[str]:
    """Seed 000's Eq. 6 on small ViTs at init (dense float64 Jacobians), and Eq. 37 on random tall blocks."""
    out = ["Seed 000, Eq. 6 (assumed, after Ji et al. 2025b): kappa(J) <= max_l {kappa(J_l), kappa(J^_l)}, J the "
           "Jacobian of the last block's tokens with respect to every sub-block's parameters (attention: its pre-norm "
           "and attention; MLP: its pre-norm and MLP). kappa over all rows (sqrt of the Gram matrix's eigenvalue "
           "ratio: inf for a rank-deficient block). Two blocks of width 16, 2 heads, 2 random images at 32 px (160 "
           "rows, 6,560 parameters).", "",
           "| model | init | kappa(J) | kappa of each sub-block (attn 0, mlp 0, attn 1, mlp 1) | Eq. 6 holds |",
           "|---|---|---|---|---|"]
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(SEED))
    for residual, init in (("skip", "timm"), ("skipless", "timm"), ("skipless", "cutskip")):
        torch.manual_seed(SEED)
        model = create_vit("vit_tiny", depth=2, embed_dim=16, num_heads=2, img_size=32, residual=residual, init=init)
        r = eq6_terms(model, images)
        blocks = " / ".join(_kappa_text(v) for v in r["blocks"].values())
        out.append(f"| {residual} | {init} | {_kappa_text(r['kappa_J'])} | {blocks} | {'yes' if r['holds'] else '**no**'} |")
    out += ["", "Why it holds whenever each sub-block has full row rank: J J^T is the sum of the J_l J_l^T, and the "
            "extreme eigenvalues of a sum of positive semi-definite matrices are at most and at least the sums of "
            "theirs, so kappa(J)^2 <= (sum of lambda_max) / (sum of lambda_min) <= max_l kappa(J_l)^2. A.4.4's "
            "argument, through coherence and balance, is for tall blocks; a network's blocks are wide.", "",
            "Seed 000, App. A.4.4, Eq. 37: kappa([A B]) <= tau sqrt((1 + rho/s_max^2) / (1 - rho/s_min^2)) kappa_max "
            "for tall blocks, defined while rho = ||A^T B|| < s_min^2; N(0, 1) entries, B's columns scaled by b.", "",
            "| rows | columns of A, B | scale b | bound defined | bound holds where defined | median kappa([A B]) | "
            "median bound |", "|---|---|---|---|---|---|---|"]
    g = torch.Generator().manual_seed(SEED)
    for rows, cols, scale in ((400, 8, 1.0), (400, 8, 3.0), (100, 20, 1.0), (60, 25, 1.0)):
        terms = [concatenation_terms(torch.randn(rows, cols, generator=g), scale * torch.randn(rows, cols, generator=g))
                 for _ in range(draws)]
        defined = [t for t in terms if t["valid"]]
        held = sum(t["kappa_M"] <= t["bound"] * (1 + 1e-9) for t in defined)
        bound = f"{statistics.median(t['bound'] for t in defined):.3g}" if defined else "-"
        out.append(f"| {rows} | {cols} | {scale:g} | {len(defined)} of {draws} | {held} of {len(defined)} | "
                   f"{statistics.median(t['kappa_M'] for t in terms):.3g} | {bound} |")
    return out


SECTIONS: dict[str, Callable[[Path], list[str]]] = {
    "Fig. 5": lambda folder: fig5(folder)[0], "Eqs. 14-20": lambda folder: moments(),
    "Fig. 6": lambda folder: fig6(folder), "Props. 4.1-4.2": lambda folder: props(), "Thm 2.2": thm22,
    "Eq. 6, App. A.4.4": lambda folder: eq6()}


def write_theory_report(root: Path, say=print) -> Path:
    """Compute every section and write ``<root>/theory/report.md`` with its figures."""
    folder = Path(root) / NAME
    folder.mkdir(parents=True, exist_ok=True)
    parts = ["# The seeds' theory, checked numerically", "",
             "Written by `make paper EXP=theory` (paper/theory.py); each row is also a test. A claim that does not "
             "hold is a result, marked **no**.", ""]
    for title, section in SECTIONS.items():
        say(f"theory: {title}")
        parts += [f"## {title}", "", *section(folder), ""]
    text = "\n".join(parts)
    return atomic_write(folder / "report.md", lambda tmp: Path(tmp).write_text(text))
