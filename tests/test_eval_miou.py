"""eval/probe/miou.py against an independent computation: per-class pixel sets over the whole dataset."""
import numpy as np
import pytest
import torch

from skipless.eval.probe.miou import ConfusionMatrix, iou_per_class, mean_iou
from host_reads import HostReads


def _reference(pairs, k):
    """Dataset-level IoU with numpy set operations, class by class (no confusion matrix)."""
    inter, union, present = np.zeros(k), np.zeros(k), np.zeros(k, bool)
    for gt, pred in pairs:
        valid = gt != 255
        for c in range(k):
            g, p = (gt == c) & valid, (pred == c) & valid
            inter[c] += (g & p).sum()
            union[c] += (g | p).sum()
            present[c] |= g.any()
    iou = np.where(present, inter / np.maximum(union, 1), np.nan)
    return iou, float(np.mean(iou[present]))


def _random_pairs(rng, k, absent, n=7):
    pairs = []
    for _ in range(n):
        h, w = rng.integers(5, 30, size=2)
        gt = rng.choice([c for c in range(k) if c not in absent], size=(h, w)).astype(np.uint8)
        gt[rng.random((h, w)) < 0.2] = 255
        pred = rng.integers(0, k, size=(h, w)).astype(np.uint8)  # predicts absent classes too
        agree = rng.random((h, w)) < 0.5
        pred[agree & (gt != 255)] = gt[agree & (gt != 255)]
        pairs.append((gt, pred))
    return pairs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_independent_set_computation(seed):
    rng = np.random.default_rng(seed)
    k, absent = 9, {2, 7}
    pairs = _random_pairs(rng, k, absent)
    conf = ConfusionMatrix(k)
    for gt, pred in pairs:
        conf.update(torch.from_numpy(gt), torch.from_numpy(pred))
    iou, miou = _reference(pairs, k)
    assert np.allclose(conf.iou(), iou, equal_nan=True)
    assert conf.miou() == pytest.approx(miou, abs=1e-12)
    assert np.isnan(conf.iou()[sorted(absent)]).all()  # absent from the ground truth: not in the mean
    # the matrix counts every labelled pixel once, ignored pixels never
    assert conf.matrix.sum() == sum(int((gt != 255).sum()) for gt, _ in pairs)
    # dataset-level, not the mean of per-image mIoUs
    per_image = np.mean([_reference([p], k)[1] for p in pairs])
    assert abs(per_image - miou) > 1e-6


def test_false_positives_of_an_absent_class_lower_the_true_class():
    gt = np.array([[0, 0, 1, 1]], np.uint8)
    pred = np.array([[0, 2, 1, 1]], np.uint8)  # class 2 never in the ground truth
    conf = ConfusionMatrix(3)
    conf.update(gt, pred)
    iou = conf.iou()
    assert iou[0] == pytest.approx(0.5) and iou[1] == 1.0 and np.isnan(iou[2])
    assert conf.miou() == pytest.approx(0.75)


def test_batches_and_merges_equal_one_pass():
    rng = np.random.default_rng(3)
    pairs = _random_pairs(rng, 5, set(), n=4)
    one, parts = ConfusionMatrix(5), [ConfusionMatrix(5), ConfusionMatrix(5)]
    for i, (gt, pred) in enumerate(pairs):
        one.update(gt, pred)
        parts[i % 2].update(gt, pred)
    parts[0].merge(parts[1])
    assert torch.equal(one.matrix, parts[0].matrix)
    assert mean_iou(one.matrix.numpy()) == one.miou()
    assert np.allclose(iou_per_class(one.matrix.numpy()), one.iou(), equal_nan=True)


def test_bad_values_are_refused():
    conf = ConfusionMatrix(3)
    with pytest.raises(ValueError, match="ground truth"):
        conf.update(np.array([3]), np.array([0]))
    with pytest.raises(ValueError, match="prediction"):
        conf.update(np.array([0]), np.array([5]))
    with pytest.raises(ValueError, match="shape"):
        conf.update(np.zeros((2, 2)), np.zeros((2, 3)))
    conf.update(np.array([255, 255]), np.array([9, 1]))  # ignored pixels may hold any prediction
    assert conf.matrix.sum() == 0 and np.isnan(conf.miou())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_updates_read_nothing_back_and_bad_values_are_refused_at_the_first_read():
    pairs = _random_pairs(np.random.default_rng(4), 5, set(), n=3)
    on_gpu = [(torch.from_numpy(gt).cuda(), torch.from_numpy(pred).cuda()) for gt, pred in pairs]
    cpu, gpu = ConfusionMatrix(5), ConfusionMatrix(5)
    with HostReads() as reads:
        for gt, pred in on_gpu:
            gpu.update(gt, pred)
    assert reads.calls == []
    for gt, pred in pairs:
        cpu.update(gt, pred)
    assert torch.equal(gpu.matrix.cpu(), cpu.matrix) and gpu.miou() == cpu.miou()
    bad = ConfusionMatrix(3)
    bad.update(torch.tensor([3, 0], device="cuda"), torch.tensor([0, 0], device="cuda"))  # recorded, not read
    with pytest.raises(ValueError, match="ground truth holds values outside"):
        bad.miou()
