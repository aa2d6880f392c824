"""Weighted k-NN classification of frozen features (Wu et al. 2018, as used by DINO).

Cosine similarity between L2-normalised features; each of the k nearest training features votes
for its label with weight ``exp(sim / T)``, T = 0.07 (DINO's ``eval_knn.py`` default). Used as an
online sanity metric during pretraining: the teacher's CLS features on the embedded default's val
split, labelled with each image's dominant object class.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import nn


@torch.no_grad()
def knn_predict(train_feats: torch.Tensor, train_labels: torch.Tensor, test_feats: torch.Tensor,
                k: int = 20, temperature: float = 0.07, num_classes: int | None = None,
                chunk: int = 1024) -> torch.Tensor:
    """Predicted labels of ``test_feats`` by weighted k-NN vote over ``train_feats``."""
    num_classes = int(num_classes if num_classes is not None else train_labels.max().item() + 1)
    train = F.normalize(train_feats.float(), dim=1)
    k = min(k, train.shape[0])
    preds = []
    for start in range(0, test_feats.shape[0], chunk):
        test = F.normalize(test_feats[start:start + chunk].float(), dim=1)
        sim, idx = (test @ train.T).topk(k, dim=1)
        votes = torch.zeros(test.shape[0], num_classes, device=test.device)
        votes.scatter_add_(1, train_labels[idx], (sim / temperature).exp())
        preds.append(votes.argmax(dim=1))
    return torch.cat(preds)


@torch.no_grad()
def extract_cls(backbone: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]],
                device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """CLS features and labels of every (images, labels) batch, in eval mode."""
    was_training = backbone.training
    backbone.eval()
    feats, labels = [], []
    for images, y in batches:
        feats.append(backbone(images.to(device)).float().cpu())
        labels.append(y)
    backbone.train(was_training)
    return torch.cat(feats), torch.cat(labels)


def knn_accuracy(backbone: nn.Module, train_batches: Callable[[], Iterable], val_batches: Callable[[], Iterable],
                 device: torch.device | str, k: int = 20, num_classes: int | None = None) -> float:
    """Top-1 k-NN accuracy (in [0, 1]) of ``backbone``'s CLS features."""
    xtr, ytr = extract_cls(backbone, train_batches(), device)
    xva, yva = extract_cls(backbone, val_batches(), device)
    pred = knn_predict(xtr, ytr, xva, k=k, num_classes=num_classes)
    return float((pred == yva).float().mean())
