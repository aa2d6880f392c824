"""``make paper EXP=theory``: the seeds' claims that seconds of computation can check, as a report with
figures (``<root>/theory/report.md``; at ``SCALE=full`` ``<root>/full/theory/report.md``). No training: every
scale computes the same sections, and only Fig. 6's images depend on the scale: the embedded default's val images
at demo and quick, ImageNet's val images at full (``$IMAGENET_ROOT/val``, default ``data/imagenet/val``; refused
in one sentence before anything is written when they are not there).

| claim | seed, place | computed by |
|---|---|---|
| a diagonal-dominant logit matrix gives a well-conditioned softmax, a diffuse one an ill-conditioned one | 000, App. A.4.1, Fig. 5 | ``analysis/softmax_theory.py`` |
| the moments of ``X X^T``, ``X Z X^T`` and the logits under the init | 000, App. A.4.1, Eqs. 14-20 | ``analysis/softmax_theory.py`` |
| the tokens after the pre-LN look like isotropic Gaussians under the init | 000, App. A.4.1, Fig. 6 | ``fig6`` here |
| linear attention's output kappa <= C kappa(X)^3, C close to 1 | 003, Prop. 4.1 | ``analysis/attention_theory.py`` |
| the skip lowers the attention output's kappa | 003, Prop. 4.2 | ``analysis/attention_theory.py`` |
| a skipless OSA-only stack keeps the token kernel's spectrum | 004, Thm 2.2 | ``analysis/attention_theory.py`` |
| kappa(J) <= max_l kappa(J_l) over the sub-blocks, and the concatenation bound behind it | 000, Eq. 6, App. A.4.4 | ``analysis/concatenation_theory.py`` |
| the attention map's derivative in the tokens is O(alpha e^-beta) | 000, Lemma 1, App. A.4.2 | ``analysis/softmax_theory.py`` |
| a linear MLP's kappa <= C_down C_up kappa(X), below attention's | 003, Sec. 4.1, Eq. 6 | ``analysis/mlp_conv_theory.py`` |
| a linear depthwise convolution's kappa <= C_CD kappa(X), below attention's | 003, App. B, Eq. 24 | ``analysis/mlp_conv_theory.py`` |
| Newton-Schulz's orthogonality error <= (e^||S|| - 1)^2 max_i sigma_i^2 abs(sigma_i^2 - 1) <= (e^||S|| - 1)^2 / 4 | 004, App. A, Thm A.1 | ``analysis/osa_theory.py`` |

Each row is also a test (tests/test_softmax_theory.py, tests/test_attention_theory.py,
tests/test_concatenation_theory.py, tests/test_mlp_conv_theory.py, tests/test_osa_theory.py). ``SOURCES`` names
each section's seed and places (the report's headings; tests/test_docs_not_implemented.py reads it).
"""
from __future__ import annotations

import dataclasses
import math
import os
import statistics
from pathlib import Path
from typing import Callable

import torch

from skipless.analysis.attention_theory import (attention_stack_spectra, orthogonal_value_output, prop41_terms,
                                                prop42_terms)
from skipless.analysis.attention_theory import prop41_on
from skipless.analysis.concatenation_theory import concatenation_terms, eq6_terms
from skipless.analysis.mlp_conv_theory import depthwise_conv, eq24_counterexample, eq24_terms
from skipless.analysis.mlp_conv_theory import eq6_terms as mlp_eq6_terms
from skipless.analysis.osa_theory import osa_head_inputs, thm_a1_terms
from skipless.analysis.softmax_theory import (FIG5_CASES, FIG5_D, FIG5_N, derived_moments, lemma1_terms,
                                              logit_matrices, monte_carlo_moments, paper_moments, softmax_kappa)
from skipless.atomic import atomic_write
from skipless.config import load_config
from skipless.data import ImageFolderDataset
from skipless.data.errors import missing_dataset
from skipless.models import create_vit
from skipless.models.from_config import vit_from_config
from skipless.models.timm_family import TIMM_CLASSES
from skipless.training.data import diagnostic_images

NAME = "theory"
DRAWS = 1000          # Fig. 5's kappa over this many draws
MOMENT_DRAWS = 4000   # matrices behind each Monte Carlo moment
SEED = 0
FULL = "full"         # the scale whose Fig. 6 reads natural images (paper/experiment.py's SCALES)
FIG6_IMAGES = 8       # Fig. 6's images at demo and quick (ours; the seed does not say how many)
FIG6_FULL_IMAGES = 64  # at full, spread over ImageNet val's 1,000 class folders: 64 classes (ours)


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


def imagenet_val() -> Path:
    """ImageNet's val folder, as the experiments' full scale names ImageNet: ``$IMAGENET_ROOT`` (default
    ``data/imagenet``, relative to where make paper runs), ``val/`` under it (data/README.md)."""
    return Path(os.environ.get("IMAGENET_ROOT") or "data/imagenet") / "val"


def folder_images(folder: Path) -> Callable[[int, int], torch.Tensor]:
    """``images(count, size)`` of an image folder (ImageNet's ``val/<wnid>/`` or flat): ``count`` images spread
    evenly over its sorted listing (every class its share), read by the pretraining reader and cropped as
    ``token_images`` crops the default's (shorter side to ``size``, bicubic, centre square, ImageNet mean and
    std: ``training/data.centre_crop``)."""
    cfg = load_config("pretrain", ["data=imagenet"])
    cfg.data.root = str(folder)
    return lambda count, size: diagnostic_images(cfg, size, count, spread=True)


def fig6_at(scale: str) -> Callable[[Path], list[str]]:
    """Fig. 6's section at ``scale``: on the default's val images, or at full on ImageNet val's (seed 000 does not
    say which images Fig. 6 shows; ImageNet is its pretraining data), which must be there (checked here, before
    any section runs)."""
    if scale != FULL:
        return lambda folder: fig6(folder)
    val = imagenet_val()
    if not val.is_dir():
        raise missing_dataset(
            "ImageNet val", val, "<IMAGENET_ROOT>/val/<wnid>/*.JPEG or a flat <IMAGENET_ROOT>/val/*.JPEG",
            "make paper EXP=theory SCALE=full draws seed 000's Fig. 6 on ImageNet's val images; set "
            "IMAGENET_ROOT=<folder holding val/>, or run SCALE=demo for the embedded default's")
    ImageFolderDataset(val)  # an empty folder: one sentence now
    return lambda folder: fig6(folder, folder_images(val), FIG6_FULL_IMAGES,
                               source=f"ImageNet val's images ({val}, evenly spaced over its sorted listing)")


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


def fig6(folder: Path, images: Callable[[int, int], torch.Tensor] = token_images, count: int = FIG6_IMAGES,
         size: int = 224, source: str = "the default's val images") -> list[str]:
    """Fig. 6: the tokens after each block's pre-LN under the paper's init (DINO ViT-S/16, model=skipless,
    the paper's recipe), on ``count`` of ``images`` (``source`` says which): the entries' histogram (the
    figure's view) beside the mean cosine between an image's patch tokens, which independent isotropic tokens
    keep near 0. The seed prints no number for Fig. 6, only the histograms."""
    plt = _pyplot()


    torch.manual_seed(SEED)
    model = vit_from_config(load_config("pretrain", ["model=skipless", "recipe=paper"]).model)
    x = images(count, size)
    count = x.shape[0]  # a folder of fewer images gives them all
    tokens = pre_ln_tokens(model, x)
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
            f"model=skipless, recipe=paper) on {count} of {source} at {size} px; N(0, 1) in black. An "
            "isotropic Gaussian has kurtosis 3 and, token to token, a mean cosine near 0. "
            "![Fig. 6](fig6-pre-ln-tokens.png)", "",
            "The seed prints no number for Fig. 6, only the plot (the entries' histogram per block), which it reads as "
            "\"closely matches a zero-mean, approximately isotropic Gaussian\", and does not say which images it shows; "
            "so nothing stands beside the numbers below.", "",
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


def _holds(value: float, bound: float, slack: float = 0.0) -> bool:
    return value <= bound * (1 + 1e-9) + slack


def _med(rows: list[dict], key: str) -> str:
    return _kappa_text(statistics.median(r[key] for r in rows))


LEMMA1_ALPHAS = (0.0, 0.001, 0.01, 0.1, 1.0, 2.0)
LEMMA1_BETAS = (0.0, 0.1, 0.6, 1.0, 5.0)


def lemma1(draws: int = 10) -> list[str]:
    """Seed 000's Lemma 1 on Fig. 5's model (n = 10, d = 64) over a grid of alpha and beta, ``draws`` (X, Z) each."""
    g = torch.Generator().manual_seed(SEED)
    pairs = [(torch.randn(FIG5_N, FIG5_D, generator=g, dtype=torch.float64),
              torch.randn(FIG5_D, FIG5_D, generator=g, dtype=torch.float64) / FIG5_D ** 0.5) for _ in range(draws)]
    terms = {(a, b): [lemma1_terms(x, z, a, b) for x, z in pairs] for a in LEMMA1_ALPHAS for b in LEMMA1_BETAS}
    median = {key: statistics.median(r["derivative"] for r in rows) for key, rows in terms.items()}
    out = ["Seed 000, App. A.4.2, Lemma 1: ||d vec(A) / d vec(X)||_2 = O(alpha e^-beta) for A = softmax(X (alpha Z + "
           f"beta I) X^T), X ({FIG5_N} x {FIG5_D}) N(0, 1), Z N(0, 1/d) (Fig. 5's model, no 1/sqrt(d) scale). Read: a "
           "constant independent of alpha and beta bounds the derivative by alpha e^-beta, so it vanishes as alpha -> 0 "
           f"and falls at least as e^-beta. The derivative in closed form (checked against autograd), float64, median of "
           f"{draws} draws (alpha e^-beta in brackets); Table 1's init is alpha 2, beta 0.6 (the model adds 1/sqrt(d_h)).",
           "",
           "| beta \\ alpha | " + " | ".join(f"{a:g}" for a in LEMMA1_ALPHAS) + " |",
           "|---|" + "---|" * len(LEMMA1_ALPHAS)]
    for b in LEMMA1_BETAS:
        out.append(f"| {b:g} | " + " | ".join(f"{median[a, b]:.3g} [{a * math.exp(-b):.3g}]" for a in LEMMA1_ALPHAS) + " |")
    smaller, small = LEMMA1_ALPHAS[1:3]  # the two smallest alphas above 0
    per_alpha = [median[a, 0.0] / a for a in (smaller, small)]
    at_zero = [b for b in LEMMA1_BETAS if b > 0]
    fig5_alpha = FIG5_CASES["peak"][0]
    by_beta = [median[fig5_alpha, b] * math.exp(b) for b in LEMMA1_BETAS]
    rows = [r for rs in terms.values() for r in rs if r["derivative"] > 0]
    eq21 = sum(_holds(r["derivative"], r["softmax"]) for r in rows)
    chain = sum(_holds(r["derivative"], r["chain"]) for r in rows)
    out += ["", "| limit or step | Lemma 1 (or its proof) says | measured (medians) | holds |", "|---|---|---|---|",
            f"| alpha -> 0 at beta 0 | the derivative / alpha stays bounded | {per_alpha[0]:.3g} at alpha {smaller:g}, "
            f"{per_alpha[1]:.3g} at {small:g}; 0 at alpha 0 | {'yes' if 0.5 < per_alpha[0] / per_alpha[1] < 2 else '**no**'} |",
            "| alpha = 0 at beta > 0 | the derivative is 0 | " + ", ".join(
                f"{median[0.0, b]:.3g} (beta {b:g})" for b in at_zero) + " | " + (
                "**no**: at beta > 0 the derivative does not vanish with alpha" if all(median[0.0, b] > 0 for b in at_zero)
                else "yes") + " |",
            f"| beta grows at alpha {fig5_alpha:g} | the derivative x e^beta stays bounded | " + ", ".join(
                f"{v:.3g} (beta {b:g})" for v, b in zip(by_beta, LEMMA1_BETAS)) + " | " + (
                "yes, faster: the decay is e^-(beta gap), the gap X_i.X_i - X_i.X_j of order d"
                if by_beta[-1] <= by_beta[0] else "**no**") + " |",
            f"| Eq. 21: the derivative <= ||d vec(A) / d vec(M)||_2 | on every draw | {eq21} of {len(rows)} draws with a "
            f"nonzero derivative | {'yes' if eq21 == len(rows) else '**no**: it drops ||d vec(M) / d vec(X)||_2'} |",
            "| the chain rule: the derivative <= ||d vec(A)/d vec(M)||_2 2 ||X||_2 ||alpha Z + beta I||_2 (derived here) | "
            f"on every draw | {chain} of {len(rows)} | {'yes' if chain == len(rows) else '**no**'} |"]
    return out


def eq6_seed003(draws: int = 30, model_draws: int = 2) -> list[str]:
    """Seed 003's Eq. 6 on Gaussian weights and on the suite's ViT MLPs at init, beside Prop. 4.1's attention."""
    g = torch.Generator().manual_seed(SEED)
    out = ["Seed 003, Sec. 4.1, Eq. 6: kappa(W_down W_up X) <= C_down C_up kappa(X) for a linear MLP (no biases), C = "
           "kappa(W); and \"the MLP transformation does not worsen conditioning as severely\" as attention. kappa of a "
           "rectangular matrix over its min(rows, columns) singular values (Eq. 4's pseudo-inverse). Tokens X (n x d) "
           "N(0, 1); attention: Prop. 4.1's linear attention on the same X, weights N(0, 1).", "",
           "| weights | tokens n | width d | hidden | draws | Eq. 6 holds | median kappa(MLP(X)) | median bound | median "
           "kappa(W_down W_up) | median kappa(linear attention) |", "|---|---|---|---|---|---|---|---|---|---|"]
    below = []  # per row: the MLP's median kappa under attention's

    def line(name: str, cases: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]) -> str:
        rows = [mlp_eq6_terms(x, up, down) for x, up, down in cases]
        attn = [prop41_on(x, g) for x, _, _ in cases]
        held = sum(_holds(r["left"], r["right"]) for r in rows)
        below.append(statistics.median(r["left"] for r in rows) < statistics.median(r["left"] for r in attn))
        (n, d), hidden = cases[0][0].shape, cases[0][1].shape[0]
        return (f"| {name} | {n} | {d} | {hidden} | {len(rows)} | {held} of {len(rows)} | {_med(rows, 'left')} | "
                f"{_med(rows, 'right')} | {_med(rows, 'kappa_product')} | {_med(attn, 'left')} |")

    def gaussian(n: int, d: int, hidden: int) -> list[tuple[torch.Tensor, ...]]:
        return [tuple(torch.randn(*shape, generator=g, dtype=torch.float64) for shape in ((n, d), (hidden, d), (d, hidden)))
                for _ in range(draws)]

    for n, d in ((64, 16), (197, 64), (16, 64)):
        out.append(line("N(0, 1)", gaussian(n, d, 4 * d)))
    out.append(line("N(0, 1), square factors (hidden = d)", gaussian(197, 64, 64)))
    for arch in ("vit_tiny", "vit_small"):
        for init in ("timm", "cutskip"):
            torch.manual_seed(SEED)
            mlp = create_vit(arch, depth=1, img_size=32, init=init, residual="skipless").blocks[0].mlp
            up, down = mlp.fc1.weight.detach().double(), mlp.fc2.weight.detach().double()
            out.append(line(f"{arch} block 0's MLP, init={init}",
                            [(torch.randn(197, up.shape[1], generator=g, dtype=torch.float64), up, down)
                             for _ in range(model_draws)]))
    out += ["", "The step behind Eq. 6, kappa(AB) <= kappa(A) kappa(B), needs square factors (or a left factor of full "
            "column rank): W_down (d x 4d) is wide, and the d x d product W_down W_up is about as ill-conditioned as a "
            "square Gaussian matrix while each factor has kappa about 3 (1 under init=cutskip's SUO). So the bound "
            "fails on (nearly) every draw with as many tokens as channels or more (n >= d), holds with square factors, "
            "and with fewer tokens than channels holds for Gaussian and timm weights but not under the SUO init, whose "
            "C_down C_up = 1 leaves no room. "
            f"The comparison: the MLP's median kappa is below linear attention's on {sum(below)} of {len(below)} rows."]
    return out


CONVMIXER = {"kernel_size": 5, "patch_size": 2}  # configs/model/convmixer.yaml's timm_args (its width 256 apart)


def eq24(draws: int = 40, grid_draws: int = 4) -> list[str]:
    """Seed 003's App. B Eq. 24 on ConvMixer's depthwise convolutions (timm's init), beside Prop. 4.1's attention."""
    g = torch.Generator().manual_seed(SEED)
    torch.manual_seed(SEED)
    out = ["Seed 003, App. B, Eq. 24: kappa(W_CD X) <= kappa(W_CD) kappa(X) = C_CD kappa(X) for the depthwise "
           "convolution, linear, no batch norm, no bias; \"better conditioning [than self-attention] with a lower bound\". "
           "X: h channels x P positions, N(0, 1); W_CD: the convolution as the linear map it is (a P x P matrix per "
           "channel, zero 'same' padding), kappa(W_CD) = its largest singular value over its smallest. Attention: "
           "Prop. 4.1's linear attention on the same X (P tokens of width h), with its bound C kappa(X)^3. Kernels of "
           f"timm's ConvMixer at model=convmixer's kernel {CONVMIXER['kernel_size']} and patch "
           f"{CONVMIXER['patch_size']}, 16 channels (not the model's 256: one SVD per channel's P x P matrix).", "",
           "| convolution | channels h | grid | draws | Eq. 24 holds | median kappa(W_CD X) | median bound | "
           "median C_CD | median kappa(X) | median kappa(linear attention) | median Prop. 4.1 bound |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    summary = {}

    def line(name: str, h: int, size: int, shared: bool, count: int) -> str:
        rows, attn = [], []
        for _ in range(count):
            weight = depthwise_conv(TIMM_CLASSES["convmixer"](dim=h, depth=1, num_classes=0, **CONVMIXER)).weight
            weight = weight.detach().double()
            if shared:
                weight = weight[:1].expand_as(weight)
            x = torch.randn(h, size, size, generator=g, dtype=torch.float64)
            rows.append(eq24_terms(x, weight))
            attn.append(prop41_on(x.reshape(h, -1).T, g))
        held = sum(_holds(r["left"], r["right"]) for r in rows)
        summary[name] = (held, count, rows, attn)
        return (f"| {name} | {h} | {size} x {size} | {count} | {held} of {count} | {_med(rows, 'left')} | "
                f"{_med(rows, 'right')} | {_med(rows, 'C_CD')} | {_med(rows, 'kappa_x')} | {_med(attn, 'left')} | "
                f"{_med(attn, 'right')} |")

    grid = 32 // CONVMIXER["patch_size"]
    out.append(line("a kernel per channel", 16, 8, False, draws))
    out.append(line("one kernel for every channel", 16, 8, True, draws))
    out.append(line(f"a kernel per channel, 32 px (model=convmixer's grid)", 16, grid, False, grid_draws))
    x, weight = eq24_counterexample()
    r = eq24_terms(x, weight)
    out.append(f"| eq24_counterexample: kernels [-a, 1, a], [a, 1, -a] | 2 | {x.shape[-1]} x {x.shape[-1]} | 1 | "
               f"{int(_holds(r['left'], r['right']))} of 1 | {_kappa_text(r['left'])} | {r['right']:.3g} | "
               f"{r['C_CD']:.3g} | {r['kappa_x']:.3g} | - | - |")
    rows = [t for held, count, ts, _ in summary.values() for t in ts]
    attn = [t for held, count, _, ts in summary.values() for t in ts]
    lower = sum(c["left"] < a["left"] for c, a in zip(rows, attn))
    tighter = sum(c["right"] < a["right"] for c, a in zip(rows, attn))
    out += ["", f"With a kernel per channel W_CD X is not a product of X with one matrix, so the proof's step does not "
            f"apply and the inequality is not a theorem: the last row has kappa(W_CD) {r['C_CD']:.3g} and kappa(X) "
            f"{r['kappa_x']:.3g}, and its two channels' outputs are parallel. On random kernels it holds, loosely (C_CD "
            f"is large: a 5 x 5 kernel's transfer function comes near zero). Over the random draws, the convolution's "
            f"kappa is below linear attention's on {lower} of {len(rows)}, and Eq. 24's bound below Prop. 4.1's on "
            f"{tighter} of {len(rows)}."]
    return out


THM_A1_STEPS = (1, 2, 4, 6, 8, 12, 16)


def thm_a1(draws: int = 5) -> list[str]:
    """Seed 004's Thm A.1 through the suite's OSA (model=osa's init at App. E's size), per Newton-Schulz steps K."""
    torch.manual_seed(SEED)
    model = create_vit("vit_micro", attention="osa", init="osa", residual="skipless", norm="none", final_norm=False,
                       img_size=28, patch_size=4, attention_args={"basis": "newton-schulz"})
    attn = model.blocks[0].attn
    g = torch.Generator().manual_seed(SEED)
    tokens = [torch.randn(model.patch_embed.num_patches + 1, model.embed_dim, generator=g, dtype=torch.float64)
              for _ in range(draws)]
    out = ["Seed 004, App. A, Thm A.1: ||Y^T Y - I||_2 <= (e^||S||_2 - 1)^2 max_i |sigma_i(B)^2 (sigma_i(B)^2 - 1)| "
           "(Eq. 10) <= (e^||S||_2 - 1)^2 / 4 (Eq. 11), Y = I + B (exp(B^T S B) - I) B^T with B after K Newton-Schulz "
           f"steps (models/osa.py). Block 0 of model=osa at App. E's size (width {model.embed_dim}, "
           f"{attn.num_heads} heads of d_v {attn.head_dim}, {tokens[0].shape[0]} tokens N(0, 1)), init=osa; each of "
           f"its {attn.num_heads} heads on {draws} token draws. Holds: within 1e-12 (float64 rounding of Y^T Y).", "",
           "| alpha | K | median sigma_min(B) | median error | largest error | median Eq. 10 | median Eq. 11 | "
           "holds (Eq. 10) |", "|---|---|---|---|---|---|---|---|"]
    everything, at_six = [], []
    for alpha in (0.1, 1.0):
        with torch.no_grad():
            attn.alpha.fill_(alpha)
        inputs = [osa_head_inputs(attn, x, h) for x in tokens for h in range(attn.num_heads)]
        for steps in THM_A1_STEPS:
            rows = [thm_a1_terms(q, k, scale, steps) for q, k, scale in inputs]
            everything += [(steps, r) for r in rows]
            at_six += rows if (alpha, steps) == (0.1, 6) else []
            held = sum(_holds(r["error"], r["bound"], 1e-12) for r in rows)
            out.append(f"| {alpha:g} | {steps} | {statistics.median(r['sigma_min'] for r in rows):.3g} | "
                       f"{_med(rows, 'error')} | {max(r['error'] for r in rows):.3g} | {_med(rows, 'bound')} | "
                       f"{_med(rows, 'bound_quarter')} | {held} of {len(rows)} |")
    useful = [(steps, r) for steps, r in everything if r["bound"] < 1]
    out += ["", f"The error never exceeds 1 (largest {max(r['error'] for _, r in everything):.4g}): Y^T Y - I = B "
            "Delta^T E Delta B^T (the proof's Eq. 28) is negative semi-definite, E = B^T B - I having no positive "
            "eigenvalue, and Y^T Y is positive semi-definite. Eq. 10 says more than that only where it is below 1: on "
            f"{len(useful)} of {len(everything)} cases, at K = {', '.join(str(k) for k in sorted({k for k, _ in useful}))}"
            " (the table's sigma_min(B): converged). At App. E's "
            f"alpha 0.1 and K = 6 the error is {_med(at_six, 'error')} (median): A^T A is that far from I."]
    return out


SOURCES: dict[str, str] = {  # each section's seed and places, as its heading says (tests/test_docs_not_implemented.py)
    "Fig. 5": "000, Prop. 1, App. A.4.1, Fig. 5", "Eqs. 14-20": "000, App. A.4.1, Eqs. 14-20",
    "Fig. 6": "000, App. A.4.1, Fig. 6", "Props. 4.1-4.2": "003, Props. 4.1-4.2", "Thm 2.2": "004, Thm 2.2",
    "Eq. 6, App. A.4.4": "000, Eq. 6, App. A.4.4, Eq. 37", "Lemma 1": "000, Lemma 1, App. A.4.2",
    "MLP, Eq. 6": "003, Sec. 4.1, Eq. 6", "App. B, Eq. 24": "003, App. B, Eq. 24", "Thm A.1": "004, App. A, Thm A.1"}

SECTIONS: dict[str, Callable[[Path], list[str]]] = {
    "Fig. 5": lambda folder: fig5(folder)[0], "Eqs. 14-20": lambda folder: moments(),
    "Fig. 6": lambda folder: fig6(folder), "Props. 4.1-4.2": lambda folder: props(), "Thm 2.2": thm22,
    "Eq. 6, App. A.4.4": lambda folder: eq6(), "Lemma 1": lambda folder: lemma1(),
    "MLP, Eq. 6": lambda folder: eq6_seed003(), "App. B, Eq. 24": lambda folder: eq24(), "Thm A.1": lambda folder: thm_a1()}


def write_theory_report(root: Path, say=print, scale: str = "demo") -> Path:
    """Compute every section and write ``<root>/theory/report.md`` with its figures (at full scale
    ``<root>/full/theory/report.md``, Fig. 6 on ImageNet val: ``fig6_at``)."""
    sections = {**SECTIONS, "Fig. 6": fig6_at(scale)} if scale == FULL else SECTIONS  # refused before a write
    folder = Path(root) / (f"{FULL}/{NAME}" if scale == FULL else NAME)
    folder.mkdir(parents=True, exist_ok=True)
    parts = ["# The seeds' theory, checked numerically", "",
             "Written by `make paper EXP=theory` (paper/theory.py); each row is also a test. A claim that does not "
             "hold is a result, marked **no**.", ""]
    for title, section in sections.items():
        say(f"theory: {title}")
        parts += [f"## {title} (seed {SOURCES[title]})", "", *section(folder), ""]
    text = "\n".join(parts)
    return atomic_write(folder / "report.md", lambda tmp: Path(tmp).write_text(text))
