"""The 2-D embedding: scikit-learn's ``TSNE`` (van der Maaten and Hinton 2008; Barnes-Hut, as
scikit-learn runs it by default), the settings of ``configs/tsne.yaml`` passed as they are."""
from __future__ import annotations

from typing import Any

import numpy as np


def tsne_2d(x: np.ndarray, *, perplexity: float, max_iter: int, init: str, learning_rate: float | str,
            metric: str, seed: int) -> tuple[np.ndarray, dict[str, Any]]:
    """``(points (N, 2), what scikit-learn reports: the final KL divergence and the iterations run)``."""
    from sklearn.manifold import TSNE

    tsne = TSNE(n_components=2, perplexity=float(perplexity), max_iter=int(max_iter), init=init,
                learning_rate=learning_rate, metric=metric, random_state=int(seed))
    points = tsne.fit_transform(np.asarray(x, dtype=np.float32))
    return points, {"kl_divergence": float(tsne.kl_divergence_), "iterations": int(tsne.n_iter_)}
