"""eval/probe/linear_probe.py and eval/probe/feature_cache.py: the heads learn, side by side equals alone, the cache is exact."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from skipless.eval.probe.feature_cache import FeatureCache, build_cache, stacked_patches
from skipless.eval.probe.linear_probe import (LinearHeads, cache_batches, evaluate_cached, evaluate_full, train_heads,
                                     upsampled_losses)
from skipless.models import create_vit, extract_features

from host_reads import HostReads
from seg_fixtures import write_voc


def _separable_cache(n=24, grid=4, dim=8, k=4, up=4, seed=0):
    """Patch features that encode the patch's class (plus noise); labels are the patch classes upsampled."""
    rng = np.random.default_rng(seed)
    classes = rng.integers(0, k, size=(n, grid, grid))
    centers = rng.normal(size=(k, dim)) * 3
    feats = centers[classes] + rng.normal(scale=0.3, size=(n, grid, grid, dim))
    labels = classes.repeat(up, axis=1).repeat(up, axis=2).astype(np.uint8)
    labels[:, ::7, :] = 255  # some ignored rows
    return FeatureCache(feats.astype(np.float16), labels, np.ones(n, bool), (0,), dim), classes


class _MaskList:
    """A dataset whose masks are the cache's labels (so full-resolution scoring is exact)."""

    def __init__(self, labels):
        self.labels = labels
        self.ids = [str(i) for i in range(len(labels))]

    def __len__(self):
        return len(self.labels)

    def mask(self, i):
        return np.asarray(self.labels[i])


@pytest.mark.parametrize("up, floor", [(1, 0.99), (4, 0.9)])
def test_reaches_near_perfect_miou_on_linearly_separable_features(up, floor):
    # up=1: labels on the patch grid, exactly separable. up=4: labels 4x finer than the patches, as
    # in the probe; bilinear logits blur class boundaries inside a patch, so a few edge pixels miss.
    cache, _ = _separable_cache(n=16, up=up)
    torch.manual_seed(0)
    heads = LinearHeads({"single": cache.channels([0])}, 4, lrs=[1e-6, 3e-2], bn=True)
    result = train_heads(heads, cache_batches(cache, 4, seed=0, device="cpu"), steps_per_epoch=4, epochs=10,
                         progress=False)
    losses = result.losses[("single", 1)]
    assert losses[-1] < 0.5 * losses[0]
    conf = evaluate_cached(heads, cache, "cpu")
    assert conf[("single", 1)].miou() > floor
    assert conf[("single", 0)].miou() < 0.5  # lr 1e-6 barely moves from the init: the sweep is not a no-op
    full = evaluate_full(heads, cache, _MaskList(cache.labels), "cpu", progress=False)
    assert torch.equal(full[("single", 1)].matrix, conf[("single", 1)].matrix)


def test_epoch_losses_are_the_mean_step_losses_read_back_once_an_epoch():
    """lrs of 1e-12 leave the heads as they are, so each epoch's loss is the mean over its batches of
    ``upsampled_losses`` computed here directly; reading them costs one read per group and epoch."""
    cache, _ = _separable_cache(n=16)
    channels = {"single": np.arange(4), "ms": np.arange(8)}
    heads = LinearHeads(channels, 4, lrs=[1e-12, 2e-12], bn=False, seed=0)
    batches = cache_batches(cache, 2, seed=0, device="cpu")  # 8 steps an epoch
    reads_at_epoch_end = []
    with HostReads() as reads:
        result = train_heads(heads, batches, steps_per_epoch=8, epochs=2, progress=False,
                             on_epoch=lambda epoch, means: reads_at_epoch_end.append(len(reads.calls)))
    assert reads_at_epoch_end == [2, 4]  # one per group and epoch, not one per step
    with torch.no_grad():
        for epoch in (1, 2):
            steps = [upsampled_losses(heads.group_logits(name, f), y, 4) for f, y in batches(epoch)
                     for name in ("single", "ms")]
            for g, name in enumerate(("single", "ms")):
                expected = torch.stack(steps[g::2]).mean(0)
                for j in range(2):
                    assert result.losses[(name, j)][epoch - 1] == pytest.approx(float(expected[j]), rel=1e-5)
    assert result.losses[("single", 0)] != pytest.approx(result.losses[("single", 1)], rel=1e-3)


def test_heads_trained_side_by_side_equal_heads_trained_alone():
    cache, _ = _separable_cache(n=12, dim=6)
    channels = {"single": np.arange(3, 6), "ms": np.arange(6)}
    torch.manual_seed(0)
    together = LinearHeads(channels, 4, lrs=[1e-3, 3e-2], bn=True)
    alone = LinearHeads({"ms": channels["ms"]}, 4, lrs=[3e-2], bn=True)
    alone.heads["ms"][0].load_state_dict(together.heads["ms"][1].state_dict())
    for heads in (together, alone):
        train_heads(heads, cache_batches(cache, 4, seed=1, device="cpu"), steps_per_epoch=3, epochs=3,
                    progress=False)
    a, b = together.heads["ms"][1], alone.heads["ms"][0]
    assert torch.allclose(a.weight, b.weight, atol=1e-6) and torch.allclose(a.bias, b.bias, atol=1e-6)
    assert torch.allclose(together.norms["ms"].running_var, alone.norms["ms"].running_var)
    assert not torch.allclose(together.heads["ms"][0].weight, a.weight)


def test_a_heads_init_depends_on_seed_group_and_lr_only():
    channels = {"single": np.arange(3), "ms": np.arange(6)}
    narrow = LinearHeads({"single": channels["single"]}, 4, lrs=[1e-3, 1e-2], seed=0)
    wide = LinearHeads(channels, 4, lrs=[1e-1, 1e-3, 3e-2, 1e-2], seed=0)
    assert torch.equal(narrow.heads["single"][0].weight, wide.heads["single"][1].weight)
    assert torch.equal(narrow.heads["single"][1].weight, wide.heads["single"][3].weight)
    other = LinearHeads({"single": channels["single"]}, 4, lrs=[1e-3], seed=1)
    assert not torch.equal(other.heads["single"][0].weight, narrow.heads["single"][0].weight)
    assert not torch.equal(narrow.heads["single"][0].weight, narrow.heads["single"][1].weight)
    assert abs(float(wide.heads["ms"][2].weight.detach().std()) - 0.01) < 0.004 and not wide.heads["ms"][2].bias.any()


def test_augmented_views_give_each_image_once_per_epoch_from_one_view():
    cache, _ = _separable_cache(n=10, dim=3)
    view = FeatureCache(cache.feats + np.float16(100), cache.labels, cache.valid, cache.layers, cache.dim)
    batches = cache_batches(cache, 4, seed=0, device="cpu", views=[view])
    used = set()
    for epoch in (1, 2, 3):
        feats = torch.cat([f for f, _ in batches(epoch)])
        assert feats.shape[0] == 10
        from_view = feats[:, 0, 0, 0] > 50
        # undo the view's offset: every image of the cache appears exactly once
        plain = torch.where(from_view[:, None, None, None], feats - 100, feats)
        ref = torch.from_numpy(cache.feats.astype(np.float32)).permute(0, 3, 1, 2)
        matches = [int(((plain[i] - ref).abs().amax(dim=(1, 2, 3)) < 0.1).nonzero()[0]) for i in range(10)]
        assert sorted(matches) == list(range(10))
        used |= set(from_view.tolist())
    assert used == {True, False}


def test_grouped_loss_equals_one_head_at_a_time():
    torch.manual_seed(0)
    k, heads = 5, 3
    logits = torch.randn(2, heads * k, 3, 4)
    labels = torch.randint(0, k, (2, 12, 16))
    labels[0, :4] = 255
    got = upsampled_losses(logits, labels, k)
    for j in range(heads):
        up = F.interpolate(logits[:, j * k:(j + 1) * k], size=(12, 16), mode="bilinear", align_corners=False)
        assert got[j] == pytest.approx(float(F.cross_entropy(up, labels, ignore_index=255)), rel=1e-5)
    assert torch.equal(upsampled_losses(logits, torch.full_like(labels, 255), k), torch.zeros(heads))


def test_cache_holds_the_backbones_patch_tokens(tmp_path):
    root = write_voc(tmp_path / "data", n_train=5, n_val=1, classes=["background", "a", "b"])
    from skipless.data.segmentation.interface import VOCSegDataset
    ds = VOCSegDataset(root, "train", name="default")
    torch.manual_seed(0)
    model = create_vit("vit_tiny", depth=3, img_size=32).eval()
    disk = build_cache(model, ds, [0, -1], resolution=32, label_size=8, folder=tmp_path / "c", key={"k": 1},
                       batch_size=2, progress=False)
    memory = build_cache(model, ds, [2, 0], resolution=32, label_size=8, batch_size=3, progress=False)
    assert disk.layers == memory.layers == (0, 2) and disk.grid == (2, 2) and disk.feats.shape == (5, 2, 2, 384)
    # batch sizes differ (2 vs 3): equal up to float16 rounding of batch-size-dependent float32 sums
    assert np.allclose(np.asarray(disk.feats, np.float32), memory.feats.astype(np.float32), atol=1e-2)
    assert np.array_equal(np.asarray(disk.labels), memory.labels)
    from skipless.eval.probe.feature_cache import image_tensor
    x = torch.stack([image_tensor(ds.image(i), 32) for i in range(5)])
    with torch.no_grad():
        out = extract_features(model, x, [2], norm=True)[("out", 2)][:, 1:]  # patch tokens, CLS dropped
    got = torch.from_numpy(np.asarray(disk.feats)[..., disk.channels([2])].astype(np.float32)).reshape(5, 4, -1)
    assert torch.allclose(got, out, atol=2e-2, rtol=1e-2)
    assert torch.allclose(stacked_patches(model, x, [2], True).reshape(5, 4, -1), out)
    # the same key reuses the folder; another key rebuilds it
    again = build_cache(model, ds, [0, 2], resolution=32, label_size=8, folder=tmp_path / "c", key={"k": 1},
                        progress=False)
    assert again.reused and np.array_equal(np.asarray(again.feats), np.asarray(disk.feats))
    other = build_cache(model, ds, [0, 2], resolution=32, label_size=8, folder=tmp_path / "c", key={"k": 2},
                        progress=False)
    assert not other.reused
    # labels: nearest-neighbour resized class indices, 255 kept
    assert set(np.unique(np.asarray(disk.labels)).tolist()) <= {0, 1, 2, 255}


def test_unreadable_images_are_skipped_and_counted(tmp_path):
    root = write_voc(tmp_path / "data", n_train=4, n_val=1, classes=["background", "a", "b"])
    (root / "VOCdevkit/VOC2012/JPEGImages/000002.jpg").write_bytes(b"not a jpeg")
    from skipless.data.segmentation.interface import VOCSegDataset
    ds = VOCSegDataset(root, "train", name="default")
    model = create_vit("vit_tiny", depth=1, img_size=32).eval()
    with pytest.warns(Warning):
        cache = build_cache(model, ds, [0], resolution=32, label_size=8, progress=False)
    assert cache.valid.tolist() == [True, True, False, True] and cache.meta["skipped"] == 1
    assert (cache.labels[2] == 255).all()
