"""What TokenCut found with one backbone, and which of its blocks have a defined score.

A block is **undefined** when more than half of its graphs (one per image) have no unique Ncut
vector: the second and third eigenvalues of ``(D - A) x = lambda D x`` coincide (gap below
``eval.tokencut.ncut.UNIQUE_GAP``). With TokenCut's fixed tau = 0.2 that happens when every cosine
similarity of a block's patches is above tau (a complete graph, e.g. collapsed tokens of a deep
skip-free block); any vector of the eigenspace is then a valid "Ncut vector", the box comes from
how the eigensolver breaks the tie, and the block's CorLoc (10.1 on every such block of a
released ViT-S/14 on VOC) measures the solver, not the features. Why more than half: above it most
of the block's boxes are arbitrary, so its CorLoc is mostly the solver's; at or below it most boxes
are the features' answer and the score is kept, with the share of ambiguous graphs shown beside it
(``ambiguous``). The best block is chosen among the defined ones only.

Not offered: a per-block adaptive tau. Neither the skipless paper (Ji et al., Section 6.2.2, which
uses TokenCut as published) nor anything else at hand here gives one; TokenCut's own paper (Wang et
al., TPAMI 2023) is not in the seed set, so tau stays the published 0.2 for every block.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ..shared.backbones import BackboneSpec
from .corloc import THRESHOLD
from .ncut import Discovery

UNDEFINED_SHARE = 50.0  # % of a block's graphs without a unique Ncut vector above which its CorLoc is undefined


@dataclass
class BackboneResult:
    """What one backbone found on the dataset: per image, per block, the box, its IoU, uniqueness."""

    spec: BackboneSpec
    blocks: list[int]
    patch: int
    image_ids: list[str] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)  # (height, width)
    gt_boxes: list[np.ndarray] = field(default_factory=list)
    boxes: list[np.ndarray] = field(default_factory=list)  # per image (blocks, 4)
    ious: list[np.ndarray] = field(default_factory=list)  # per image (blocks,)
    unique: list[np.ndarray] = field(default_factory=list)  # per image (blocks,): a unique Ncut vector
    examples: list[tuple[torch.Tensor, np.ndarray, list[Discovery]]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    seconds_features: float = 0.0
    seconds_ncut: float = 0.0

    def corloc(self) -> dict[int, float]:
        """Per block, the measured CorLoc in % (of every block, defined or not)."""
        hits = np.stack(self.ious) >= THRESHOLD  # (images, blocks)
        return {b: 100.0 * float(hits[:, j].mean()) for j, b in enumerate(self.blocks)}

    def ambiguous(self) -> dict[int, float]:
        """Per block, the % of images whose graph has no unique Ncut vector (e.g. complete graphs)."""
        unique = np.stack(self.unique)
        return {b: 100.0 * float(1 - unique[:, j].mean()) for j, b in enumerate(self.blocks)}

    def undefined_blocks(self) -> list[int]:
        """Blocks whose CorLoc is undefined (module docstring): ambiguous on more than half the images."""
        return [b for b, share in self.ambiguous().items() if share > UNDEFINED_SHARE]

    def best_block(self) -> int | None:
        """The defined block of the best CorLoc (ties: the deeper block); None when no block is defined."""
        scores, undefined = self.corloc(), set(self.undefined_blocks())
        defined = [b for b in self.blocks if b not in undefined]
        return max(defined, key=lambda b: (scores[b], b)) if defined else None
