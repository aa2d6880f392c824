"""A time budget shared by the Lanczos solves of one ``diagnose`` call, and their progress lines (issue 27, item 9).

A Lanczos solve for kappa may take hundreds of products: at the start of the CPU demo, kappa(J J^T)
of a ViT-Ti took 238 products (its smallest eigenvalue numerically zero) and the eight kernels
kappa(K K^T) up to 300 each, 654 s in all on 2 shared cores, while the bar said ``Training: 0/?``.
So each solve reports, every ``every_s`` seconds, its products, its two Ritz values and their
relative residuals and the time spent; and with ``seconds`` set the solves share that budget: each
gets ``weight / (weights still to run)`` of the time left when it starts, so a solve that
finishes early (converged, or infinite: its smallest Ritz value below the numerically-zero rule of
``condition_number.py``) leaves its time to the next. A solve stopped by the budget is not a value:
its ratio of Ritz values is a lower bound on kappa (Cauchy interlacing, ``lanczos.py``), reported as
``≥ x (not converged in its time budget)`` and drawn under ``<name>/lower_bound``
(``tensorboard_values.py``). The budget is checked after each product, so a solve overruns its share
by at most one product.
"""
from __future__ import annotations

import time
from typing import Callable

from .jacobians import Watch


def _relative(residual: float, value: float) -> float:
    return residual / abs(value) if value else float("inf")


class SolveBudget:
    """``seconds`` (None: no budget, progress lines only) shared by the solves named in ``weights``."""

    def __init__(self, seconds: float | None, weights: dict[str, float],
                 report: Callable[[str], None] | None = None, every_s: float = 10.0) -> None:
        self.end = None if seconds is None else time.monotonic() + seconds
        self.weights, self.report, self.every_s = dict(weights), report, every_s

    def watch(self, name: str) -> Watch:
        """The Lanczos ``watch`` of the solve ``name`` (one of ``weights``), started now."""
        weight = self.weights.pop(name)
        start = last = time.monotonic()
        deadline = None if self.end is None else start + max(0.0, self.end - start) * weight / (
            weight + sum(self.weights.values()))

        def step(products: int, largest: float, smallest: float, res_largest: float, res_smallest: float) -> bool:
            nonlocal last
            now = time.monotonic()
            if self.report is not None and now - last >= self.every_s:
                last = now
                self.report(f"{name}: {products} products, largest {largest:.4g} (residual {_relative(res_largest, largest):.1e}), "
                            f"smallest {smallest:.4g} (residual {_relative(res_smallest, smallest):.1e}), {now - start:.0f} s")
            return deadline is not None and now >= deadline

        return step
