"""Weighted k-NN classification of frozen features (Wu et al. 2018, as used by DINO).

Cosine similarity between L2-normalised features; each of the k nearest training features votes
for its label with weight ``exp(sim / T)``, T = 0.07 (DINO's ``eval_knn.py`` default). Used as an
online sanity metric during pretraining: the teacher's CLS features on the embedded default's val
split, labelled with each image's dominant object class; ``make knn`` (``eval/knn/run.py``) reads the
votes of several k from one neighbour search (``iter_knn_votes``).
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn


def _check_ks(ks: Sequence[int]) -> list[int]:
    ks = [int(k) for k in ks]
    if not ks or min(ks) < 1:
        raise ValueError(f"k must be a non-empty list of integers >= 1, got {ks}")
    return ks


@torch.no_grad()
def iter_knn_votes(train_feats: torch.Tensor, train_labels: torch.Tensor, test_feats: torch.Tensor,
                   ks: Sequence[int] = (20,), temperature: float = 0.07, num_classes: int | None = None,
                   chunk: int = 1024) -> Iterator[tuple[int, dict[int, torch.Tensor]]]:
    """The weighted votes of several k from one neighbour search, a chunk of test features at a time.

    One ``topk`` of ``max(ks)`` neighbours per chunk, sorted by similarity, serves every k: the k
    nearest are its first k columns (DINO's ``eval_knn.py`` runs a search per k; the result is the
    same). A k above the number of training features uses them all.

    Yields:
        ``(start, {k: votes})``: the chunk's first test index and, per k, its (chunk, num_classes)
        class votes, ``sum exp(sim / T)`` over the k nearest training features of each class.
    """
    ks = _check_ks(ks)
    num_classes = int(num_classes if num_classes is not None else train_labels.max().item() + 1)
    train = F.normalize(train_feats.float(), dim=1)
    labels = train_labels.to(train.device).long()
    deepest = min(max(ks), train.shape[0])
    for start in range(0, test_feats.shape[0], chunk):
        test = F.normalize(test_feats[start:start + chunk].float().to(train.device), dim=1)
        sim, idx = (test @ train.T).topk(deepest, dim=1, sorted=True)
        weight, neighbour = (sim / temperature).exp(), labels[idx]
        votes = {}
        for k in ks:
            n = min(k, deepest)
            v = torch.zeros(test.shape[0], num_classes, device=test.device)
            votes[k] = v.scatter_add_(1, neighbour[:, :n], weight[:, :n])
        yield start, votes


@torch.no_grad()
def knn_predict(train_feats: torch.Tensor, train_labels: torch.Tensor, test_feats: torch.Tensor,
                k: int = 20, temperature: float = 0.07, num_classes: int | None = None,
                chunk: int = 1024) -> torch.Tensor:
    """Predicted labels of ``test_feats`` by weighted k-NN vote over ``train_feats``."""
    return torch.cat([votes[k].argmax(dim=1) for _, votes in
                      iter_knn_votes(train_feats, train_labels, test_feats, (k,), temperature, num_classes, chunk)])


@torch.no_grad()
def extract_cls(backbone: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """CLS features and labels of every (images, labels) batch, in eval mode, on ``device`` (no batch
    waits for the device to hand its features back). Images come in the weights' dtype (float64 under
    ``train.precision=64-true``)."""
    dtype = next(backbone.parameters()).dtype
    was_training = backbone.training
    backbone.eval()
    feats, labels = [], []
    for images, y in batches:
        feats.append(backbone(images.to(device, dtype)).float())
        labels.append(y.to(device))
    backbone.train(was_training)
    return torch.cat(feats), torch.cat(labels)


def knn_accuracy(backbone: nn.Module, train_batches: Callable[[], Iterable], val_batches: Callable[[], Iterable],
                 device: torch.device | str, k: int = 20, num_classes: int | None = None) -> float:
    """Top-1 k-NN accuracy (in [0, 1]) of ``backbone``'s CLS features."""
    xtr, ytr = extract_cls(backbone, train_batches(), device)
    xva, yva = extract_cls(backbone, val_batches(), device)
    pred = knn_predict(xtr, ytr, xva, k=k, num_classes=num_classes)
    return float((pred == yva).float().mean())
