"""Cost and convergence of the Jacobian condition numbers on ViT-S (analysis/jacobians.py).

Run: ``PYTHONPATH=src OMP_NUM_THREADS=1 python tests/jacobian_measure.py network 112`` (or ``224``),
``... blocks 224``, ``... product 224``; a third argument ``float64`` or ``float32`` keeps one dtype. Not a test: it prints numbers (CPU, one thread, one random
Gaussian image; minutes). ``network``: ``kappa(J J^T)`` for skip and skipless + cutskip, float64 and
float32, with the time per ``J J^T v`` product, the total time and the Lanczos iterations.
``blocks``: ``block_jacobian_conditions`` on blocks 0, 4, 7, 11. ``product``: only the per-product
times. ``MAX_ITER`` (environment, default 300) caps Lanczos; ``RESIDUAL=skip`` (or ``skipless``) keeps one model.

Measured (2-core machine shared with another job, one thread, ViT-S at init, seed 0, tol 1e-3):

    kappa(J J^T)        px  dtype    s/product  iterations  total  result
    skip                112 float64  0.49       300         151 s  >= 371 (not converged; lambda_min res 13 at 283.5)
    skip                112 float32  0.32       300          87 s  >= 373 (not converged)
    skipless+cutskip    112 float64  0.67        54          37 s  inf (lambda_min 2.9e-5 vs lambda_max 8.2e6)
    skipless+cutskip    112 float32  0.26         2           1 s  inf (float32 threshold 2.3e-3 * lambda_max)
    skip                224 float64  1.83       300         479 s  >= 1687 (not converged; lambda_min res 27 at 153.6)
    skip                224 float32  0.85         4           4 s  inf (float32 threshold 9e-3 * lambda_max)
    skipless+cutskip    224 float64  1.60        49          86 s  inf (lambda_min 4.5e-4 vs lambda_max 3.3e7)
    skipless+cutskip    224 float32  0.89         2           2 s  inf

    block_jacobian_conditions, 224 px, blocks 0/4/7/11 (attn, mlp):
    skip               33 s: 2.81/3.08, 2.71/3.12, 2.76/3.14, 2.82/3.10 (28-90 iterations, all converged)
    skipless+cutskip  190 s: attn >= 2.2e6, >= 8.1e5, >= 1.2e8, inf; mlp >= 1.6e5 ... 4.3e5 (300, not converged)

The largest eigenvalue converges in a few dozen products; the smallest, at the bottom of a dense
spectrum, does not within 300, so finite values are flagged lower bounds. float32 cannot resolve
kappa above ``1 / (dim * eps32)`` (435 at 112 px, 111 at 224 px for one image): use float64.
"""
from __future__ import annotations

import os
import sys
import time

import torch

from skipless.analysis.condition_number import Solver
from skipless.analysis.jacobians import gram_matvec, _network, block_jacobian_conditions, network_jacobian_condition
from skipless.models import create_vit
from skipless.models.attention import use_explicit_attention

MODELS = tuple(m for m in (("skip", "timm"), ("skipless", "cutskip")) if os.environ.get("RESIDUAL", m[0]) == m[0])
MAX_ITER = int(os.environ.get("MAX_ITER", 300))


def model_and_image(residual: str, init: str, px: int):
    torch.manual_seed(0)
    model = create_vit("vit_small", residual=residual, init=init).eval()
    return model, torch.randn(1, 3, px, px, generator=torch.Generator().manual_seed(1))


def product_seconds(model, image, dtype, repeats: int = 2) -> float:
    net, f, params, _ = _network(model, image, dtype)
    with use_explicit_attention(net):
        matvec, dim = gram_matvec(f, params)
        v = torch.randn(dim, dtype=dtype)
        matvec(v)
        start = time.perf_counter()
        for _ in range(repeats):
            matvec(v)
        return (time.perf_counter() - start) / repeats


def main(what: str, px: int, dtypes=(torch.float64, torch.float32)) -> None:
    torch.set_num_threads(1)
    for residual, init in MODELS:
        model, image = model_and_image(residual, init, px)
        if what == "blocks":
            start = time.perf_counter()
            conds = block_jacobian_conditions(model, image, [0, 4, 7, 11], Solver(max_iter=MAX_ITER))
            total = time.perf_counter() - start
            cells = "  ".join(f"L{b} attn {c['attn'].short()} ({c['attn'].iterations} it) mlp {c['mlp'].short()} "
                              f"({c['mlp'].iterations} it)" for b, c in conds.items())
            print(f"{px}px {residual}+{init} blocks: {total:.0f} s  {cells}", flush=True)
            continue
        for dtype in dtypes:
            per = product_seconds(model, image, dtype)
            line = f"{px}px {residual}+{init} {str(dtype)[6:]}: {per:.2f} s per JJ^T product"
            if what == "network":
                start = time.perf_counter()
                c = network_jacobian_condition(model, image, Solver(max_iter=MAX_ITER, dtype=dtype))
                total = time.perf_counter() - start
                line += (f"; kappa {c.short()} in {c.iterations} iterations, {total:.0f} s; lambda_max "
                         f"{c.largest:.6g} (res {c.largest_residual:.2g}) lambda_min {c.smallest:.6g} "
                         f"(res {c.smallest_residual:.2g}) dim {c.dim}")
            print(line, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), *([(getattr(torch, sys.argv[3]),)] if len(sys.argv) > 3 else []))
