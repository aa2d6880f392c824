"""Linear classifiers on cached global features, one per (feature group, learning rate), trained side by side.

DINO's linear evaluation (Caron et al. 2021; facebookresearch/dino ``eval_linear.py``,
``LinearClassifier``): one ``nn.Linear`` on the frozen features, no BatchNorm, weights from
N(0, 0.01^2) and zero bias, cross-entropy, SGD with momentum 0.9 and no weight decay, the learning
rate scaled by ``batch_size / 256`` (DINO's linear scaling rule) and decayed by a cosine over the
epochs (``CosineAnnealingLR(epochs)``, stepped once per epoch).

Every head of every group sees the same batches in the same order; the heads share no parameter and
each has its own optimizer parameter group, so training them together gives each the updates it would
get alone (tested; up to the float rounding of the shared matrix product), and a sweep of n learning rates costs one pass over the features per
epoch. Each head's initial weights come from a generator seeded by ``(seed, group, lr)`` alone, so
widening the sweep leaves the other heads unchanged.
"""
from __future__ import annotations

import math
import zlib
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

Key = tuple[str, int]  # (group name, index of the learning rate)


def head_generator(seed: int, group: str, lr: float) -> torch.Generator:
    """A CPU generator seeded by ``(seed, group, lr)`` alone."""
    words = np.random.SeedSequence([int(seed), zlib.crc32(group.encode()), zlib.crc32(repr(float(lr)).encode())])
    return torch.Generator().manual_seed(int(words.generate_state(1, np.uint64)[0] >> np.uint64(1)))


class ClassifierHeads(nn.Module):
    """Per feature group, one linear classifier per learning rate.

    Args:
        dims: group name -> input dimension (the group's features are given at call time).
        num_classes: output classes.
        lrs: learning rates (already scaled); group ``g`` has one head per lr, keyed ``(g, j)``.
        seed: seeds each head's initial weights (``head_generator``).
    """

    def __init__(self, dims: Mapping[str, int], num_classes: int, lrs: Sequence[float], seed: int = 0) -> None:
        super().__init__()
        self.lrs, self.num_classes, self.group_names = [float(lr) for lr in lrs], int(num_classes), list(dims)
        self.heads = nn.ModuleDict()
        for name, dim in dims.items():
            heads = nn.ModuleList(nn.Linear(int(dim), self.num_classes) for _ in self.lrs)
            for head, lr in zip(heads, self.lrs):
                with torch.no_grad():
                    head.weight.copy_(torch.randn(head.weight.shape, generator=head_generator(seed, name, lr)) * 0.01)
                    head.bias.zero_()
            self.heads[name] = heads

    @property
    def keys(self) -> list[Key]:
        return [(g, j) for g in self.group_names for j in range(len(self.lrs))]

    def param_groups(self) -> list[dict]:
        """One optimizer parameter group per head, with its learning rate."""
        return [{"params": list(self.heads[g][j].parameters()), "lr": self.lrs[j]} for g, j in self.keys]

    def group_logits(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """Logits of every head of a group in one matrix product: (B, n_lrs, K). Each head keeps its own
        parameters; only the call is shared."""
        heads = self.heads[name]
        weight = torch.cat([h.weight for h in heads])
        bias = torch.cat([h.bias for h in heads])
        return F.linear(x, weight, bias).reshape(x.shape[0], len(heads), self.num_classes)


def cosine_lr(base: float, epoch: int, epochs: int) -> float:
    """The lr of ``epoch`` (0-based) under ``CosineAnnealingLR(T_max=epochs, eta_min=0)``."""
    return base * 0.5 * (1.0 + math.cos(math.pi * epoch / epochs))


def train_heads(heads: ClassifierHeads, inputs: Mapping[str, torch.Tensor], labels: torch.Tensor, *, epochs: int,
                batch_size: int, seed: int = 0, progress: bool = True, desc: str = "linear") -> dict[Key, list[float]]:
    """Train every head on its group's ``inputs[group]`` (N, D) against ``labels`` (N,); returns each head's
    mean training loss per epoch. Batches are a seeded shuffle of the N samples, the same for every head."""
    groups = heads.param_groups()
    base = [g["lr"] for g in groups]
    opt = torch.optim.SGD(groups, momentum=0.9, weight_decay=0.0)
    losses: dict[Key, list[float]] = {k: [] for k in heads.keys}
    n = int(labels.shape[0])
    heads.train()
    with tqdm(total=epochs, desc=desc, unit="epoch", disable=not progress, leave=False) as bar:
        for epoch in range(epochs):
            for group, lr in zip(opt.param_groups, base):
                group["lr"] = cosine_lr(lr, epoch, epochs)
            order = torch.from_numpy(np.random.default_rng([seed, epoch]).permutation(n)).to(labels.device)
            sums = torch.zeros(len(heads.keys), device=labels.device)
            for start in range(0, n, batch_size):
                idx = order[start:start + batch_size]
                y = labels[idx]
                opt.zero_grad(set_to_none=True)
                per_head = []
                for name in heads.group_names:
                    logits = heads.group_logits(name, inputs[name][idx])  # (B, H, K)
                    ce = F.cross_entropy(logits.transpose(1, 2), y[:, None].expand(-1, logits.shape[1]),
                                         reduction="none")  # (B, H)
                    per_head.append(ce.mean(0))
                loss = torch.cat(per_head)
                loss.sum().backward()  # no shared parameter: each head gets its own loss's gradient
                opt.step()
                sums += loss.detach() * idx.numel()
            for key, v in zip(heads.keys, (sums / n).tolist()):
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
