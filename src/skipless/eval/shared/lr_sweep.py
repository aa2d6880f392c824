"""When the best learning rate of a sweep sits at its edge (shared by the probe and ``make linear``).

A sweep whose best head trained at its lowest or highest lr may have its optimum outside the values
tried, so both evaluators warn and write ``best_lr_at_edge``. The warning is meant for that case
only: when every lr scores the same (a 3-class set at 100% top-1), or an inner lr ties with the
edge, the sweep already holds an optimum and there is nothing to widen. So an edge is reported only
when its score is strictly better than every other lr's, by more than the caller's ``margin`` (the
noise of its score: the probe's mIoU moves by a few tenths of a point between seeds), and when the
sweep rises towards it: its neighbour scores at least as well as the next lr in. A sweep that is best at
the edge but dips and recovers before it (0.40, 0.45, 0.41, 0.452) has a peak inside and says nothing
about the lrs beyond.
"""
from __future__ import annotations

import math
from typing import Any, Sequence


def _comparable(score: Any) -> Any:
    """None and nan never beat anything (a head with no score)."""
    if score is None or (isinstance(score, float) and math.isnan(score)):
        return -math.inf
    return score


def _first(key: Any) -> float:
    return key[0] if isinstance(key, tuple) else key


def sweep_edge(lrs: Sequence[float], scores: Sequence[Any], margin: float = 0.0) -> str | None:
    """``"highest"`` or ``"lowest"`` when the lr of that value scores better than every other lr of the
    sweep by more than ``margin`` (on the first element of tuple scores) and the scores rise towards it
    (module docstring), else None; None for a sweep of one lr. ``scores[j]`` belongs to ``lrs[j]``:
    numbers or tuples, compared as the selection compares them."""
    if len(lrs) < 2:
        return None
    keys = [_comparable(s) for s in scores]
    order = sorted(range(len(lrs)), key=lambda i: lrs[i])
    for edge, inward in (("highest", order[::-1]), ("lowest", order)):
        j = inward[0]
        if not all(keys[j] > keys[i] and _first(keys[j]) - _first(keys[i]) > margin
                   for i in range(len(lrs)) if i != j):
            continue
        if len(inward) < 3 or keys[inward[1]] >= keys[inward[2]]:
            return edge
    return None
