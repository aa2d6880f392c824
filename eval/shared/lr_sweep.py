"""When the best learning rate of a sweep sits at its edge (shared by the probe and ``make linear``).

A sweep whose best head trained at its lowest or highest lr may have its optimum outside the values
tried, so both evaluators warn and write ``best_lr_at_edge``. The warning is meant for that case
only: when every lr scores the same (a 3-class set at 100% top-1), or an inner lr ties with the
edge, the sweep already holds an optimum and there is nothing to widen. So an edge is reported only
when its score is strictly better than every other lr's.
"""
from __future__ import annotations

import math
from typing import Any, Sequence


def _comparable(score: Any) -> Any:
    """None and nan never beat anything (a head with no score)."""
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return -math.inf
    return score


def sweep_edge(lrs: Sequence[float], scores: Sequence[Any]) -> str | None:
    """``"highest"`` or ``"lowest"`` when the lr of that value scores strictly better than every other lr
    of the sweep (``scores[j]`` belongs to ``lrs[j]``; numbers or tuples, compared as the selection
    compares them), else None; None for a sweep of one lr."""
    if len(lrs) < 2:
        return None
    keys = [_comparable(s) for s in scores]
    for edge, j in (("highest", max(range(len(lrs)), key=lambda i: lrs[i])),
                    ("lowest", min(range(len(lrs)), key=lambda i: lrs[i]))):
        if all(keys[j] > keys[i] for i in range(len(lrs)) if i != j):
            return edge
    return None
