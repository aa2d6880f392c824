"""Linear segmentation heads on frozen patch features, trained side by side.

The probe of the paper's Section 6.2.1: a 1x1 convolution (a linear map per patch) from frozen
features to class logits, logits upsampled bilinearly to the label resolution, cross-entropy that
ignores label 255, 30 epochs, a sweep over learning rates with the best reported. As in DINOv2's
linear segmentation head, a BatchNorm may precede the linear map; it is used without affine
parameters, so it holds no weights and one instance serves every head that reads the same
features (its running statistics depend only on the features, not on the head). The linear map
after it absorbs any affine transform, so nothing is lost.

Heads come in groups: a group reads some cached blocks (``single``: the last block; ``ms``: several
blocks concatenated) and holds one head per learning rate. Every head of every group is updated at
every step of one pass over the cached features, so a whole sweep costs one pass of the data per
epoch; each head has its own parameters and its own optimizer parameter group, so training them
together gives each the same updates as training it alone.

Optimiser: AdamW (weight decay 0 by default) with a per-step cosine decay to 0, head weights from
N(0, 0.01^2) and zero bias (DINO's ``eval_linear``). The paper does not state its optimiser or lrs.
Each head draws its initial weights from its own generator, seeded by ``(seed, group, lr)``: a head
starts from the same weights whatever other lrs or groups share the sweep, so widening a sweep adds
heads without changing the others (its best mIoU can only stay or rise).
"""
from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from skipless.config import ConfigError

from .miou import IGNORE_INDEX, ConfusionMatrix

Key = tuple[str, int]  # (group name, index of the learning rate)
OPTIMIZERS = ("adamw", "sgd")


def head_generator(seed: int, group: str, lr: float) -> torch.Generator:
    """A CPU generator seeded by ``(seed, group, lr)`` alone (see the module docstring)."""
    words = np.random.SeedSequence([int(seed), zlib.crc32(group.encode()), zlib.crc32(repr(float(lr)).encode())])
    return torch.Generator().manual_seed(int(words.generate_state(1, np.uint64)[0] >> np.uint64(1)))


class LinearHeads(nn.Module):
    """Groups of 1x1 linear heads, one per learning rate, each group on its own feature channels.

    Args:
        groups: group name -> indices of the input channels the group reads.
        num_classes: output classes.
        lrs: learning rates; group ``g`` gets one head per lr, keyed ``(g, j)``.
        bn: a BatchNorm (no affine) on the group's features before its heads.
        seed: seeds each head's initial weights (``head_generator``).
    """

    def __init__(self, groups: Mapping[str, Sequence[int] | np.ndarray], num_classes: int,
                 lrs: Sequence[float], bn: bool = True, seed: int = 0) -> None:
        super().__init__()
        self.lrs = [float(lr) for lr in lrs]
        self.num_classes = int(num_classes)
        self.group_names = list(groups)
        self.norms = nn.ModuleDict()
        self.heads = nn.ModuleDict()
        for name, channels in groups.items():
            channels = torch.as_tensor(np.asarray(channels), dtype=torch.long)
            self.register_buffer(f"channels_{name}", channels, persistent=False)
            dim = int(channels.numel())
            self.norms[name] = nn.BatchNorm2d(dim, affine=False) if bn else nn.Identity()
            heads = nn.ModuleList(nn.Conv2d(dim, self.num_classes, kernel_size=1) for _ in self.lrs)
            for head, lr in zip(heads, self.lrs):
                nn.init.normal_(head.weight, std=0.01, generator=head_generator(seed, name, lr))
                nn.init.zeros_(head.bias)
            self.heads[name] = heads

    @property
    def keys(self) -> list[Key]:
        return [(g, j) for g in self.group_names for j in range(len(self.lrs))]

    def param_groups(self) -> list[dict[str, Any]]:
        """One optimizer parameter group per head, with that head's learning rate."""
        return [{"params": list(self.heads[g][j].parameters()), "lr": self.lrs[j], "key": (g, j)}
                for g, j in self.keys]

    def normalized(self, name: str, feats: torch.Tensor) -> torch.Tensor:
        """The group's channels of ``feats`` (B, C, h, w), through its BatchNorm."""
        return self.norms[name](feats.index_select(1, getattr(self, f"channels_{name}")))

    def group_logits(self, name: str, feats: torch.Tensor) -> torch.Tensor:
        """Logits of all heads of a group in one convolution: (B, n_lrs * K, h, w), head-major.

        The heads' weights are concatenated for the call, so each head keeps its own parameters
        (and its own learning rate) while the group costs one kernel launch instead of one per lr.
        """
        x = self.normalized(name, feats)
        heads = self.heads[name]
        weight = torch.cat([h.weight for h in heads])
        bias = torch.cat([h.bias for h in heads])
        return F.conv2d(x, weight, bias)

    def forward(self, feats: torch.Tensor) -> dict[Key, torch.Tensor]:
        """Logits (B, K, h, w) of every head on features (B, C, h, w)."""
        out = {}
        for name in self.group_names:
            chunks = self.group_logits(name, feats).split(self.num_classes, dim=1)
            out.update({(name, j): c for j, c in enumerate(chunks)})
        return out

    def head_state(self, key: Key) -> dict[str, torch.Tensor]:
        """What rebuilds one trained head: its BatchNorm statistics and its linear map, on the CPU."""
        g, j = key
        state = {f"norm.{k}": v.detach().cpu() for k, v in self.norms[g].state_dict().items()}
        state.update({f"linear.{k}": v.detach().cpu() for k, v in self.heads[g][j].state_dict().items()})
        return state


def upsampled_losses(logits: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Per head, the cross-entropy of its logits upsampled bilinearly to the labels' size, 255 ignored.

    Args:
        logits: (B, H * K, h, w), the logits of H heads one after the other (``group_logits``).
        labels: (B, L, L) int64.
        num_classes: K.

    Returns:
        (H,) losses, each averaged over the labelled pixels of the batch (0, not nan, without any).
        Bilinear upsampling acts on each channel alone, so upsampling the H heads together is the
        same as upsampling each.
    """
    b, hk = logits.shape[:2]
    heads = hk // num_classes
    up = F.interpolate(logits, size=labels.shape[-2:], mode="bilinear", align_corners=False)
    up = up.reshape(b, heads, num_classes, *labels.shape[-2:]).transpose(0, 1).flatten(0, 1)
    ce = F.cross_entropy(up, labels.repeat(heads, 1, 1), ignore_index=IGNORE_INDEX, reduction="none")
    count = (labels != IGNORE_INDEX).sum().clamp(min=1)
    return ce.reshape(heads, -1).sum(1) / count


@dataclass
class TrainResult:
    """Per head: the mean training loss of every epoch, and the monitor mIoU by epoch."""

    losses: dict[Key, list[float]] = field(default_factory=dict)
    monitor: dict[int, dict[Key, float]] = field(default_factory=dict)
    train_s: float = 0.0


def cosine_factor(step: int, total: int) -> float:
    """lr multiplier: cosine from 1 at step 0 to 0 at ``total``."""
    return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / max(total, 1)))


def make_optimizer(heads: LinearHeads, name: str = "adamw", weight_decay: float = 0.0) -> torch.optim.Optimizer:
    groups = [{k: v for k, v in g.items() if k != "key"} for g in heads.param_groups()]
    if name == "adamw":
        return torch.optim.AdamW(groups, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(groups, momentum=0.9, weight_decay=weight_decay)
    raise ConfigError(f"unknown optimizer {name!r}; expected one of: {', '.join(OPTIMIZERS)}")


def epoch_order(n_valid: np.ndarray, epoch: int, seed: int) -> np.ndarray:
    """The images of an epoch in a seeded random order (the same for every lr and for the naive baseline)."""
    return np.random.default_rng([seed, epoch]).permutation(n_valid)


def cache_batches(cache: Any, batch_size: int, seed: int, device: torch.device | str, views: Sequence[Any] = ()
                  ) -> Callable[[int], Iterator[tuple[torch.Tensor, torch.Tensor]]]:
    """Epoch -> batches ``(feats (B, C, h, w), labels (B, L, L))`` read from a ``FeatureCache``.

    ``views``: caches of augmented copies of the same images in the same order (e.g. mirrored);
    each epoch every image is read from one of ``cache, *views``, drawn with ``seed``, so an
    augmentation costs one more backbone pass per view, not one per epoch.
    """
    indices = np.flatnonzero(cache.valid)
    sources = [cache, *views]
    if any(len(v) != len(cache) for v in views):
        raise ValueError("augmented views must hold the same images as the cache")

    def batches(epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = epoch_order(indices, epoch, seed)
        pick = np.random.default_rng([seed, epoch, 1]).integers(0, len(sources), size=len(order))
        for start in range(0, len(order), batch_size):
            chunk, which = order[start:start + batch_size], pick[start:start + batch_size]
            parts = [sources[v].batch(chunk[which == v], device) for v in range(len(sources)) if (which == v).any()]
            yield torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    return batches


def train_heads(heads: LinearHeads, batches: Callable[[int], Iterable[tuple[torch.Tensor, torch.Tensor]]],
                steps_per_epoch: int, epochs: int = 30, optimizer: str = "adamw", weight_decay: float = 0.0,
                on_epoch: Callable[[int, dict[Key, float]], dict[Key, float] | None] | None = None,
                progress: bool = True, desc: str = "probe") -> TrainResult:
    """Train every head of ``heads`` on the same batches, ``epochs`` times over ``batches(epoch)``.

    The heads of a group are evaluated in one convolution and one upsampling, and the sum of
    their losses is back-propagated once: no parameter is shared, so each head receives exactly
    the gradient of its own loss. Peak memory is one group's upsampled logits, (B, n_lrs*K, L, L).
    ``on_epoch(epoch, mean losses)`` is called after every epoch (1-based); what it returns (a
    monitor mIoU per head, or None) is recorded.
    """
    opt = make_optimizer(heads, optimizer, weight_decay)
    total = steps_per_epoch * epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: cosine_factor(step, total))
    result = TrainResult(losses={k: [] for k in heads.keys})
    t0 = time.perf_counter()
    heads.train()
    with tqdm(total=total, desc=desc, unit="step", disable=not progress, leave=False) as bar:
        for epoch in range(1, epochs + 1):
            sums: dict[str, torch.Tensor] = {}  # per group, its heads' summed losses, on the device
            steps = 0
            for feats, labels in batches(epoch):
                opt.zero_grad(set_to_none=True)
                for name in heads.group_names:
                    losses = upsampled_losses(heads.group_logits(name, feats), labels, heads.num_classes)
                    losses.sum().backward()  # heads share no parameter: each gets its own loss's gradient
                    sums[name] = sums.get(name, 0) + losses.detach()
                opt.step()
                sched.step()
                steps += 1
                bar.update(1)
            means = {k: 0.0 for k in heads.keys}
            for name, summed in sums.items():  # read back once an epoch, not at every step
                means.update({(name, j): v for j, v in enumerate((summed / max(steps, 1)).tolist())})
            for k, v in means.items():
                result.losses[k].append(v)
            bar.set_postfix(loss=f"{min(means.values()):.3f}")
            if on_epoch is not None:
                heads.eval()
                monitor = on_epoch(epoch, means)
                heads.train()
                if monitor:
                    result.monitor[epoch] = monitor
    heads.eval()
    result.train_s = time.perf_counter() - t0
    return result


def upsample_argmax(logits: torch.Tensor, size: Sequence[int], num_classes: int) -> torch.Tensor:
    """Logits of n heads (1, n * K, h, w) -> their predictions (n, H, W) uint8, upsampled bilinearly first."""
    up = F.interpolate(logits, size=tuple(size), mode="bilinear", align_corners=False)
    # max(1).indices, not argmax(1): the same classes, several times faster on the CPU over a middle dim
    return up.reshape(-1, num_classes, *up.shape[-2:]).max(1).indices.to(torch.uint8)


@torch.no_grad()
def evaluate_cached(heads: LinearHeads, cache: Any, device: torch.device | str, batch_size: int = 16
                    ) -> dict[Key, ConfusionMatrix]:
    """Confusion matrices of every head on a cached split, at the cache's label resolution (monitor)."""
    heads.eval()
    conf = {k: ConfusionMatrix(heads.num_classes) for k in heads.keys}
    indices = np.flatnonzero(cache.valid)
    k = heads.num_classes
    for start in range(0, len(indices), batch_size):
        feats, labels = cache.batch(indices[start:start + batch_size], device)
        for name in heads.group_names:
            logits = heads.group_logits(name, feats)
            up = F.interpolate(logits, size=labels.shape[-2:], mode="bilinear", align_corners=False)
            pred = up.reshape(up.shape[0], -1, k, *up.shape[-2:]).max(2).indices  # (B, n_lrs, L, L)
            for j in range(pred.shape[1]):
                conf[(name, j)].update(labels, pred[:, j])
    return conf


class _Masks(Dataset):
    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.dataset.mask(index)


def _as_list(batch: list) -> list:
    return batch


@torch.no_grad()
def evaluate_full(heads: LinearHeads, cache: Any, dataset: Any, device: torch.device | str,
                  keys: Sequence[Key] | None = None, batch_size: int = 8, num_workers: int = 0,
                  on_prediction: Callable[[int, Key, np.ndarray], None] | None = None,
                  progress: bool = True, desc: str = "val") -> dict[Key, ConfusionMatrix]:
    """Confusion matrices at the original resolution of every label map (the reported mIoU).

    The logits of each image's cached features are upsampled bilinearly to the size of its own
    label map, read again from disk, so the score does not depend on the probe's label resolution.
    ``on_prediction(index, key, prediction uint8 (H, W))`` receives every prediction (to save it).
    Images the cache marks unreadable are not scored.
    """
    heads.eval()
    keys = list(heads.keys if keys is None else keys)
    groups = [g for g in heads.group_names if any(key[0] == g for key in keys)]
    conf = {key: ConfusionMatrix(heads.num_classes) for key in keys}
    loader = DataLoader(_Masks(dataset), batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        collate_fn=_as_list)
    start = 0
    with tqdm(total=len(dataset), desc=desc, unit="img", disable=not progress, leave=False) as bar:
        for masks in loader:
            index = np.arange(start, start + len(masks))
            feats, _ = cache.batch(index, device)
            logits = {g: heads.group_logits(g, feats) for g in groups}
            for b, mask in enumerate(masks):
                i = int(index[b])
                if not cache.valid[i]:
                    continue
                target = torch.from_numpy(mask).to(device)
                for g in groups:
                    preds = upsample_argmax(logits[g][b:b + 1], mask.shape, heads.num_classes)
                    for key in keys:
                        if key[0] == g:
                            conf[key].update(target, preds[key[1]])
                            if on_prediction is not None:
                                on_prediction(i, key, preds[key[1]].cpu().numpy())
            start += len(masks)
            bar.update(len(masks))
    return conf
