"""Every conditioning diagnostic of one backbone on one set of images, in one call.

``make conditioning`` (``eval/conditioning/run.py``) and the pretraining callback
(``training/diagnostics_callbacks.py``) both call ``diagnose`` and read its result through
``result_to_json`` and ``scalars``, so the two report the same quantities under the same names:

- ``jacobian``: kappa(J J^T) of the full Jacobian (Ji et al., "Cutting the Skip", Section 4.1,
  Table 5), on the first ``jacobian_images`` images (``jacobians.network_jacobian_condition``);
- ``blocks``: kappa(K_l K_l^T) of the attention and the MLP sub-block of each chosen block, with the
  shortcut added where the block has one (Eq. 7, Table 6), on the first image
  (``jacobians.block_jacobian_conditions``);
- ``embeddings``: mean ln kappa of the sub-block output embeddings over the images
  ("Always Skip Attention", Fig. 1b; ``embedding_condition.py``);
- ``effective_rank``: of the class tokens and of the mean patch tokens over the images
  (Zhang et al., Section 5; ``effective_rank.py``).

A backbone with non-finite weights has diverged: its condition numbers are ∞ with that reason (the
paper's Table 5 reports ∞ for its diverged skipless run) and the embedding quantities are skipped.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

from ..models.features import resolve_layers
from .condition_number import DIVERGED, Condition, Solver, infinite_condition, json_number
from .effective_rank import block_effective_ranks
from .embedding_condition import embedding_conditions
from .jacobians import block_jacobian_conditions, network_jacobian_condition
from .solve_budget import SolveBudget
from .sub_blocks import has_finite_weights

MEASURES = ("jacobian", "blocks", "embeddings", "effective_rank")
DTYPES = {"float64": torch.float64, "float32": torch.float32}


@dataclass(frozen=True)
class DiagnosticSettings:
    """What ``diagnose`` measures and how (the keys of ``configs/conditioning.yaml``)."""

    layers: Any = "paper"
    measures: tuple[str, ...] = MEASURES
    jacobian_images: int = 1
    tol: float = 1e-3
    max_iter: int = 300
    dtype: str = "float64"
    seed: int = 0
    budget_s: float | None = None  # seconds of one call; the Lanczos solves share what the rest leaves

    @property
    def solver(self) -> Solver:
        """The Lanczos settings of every solve of a call (``condition_number.Solver``)."""
        return Solver(tol=self.tol, max_iter=self.max_iter, seed=self.seed, dtype=DTYPES[self.dtype])


@dataclass
class Diagnosis:
    """What ``diagnose`` found; a measure not asked for stays None (``dict`` fields keyed by block)."""

    blocks: list[int]
    images: int
    tokens: int
    jacobian: Condition | None = None
    block_jacobians: dict[int, dict[str, Condition]] | None = None
    embeddings: dict[int, dict[str, float]] | None = None
    effective_rank: dict[int, dict[str, float]] | None = None
    diverged: bool = False
    seconds: dict[str, float] = field(default_factory=dict)


PAPER_BLOCKS = (0, 4, 7, 11)  # the blocks of the paper's Table 6 (ViT-S, 12 blocks)


def paper_blocks(depth: int) -> list[int]:
    """Table 6's blocks 0, 4, 7, 11 of 12, scaled to ``depth`` (the same four for 12 blocks)."""
    return sorted({round(b * (depth - 1) / 11) for b in PAPER_BLOCKS})


def diagnosed_blocks(layers: Any, depth: int) -> list[int]:
    """``"paper"`` (``paper_blocks``), ``"all"``, an index or a list -> block indices (``resolve_layers``)."""
    if isinstance(layers, str) and layers.strip() == "paper":
        return paper_blocks(depth)
    return resolve_layers(list(layers) if isinstance(layers, (list, tuple)) else layers, depth)


def diagnose(model: nn.Module, images: torch.Tensor, settings: DiagnosticSettings,
             jacobian_images: torch.Tensor | None = None,
             progress: Callable[[str], None] | None = None,
             report: Callable[[str], None] | None = None) -> Diagnosis:
    """Measure ``settings.measures`` of ``model`` on ``images`` (B, 3, H, W); see the module docstring.

    ``jacobian_images``: the images of kappa(J J^T) when they differ from ``images[:m]`` (another
    resolution); ``progress``: called with the name of each measure before it starts; ``report``: with
    a progress line of a Lanczos solve every 10 s (``solve_budget.py``).

    ``settings.budget_s`` bounds the call: the direct measures (embeddings, effective rank: a few SVDs)
    run first, then the Lanczos solves share the time left, kappa(J J^T) weighted as all the kernels
    together; a solve the budget stops is a lower bound, flagged (``Condition.budget_spent``).
    """
    blocks = diagnosed_blocks(settings.layers, len(model.blocks))
    solver = settings.solver
    ph, pw = model.patch_embed.patch_size
    tokens = (images.shape[-2] // ph) * (images.shape[-1] // pw) + int(getattr(model, "num_prefix_tokens", 1))
    result = Diagnosis(blocks, int(images.shape[0]), tokens, diverged=not has_finite_weights(model))
    j_images = images[: settings.jacobian_images] if jacobian_images is None else jacobian_images
    kernels = {f"kappa_{k}/block{b}": 1.0 for b in blocks for k in ("attn", "mlp")} if "blocks" in settings.measures else {}
    jacobian = {"kappa_JJt": float(max(1, len(kernels)))} if "jacobian" in settings.measures else {}
    budget = SolveBudget(settings.budget_s, {**jacobian, **kernels}, report)
    for measure in sorted(settings.measures, key=lambda m: m in ("jacobian", "blocks")):  # direct ones first
        if progress is not None:
            progress(measure)
        start = time.perf_counter()
        if measure == "jacobian":
            result.jacobian = (infinite_condition(DIVERGED, 0) if result.diverged
                               else network_jacobian_condition(model, j_images, solver, watch=budget.watch("kappa_JJt")))
        elif measure == "blocks":
            result.block_jacobians = ({b: {"attn": infinite_condition(DIVERGED, 0), "mlp": infinite_condition(DIVERGED, 0)}
                                       for b in blocks} if result.diverged
                                      else block_jacobian_conditions(model, images[:1], blocks, solver,
                                                                     watches=budget.watch))
        elif measure == "embeddings" and not result.diverged:
            result.embeddings = embedding_conditions(model, images, blocks)
        elif measure == "effective_rank" and not result.diverged:
            result.effective_rank = block_effective_ranks(model, images, blocks)
        result.seconds[measure] = time.perf_counter() - start
    return result


def result_to_json(d: Diagnosis) -> dict[str, Any]:
    """A JSON-safe dict of a ``Diagnosis`` (infinities as ``"inf"``; block keys as text)."""
    def per_block(values, convert):
        return None if values is None else {str(b): {k: convert(v) for k, v in row.items()} for b, row in values.items()}

    return {
        "blocks": d.blocks, "images": d.images, "tokens": d.tokens, "diverged": d.diverged,
        "jacobian": None if d.jacobian is None else d.jacobian.to_json(),
        "block_jacobians": per_block(d.block_jacobians, lambda c: c.to_json()),
        "embeddings_log_kappa": per_block(d.embeddings, json_number),
        # seeds/003 Table 3: "the average token condition numbers in log scale before and after each SAB"
        "embeddings_mean_log_kappa": None if d.embeddings is None else {
            name: json_number(sum(row[name] for row in d.embeddings.values()) / len(d.embeddings))
            for name in next(iter(d.embeddings.values()), {})},
        "effective_rank": per_block(d.effective_rank, json_number),
        "seconds": d.seconds,
    }


def named_values(d: Diagnosis) -> list[tuple[str, Condition | float]]:
    """Every quantity of a ``Diagnosis`` under a flat name, a ``Condition`` for each kappa: ``kappa_JJt``,
    and per block ``kappa_attn/block4``, ``kappa_mlp/block4``, ``embedding_log_kappa_attn+skip/block4``,
    ``effective_rank_cls/block4`` ..."""
    out: list[tuple[str, Condition | float]] = []
    if d.jacobian is not None:
        out.append(("kappa_JJt", d.jacobian))
    for prefix, values in (("kappa_", d.block_jacobians), ("embedding_log_kappa_", d.embeddings),
                           ("effective_rank_", d.effective_rank)):
        for b, row in (values or {}).items():
            out.extend((f"{prefix}{name}/block{b}", v) for name, v in row.items())
    return out


def scalars(d: Diagnosis) -> dict[str, float]:
    """``named_values`` as numbers. Infinite values are kept (``math.inf``) and a lower bound is the
    bound; ``tensorboard_values.py`` draws both so they are told apart."""
    return {name: float(v.value if isinstance(v, Condition) else v) for name, v in named_values(d)}
