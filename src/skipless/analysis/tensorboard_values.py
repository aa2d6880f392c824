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

Names are shortened for TensorBoard, whose cards cut a long tag in its middle (issue 35:
``watch/conditioning/embedding_log_k…/block7`` hid attention against MLP): the group is ``watch/cond/``
(``GROUP``) and two prefixes are shorter (``TB_PREFIXES``: ``emb_log_kappa_attn+skip/block7``,
``eff_rank_cls/block7``); ``diagnostics.jsonl`` and the reports keep the long names.

The reason of each ∞ and the iterations and residuals of each bound are in ``diagnostics.jsonl``
(``result_to_json``) and in the log line of the call.
"""
from __future__ import annotations

import math

import numpy as np

from .condition_number import Condition
from .diagnostics import Diagnosis, named_values

INFINITY_DRAWN = float(np.finfo(np.float32).max)
GROUP = "watch/cond"  # the training's conditioning monitor writes its tags under it
TB_PREFIXES = {"embedding_log_kappa_": "emb_log_kappa_", "effective_rank_": "eff_rank_"}
LOWER_BOUND = "lower_bound"
INFINITE = "infinite"


def tensorboard_name(name: str) -> str:
    """``named_values``'s name as TensorBoard shows it (``TB_PREFIXES``; module docstring)."""
    for long, short in TB_PREFIXES.items():
        if name.startswith(long):
            return short + name[len(long):]
    return name


def drawn_value(name: str, value: float | Condition) -> tuple[str, float]:
    if isinstance(value, Condition) and not value.converged and math.isfinite(value.value):
        return f"{name}/{LOWER_BOUND}", float(value.value)
    v = float(value.value if isinstance(value, Condition) else value)
    return (f"{name}/{INFINITE}", INFINITY_DRAWN) if v == math.inf else (name, v)


def tensorboard_values(d: Diagnosis) -> dict[str, float]:
    """The scalars of ``d`` as TensorBoard draws them (module docstring), under the names of
    ``diagnostics.named_values`` shortened by ``tensorboard_name`` (``kappa_JJt``, ``kappa_attn/block4``,
    ``emb_log_kappa_attn/block4``, ...), ``<name>/infinite`` or ``<name>/lower_bound``."""
    return dict(drawn_value(tensorboard_name(name), v) for name, v in named_values(d))
