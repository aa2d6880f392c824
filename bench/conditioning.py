"""The conditioning diagnostics, timed (``skipless.analysis``; ``make conditioning``).

    python -m bench --only conditioning [--quick]

- ``dense_vs_free``: kappa(J J^T) of a small ViT (2 blocks of width 48, 32-px images, 2 images:
  J is 480 x ~57k) matrix-free (Lanczos on J J^T products) against the dense float64 Jacobian
  (``torch.func.jacrev``, then its singular values): seconds of each and the relative gap of both
  extreme eigenvalues;
- ``vit_s``: matrix-free kappa(J J^T) of ViT-S at 224 px (one image: J J^T has size 75 648; the
  dense J would be 75 648 x 21.3 M, 13 TB in float64, so there is no dense side): seconds per
  J J^T product, Lanczos products, total seconds, for skip and skipless with the paper's init;
- ``make_conditioning``: the wall time of ``make conditioning`` on one ViT-S backbone at its
  defaults (``configs/conditioning.yaml``), split by measure.
"""
from __future__ import annotations

import tempfile
import time
from typing import Any

import torch

from skipless.analysis.condition_number import Solver, dense_condition
from skipless.analysis.jacobians import network_jacobian_condition, network_jacobian_dense
from skipless.config import load_config
from skipless.eval.conditioning.run import run
from skipless.models import create_vit

from .table import markdown_table


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def dense_vs_free() -> dict[str, Any]:
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="skipless", init="cutskip", depth=2, embed_dim=48, num_heads=3,
                       img_size=32).eval()
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    jac, dense_s = _timed(lambda: network_jacobian_dense(model, images, max_entries=5e7))
    dense, svd_s = _timed(lambda: dense_condition(jac, gram=True))
    free, free_s = _timed(lambda: network_jacobian_condition(model, images, Solver(max_iter=480)))
    return {"shape_of_J": list(jac.shape), "dense_s": dense_s + svd_s, "matrix_free_s": free_s,
            "products": free.iterations, "kappa_dense": dense.value, "kappa_matrix_free": free.value,
            "largest_rel_gap": abs(free.largest / dense.largest - 1), "smallest_rel_gap": abs(free.smallest / dense.smallest - 1)}


def vit_s(quick: bool) -> list[dict[str, Any]]:
    rows = []
    image = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    for residual, init in (("skip", "timm"), ("skipless", "cutskip")):
        torch.manual_seed(0)
        model = create_vit("vit_small", residual=residual, init=init).eval()
        max_iter = 4 if quick else 300
        c, seconds = _timed(lambda: network_jacobian_condition(model, image, Solver(max_iter=max_iter)))
        rows.append({"model": f"{residual}+{init}", "size_of_JJt": c.dim, "products": c.iterations,
                     "s_per_product": seconds / max(1, c.iterations), "total_s": seconds, "kappa": c.short()})
    return rows


def make_conditioning(quick: bool) -> dict[str, Any]:

    extra = ["solver.max_iter=4", "num_images=2", "image_size=64"] if quick else []
    with tempfile.TemporaryDirectory(prefix="bench-conditioning-") as out:  # its JSON/figures are not the bench's
        cfg = load_config("conditioning", ["ckpt=init:skip", f"out={out}", *extra])
        written, seconds = _timed(lambda: run(cfg))
    record = written["results"]["init-skip"]
    return {"backbone": "init:skip (ViT-S)", "total_s": seconds, **{f"{k}_s": v for k, v in record["seconds"].items()}}


def section_conditioning(quick: bool) -> tuple[dict[str, Any], str]:
    results = {"dense_vs_free": dense_vs_free(), "vit_s": vit_s(quick), "make_conditioning": make_conditioning(quick)}
    d = results["dense_vs_free"]
    text = (f"\nkappa(J J^T) matrix-free vs dense float64 (J {d['shape_of_J'][0]} x {d['shape_of_J'][1]}):\n"
            + markdown_table([d], ["dense_s", "matrix_free_s", "products", "kappa_dense", "kappa_matrix_free",
                                   "largest_rel_gap", "smallest_rel_gap"])
            + "\n\nmatrix-free kappa(J J^T), ViT-S at 224 px, one image:\n"
            + markdown_table(results["vit_s"], ["model", "size_of_JJt", "products", "s_per_product", "total_s", "kappa"])
            + "\n\nmake conditioning, one ViT-S backbone at the defaults:\n"
            + markdown_table([results["make_conditioning"]], list(results["make_conditioning"])))
    return results, text
