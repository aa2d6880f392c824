"""Weighted k-NN against a direct computation."""
import math

import torch

from skipless.analysis.knn import knn_predict


def test_knn_vote_matches_a_direct_loop():
    g = torch.Generator().manual_seed(0)
    train = torch.randn(50, 8, generator=g)
    labels = torch.randint(0, 4, (50,), generator=g)
    test = torch.randn(12, 8, generator=g)
    pred = knn_predict(train, labels, test, k=5, temperature=0.1, num_classes=4, chunk=5)
    tn = train / train.norm(dim=1, keepdim=True)
    for i in range(12):
        t = test[i] / test[i].norm()
        sims = [(float(t @ tn[j]), j) for j in range(50)]
        sims.sort(reverse=True)
        votes = [0.0] * 4
        for s, j in sims[:5]:
            votes[int(labels[j])] += math.exp(s / 0.1)
        assert int(pred[i]) == max(range(4), key=lambda c: votes[c])


def test_knn_is_perfect_on_separated_clusters():
    centers = torch.eye(3, 16) * 10
    train = centers.repeat_interleave(10, 0) + 0.1 * torch.randn(30, 16)
    labels = torch.arange(3).repeat_interleave(10)
    test = centers + 0.1 * torch.randn(3, 16)
    assert knn_predict(train, labels, test, k=7).tolist() == [0, 1, 2]
