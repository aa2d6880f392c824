"""Linear classifiers on cached global features, one per (feature group, learning rate), trained side by side.

One ``nn.Linear`` per head on the frozen features, cross-entropy, the optimizer, schedule and batch of
the recipe (``eval/linear/recipe.py``; the presets of ``configs/linear-preset/``):

- DINO's linear evaluation (Caron et al. 2021; facebookresearch/dino ``eval_linear.py``,
  ``LinearClassifier``): no BatchNorm, weights from N(0, 0.01^2), zero bias, SGD with momentum 0.9 and
  no weight decay, the lr scaled by ``batch_size / 256`` and decayed by a cosine over the epochs
  (``CosineAnnealingLR(epochs)``, stepped once per epoch);
- MAE's linear probing (He et al. 2022, App. A.2; facebookresearch/mae ``main_linprobe.py``):
  ``BatchNorm1d(affine=False, eps=1e-6)`` before the head (MAE: it calibrates the feature magnitudes of
  different backbones so that one lr serves all, and folds into the linear layer after training), weights
  from ``trunc_normal_(std=0.01)`` (timm's bounds +-2, absolute: in effect a normal), zero bias, LARS,
  warm-up then cosine per step.

With several feature sets per image (``views``, seed 002's ImageNet-1k probe: ``eval/linear/views.py``)
each epoch reads the set drawn for it, every head the same one.

Every head of every group sees the same batches in the same order; the heads share no parameter and
each has its own optimizer parameter group, so training them together gives each the updates it would
get alone (tested; up to the float rounding of the shared matrix product), and a sweep of n learning rates costs one pass over the features per
epoch. The BatchNorm has no parameter: one per group serves all its heads and normalises a batch as
each head's own would. Each head's initial weights come from a generator seeded by ``(seed, group,
lr)`` alone, so widening the sweep leaves the other heads unchanged.
"""
from __future__ import annotations

import zlib
from typing import Mapping, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from .optimizers import build_optimizer
from .recipe import Recipe
from .schedule import lr_at, step_time
from .views import view_draws

Key = tuple[str, int]  # (group name, index of the learning rate)
Inputs = Mapping[str, torch.Tensor]  # group name -> (N, D) features of the N training images


def head_generator(seed: int, group: str, lr: float) -> torch.Generator:
    """A CPU generator seeded by ``(seed, group, lr)`` alone."""
    words = np.random.SeedSequence([int(seed), zlib.crc32(group.encode()), zlib.crc32(repr(float(lr)).encode())])
    return torch.Generator().manual_seed(int(words.generate_state(1, np.uint64)[0] >> np.uint64(1)))


class ClassifierHeads(nn.Module):
    """Per feature group, an optional BatchNorm (no affine) and one linear classifier per learning rate.

    Args:
        dims: group name -> input dimension (the group's features are given at call time).
        num_classes: output classes.
        lrs: learning rates (already scaled); group ``g`` has one head per lr, keyed ``(g, j)``.
        recipe: its ``norm`` / ``norm_eps`` (the BatchNorm) and ``init`` / ``init_std`` (the weights).
        seed: seeds each head's initial weights (``head_generator``).
    """

    def __init__(self, dims: Mapping[str, int], num_classes: int, lrs: Sequence[float], recipe: Recipe,
                 seed: int = 0) -> None:
        super().__init__()
        self.lrs, self.num_classes, self.group_names = [float(lr) for lr in lrs], int(num_classes), list(dims)
        self.heads = nn.ModuleDict()
        self.norms = nn.ModuleDict()
        for name, dim in dims.items():
            heads = nn.ModuleList(nn.Linear(int(dim), self.num_classes) for _ in self.lrs)
            for head, lr in zip(heads, self.lrs):
                init_weight(head.weight, recipe.init, recipe.init_std, head_generator(seed, name, lr))
                with torch.no_grad():
                    head.bias.zero_()
            self.heads[name] = heads
            self.norms[name] = (nn.BatchNorm1d(int(dim), affine=False, eps=recipe.norm_eps)
                                if recipe.norm == "batchnorm" else nn.Identity())

    @property
    def keys(self) -> list[Key]:
        return [(g, j) for g in self.group_names for j in range(len(self.lrs))]

    def param_groups(self) -> list[dict]:
        """One optimizer parameter group per head, with its learning rate."""
        return [{"params": list(self.heads[g][j].parameters()), "lr": self.lrs[j]} for g, j in self.keys]

    def group_logits(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """Logits of every head of a group in one matrix product: (B, n_lrs, K). Each head keeps its own
        parameters; only the call (and the parameter-free BatchNorm) is shared."""
        heads = self.heads[name]
        weight = torch.cat([h.weight for h in heads])
        bias = torch.cat([h.bias for h in heads])
        return F.linear(self.norms[name](x), weight, bias).reshape(x.shape[0], len(heads), self.num_classes)


@torch.no_grad()
def init_weight(weight: torch.Tensor, init: str, std: float, generator: torch.Generator) -> None:
    """``normal``: N(0, std^2) (DINO's ``normal_(0, 0.01)``); ``trunc_normal``: the same truncated at +-2,
    timm's ``trunc_normal_`` bounds that MAE's probe keeps (absolute, so 200 std at 0.01)."""
    if init == "normal":
        weight.copy_(torch.randn(weight.shape, generator=generator) * std)
    elif init == "trunc_normal":
        nn.init.trunc_normal_(weight, std=std, a=-2.0, b=2.0, generator=generator)
    else:
        raise ValueError(f"unknown head init {init!r}; expected normal or trunc_normal")


def train_heads(heads: ClassifierHeads, inputs: Union[Inputs, Sequence[Inputs]], labels: torch.Tensor, recipe: Recipe,
                batch_size: int, *, seed: int = 0, progress: bool = True, desc: str = "linear",
                draws: Sequence[int] | None = None) -> dict[Key, list[float]]:
    """Train every head on its group's ``inputs[group]`` (N, D) against ``labels`` (N,) with the optimizer
    and lr schedule of ``recipe``, ``batch_size`` samples per step; returns each head's mean training loss
    per epoch. Batches are a seeded shuffle of the N samples, the same for every head; with
    ``recipe.drop_last`` a last partial batch is left out (MAE's loader).

    ``inputs`` may be a list of feature sets of the same N images (``views``: the centre crop first, then
    random views; ``eval/linear/views.py``): epoch ``e`` reads set ``draws[e]`` (by default ``view_draws``
    of ``seed``); one set, or a list of one, trains as before."""
    views = [inputs] if isinstance(inputs, Mapping) else list(inputs)
    draws = view_draws(seed, recipe.epochs, len(views)) if draws is None else [int(d) for d in draws]
    if len(draws) != recipe.epochs or not all(0 <= d < len(views) for d in draws):
        raise ValueError(f"draws must give each of the {recipe.epochs} epochs a feature set in 0..{len(views) - 1}, "
                         f"got {draws}")
    groups = heads.param_groups()
    base = [g["lr"] for g in groups]
    opt = build_optimizer(recipe, groups)
    losses: dict[Key, list[float]] = {k: [] for k in heads.keys}
    n = int(labels.shape[0])
    steps = recipe.steps_per_epoch(n, batch_size)
    heads.train()
    with tqdm(total=recipe.epochs, desc=desc, unit="epoch", disable=not progress, leave=False) as bar:
        for epoch in range(recipe.epochs):
            features = views[draws[epoch]]
            order = torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(n)).to(labels.device)
            sums = torch.zeros(len(heads.keys), device=labels.device)
            for step in range(steps):
                t = step_time(epoch, step, steps, recipe.per_step)
                for group, lr in zip(opt.param_groups, base):
                    group["lr"] = lr_at(lr, t, recipe.epochs, recipe.warmup_epochs)
                idx = order[step * batch_size:(step + 1) * batch_size]
                y = labels[idx]
                opt.zero_grad(set_to_none=True)
                per_head = []
                for name in heads.group_names:
                    logits = heads.group_logits(name, features[name][idx])  # (B, H, K)
                    ce = F.cross_entropy(logits.transpose(1, 2), y[:, None].expand(-1, logits.shape[1]),
                                         reduction="none")  # (B, H)
                    per_head.append(ce.mean(0))
                loss = torch.cat(per_head)
                loss.sum().backward()  # no shared parameter: each head gets its own loss's gradient
                opt.step()
                sums += loss.detach() * idx.numel()
            for key, v in zip(heads.keys, (sums / (steps * batch_size if recipe.drop_last else n)).tolist()):
                losses[key].append(v)
            bar.update(1)
    heads.eval()
    return losses


@torch.no_grad()
def evaluate_heads(heads: ClassifierHeads, inputs: Mapping[str, torch.Tensor], labels: torch.Tensor,
                   batch_size: int = 1024) -> dict[Key, dict[str, float | None]]:
    """Top-1 and top-5 accuracy (%) of every head; top-5 is None with 5 classes or fewer (it would be 100)."""
    heads.eval()
    sums: dict[str, torch.Tensor] = {}  # per group, (H, 2) top-1 / top-5 counts on the device: read once, at the end
    top = min(5, heads.num_classes)
    for start in range(0, int(labels.shape[0]), batch_size):
        y = labels[start:start + batch_size]
        for name in heads.group_names:
            logits = heads.group_logits(name, inputs[name][start:start + batch_size])  # (B, H, K)
            best = logits.topk(top, dim=2).indices  # (B, H, top)
            correct = best == y[:, None, None]
            batch_hits = torch.stack((correct[:, :, 0].sum(0), correct.any(2).sum(0)), dim=1)
            sums[name] = sums[name] + batch_hits if name in sums else batch_hits
    hits = {k: [0, 0] for k in heads.keys}
    for name, counts in sums.items():
        hits.update({(name, j): pair for j, pair in enumerate(counts.tolist())})
    n = max(int(labels.shape[0]), 1)
    return {k: {"top1": 100.0 * h[0] / n, "top5": 100.0 * h[1] / n if heads.num_classes > 5 else None}
            for k, h in hits.items()}


def best_lr_index(scores: Sequence[Mapping[str, float | None]]) -> int:
    """The head to report among one group's lrs: the highest val top-1; a tie goes to the higher top-5,
    then to the first lr listed."""
    return max(range(len(scores)), key=lambda j: (scores[j]["top1"], scores[j]["top5"] or 0.0, -j))
