"""How a ``Diagnosis`` is drawn in TensorBoard, so the curves say what ``diagnostics.jsonl`` says (issue 27, item 3).

TensorBoard cannot draw ∞ and has no notion of a bound; before, an infinite kappa was left out of the
curve (an infinite ``kappa_attn/block11`` never appeared) and a Lanczos result that stopped before
converging was drawn as if it were the value. Here:

- a converged, finite value is drawn under its name (``kappa_JJt``, ``kappa_attn/block4``, ...);
- ∞ (smallest eigenvalue numerically zero, overflow, a diverged model: ``condition_number.py``) is drawn
  under ``<name>/infinite`` at ``INFINITY_DRAWN``, float32's largest value (3.4e38), which no finite
  kappa reaches (float64 Lanczos resolves ``kappa`` up to ``1 / (dim * eps)``, about 6e10 for one ViT-S
  image at 224 px; ``condition_number.zero_threshold``). A tag of its own because TensorBoard's "Ignore
  outliers in chart scaling", on by default, would crop that point out of a curve of finite values;
- a value Lanczos did not converge to (``max_iter`` or a time budget) is a lower bound on kappa
  (Cauchy interlacing, ``lanczos.py``): drawn under ``<name>/lower_bound``, never under ``<name>``.

The reason of each ∞ and the iterations and residuals of each bound are in ``diagnostics.jsonl``
(``result_to_json``) and in the log line of the call.
"""
from __future__ import annotations

import math

import numpy as np

from .condition_number import Condition
from .diagnostics import Diagnosis, named_values

INFINITY_DRAWN = float(np.finfo(np.float32).max)
LOWER_BOUND = "lower_bound"
INFINITE = "infinite"


def _drawn(name: str, value: float | Condition) -> tuple[str, float]:
    if isinstance(value, Condition) and not value.converged and math.isfinite(value.value):
        return f"{name}/{LOWER_BOUND}", float(value.value)
    v = float(value.value if isinstance(value, Condition) else value)
    return (f"{name}/{INFINITE}", INFINITY_DRAWN) if v == math.inf else (name, v)


def tensorboard_values(d: Diagnosis) -> dict[str, float]:
    """The scalars of ``d`` as TensorBoard draws them (module docstring), under the names of
    ``diagnostics.named_values`` (``kappa_JJt``, ``kappa_attn/block4``, ...), ``<name>/infinite`` or
    ``<name>/lower_bound``."""
    return dict(_drawn(name, v) for name, v in named_values(d))
