"""make linear views=k (seed 002's ImageNet-1k probe, App. 8.1): the centre crop and k - 1 random views of every
training image cached, one set drawn per epoch. Each epoch reads its drawn set, the draws are reproducible from the
seed, views=1 trains as before to the bit, bad values are refused before anything is written, and a view's cache
is keyed by the number of views."""
import json

import numpy as np
import pytest
import torch

from skipless.config import load_config
from skipless.data.errors import MalformedDatasetError
from skipless.eval.linear import run as linear
from skipless.eval.linear.heads import ClassifierHeads, train_heads
from skipless.eval.linear.recipe import Recipe
from skipless.eval.linear.run import train_and_score
from skipless.eval.linear.views import check_views_agree, view_draws
from skipless.eval.shared.global_features import GlobalFeatures, RandomView, open_features
from global_fixtures import SMALL, colour_images, register_colours, tiny_backbone


def recipe(*overrides: str) -> Recipe:
    return Recipe.from_config(load_config("linear", ["linear-preset=zhang", "lr_batch=8", *overrides]))


def data(n: int = 12, d: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.arange(n) % 3


def test_each_epoch_trains_on_the_feature_set_drawn_for_it(monkeypatch):
    """Set v holds the value v everywhere: what the training loop reads in an epoch names the set it read."""
    r = recipe("epochs=12", "batch_size=4", "views=4")
    _, y = data()
    sets = [{"a": torch.full((12, 6), float(v))} for v in range(4)]
    seen: list[float] = []
    logits = ClassifierHeads.group_logits
    monkeypatch.setattr(ClassifierHeads, "group_logits",
                        lambda self, name, x: (seen.append(x.unique().tolist()), logits(self, name, x))[1])
    heads = ClassifierHeads({"a": 6}, 3, [1e-2], r)
    train_heads(heads, sets, y, r, 4, seed=5, progress=False)
    steps = 3  # 12 images, batch 4
    per_epoch = [seen[e * steps:(e + 1) * steps] for e in range(r.epochs)]
    assert all(batch == [float(d)] for batches, d in zip(per_epoch, view_draws(5, 12, 4)) for batch in batches)
    assert len(set(view_draws(5, 12, 4))) > 1  # the draw moves between sets
    seen.clear()
    train_heads(ClassifierHeads({"a": 6}, 3, [1e-2], r), sets, y, r, 12, seed=5, progress=False,
                draws=[3, 0, 1, 2] * 3)  # explicit draws, one step per epoch
    assert seen == [[float(d)] for d in [3, 0, 1, 2] * 3]


def test_the_draws_are_reproducible_from_the_seed_and_independent_of_the_run_length():
    draws = view_draws(0, 200, 4)
    assert draws == view_draws(0, 200, 4) and len(draws) == 200
    assert set(draws) == {0, 1, 2, 3}  # uniform with replacement over the four sets: each appears
    assert max(np.bincount(draws)) < 80  # ~50 each
    assert view_draws(0, 50, 4) == draws[:50]  # epoch e's draw does not depend on how many epochs follow
    assert view_draws(1, 200, 4) != draws
    assert view_draws(0, 200, 1) == [0] * 200  # one set: the centre crop every epoch


def test_one_view_trains_to_the_bit_as_one_feature_set_and_the_draw_takes_no_other_randomness():
    """A list of one set, and several copies of one set whatever the draws, give the heads and losses of the plain
    set: the draw has a stream of its own, so batch order and heads' init are those of before (views=1)."""
    x, y = data(40, 8)
    r = recipe("epochs=6", "batch_size=16", "warmup_epochs=2", "lrs=[1e-3,1e-2]")

    def trained(inputs, **kw):
        heads = ClassifierHeads({"a": 8}, 3, r.scaled_lrs(16), r, seed=2)
        losses = train_heads(heads, inputs, y, r, 16, seed=2, progress=False, **kw)
        return [h.weight.detach().clone() for h in heads.heads["a"]], losses

    plain_w, plain_losses = trained({"a": x})
    for inputs in ([{"a": x}], [{"a": x}, {"a": x.clone()}, {"a": x.clone()}]):
        w, losses = trained(inputs)
        assert all(torch.equal(a, b) for a, b in zip(w, plain_w)) and losses == plain_losses
    plain = train_and_score({"a": x}, y, {"a": x}, y, 3, r, seed=2)
    listed = train_and_score([{"a": x}], y, {"a": x}, y, 3, r, seed=2)
    assert plain["losses"] == listed["losses"] and plain["a"] == listed["a"] and plain["view_draws"] == [0] * 6


@pytest.mark.parametrize("bad, says", [
    ("views=0", "views must be an integer >= 1, got 0"),
    ("views=-2", "views must be an integer >= 1, got -2"),
    ("views=1.5", "views must be an integer >= 1, got 1.5"),
    ("views=true", "views must be an integer >= 1, got true"),
    ("views=four", "views must be an integer >= 1, got 'four'"),
])
def test_bad_views_are_refused_in_one_sentence_before_anything_is_written(tmp_path, monkeypatch, bad, says):
    register_colours(monkeypatch)
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    with pytest.raises(SystemExit) as err:
        linear.main(["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", *SMALL, bad])
    assert str(err.value) == f"error: {says}"
    assert not (run / "eval").exists()


def test_a_random_view_is_its_images_own_seeded_crop_and_flip():
    image = colour_images("train", 1, size=48).read(0)[0]
    view = RandomView(1, 4, seed=0, crop=32)
    first = view(image, 7)
    assert first.shape == (3, 32, 32)
    view(image, 3)  # another image in between changes nothing: each draw is the image's own
    assert torch.equal(view(image, 7), first)
    assert torch.equal(RandomView(1, 4, seed=0, crop=32)(image, 7), first)
    others = [RandomView(2, 4, 0, 32)(image, 7), RandomView(1, 4, 1, 32)(image, 7), view(image, 8)]
    assert all(not torch.equal(o, first) for o in others)
    assert RandomView(1, 4, 0, 32).key() != RandomView(1, 3, 0, 32).key()  # the view count is part of its key


def test_views_end_to_end_and_a_cache_of_one_view_count_is_never_read_for_another(tmp_path, monkeypatch, capsys):
    register_colours(monkeypatch)
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    common = ["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", "random_floor=false", *SMALL,
              "linear-preset=zhang-in1k", "epochs=8", "warmup_epochs=2"]
    linear.main([*common, "views=3"])
    cache = run / "eval" / "cache"
    names = sorted(p.name.rsplit("-", 1)[0] for p in cache.iterdir())
    assert names == ["global-colours-train", "global-colours-train-view1of3", "global-colours-train-view2of3",
                     "global-colours-val"]
    r = json.loads((run / "eval" / "linear-zhang-in1k-colours.json").read_text())
    assert r["views"] == 3 and r["view_draws"] == view_draws(0, 8, 3) and len(r["timings"]["view_features_s"]) == 3
    assert "RandomResizedCrop" in r["view_augmentation"] and len(r["cache"]["folders"]) == 4
    assert r["groups"]["last_cls"]["top1"] > 100 / 6

    def opened(name):
        folder = next(p for p in cache.iterdir() if p.name.rsplit("-", 1)[0] == name)
        return open_features(folder, json.loads((folder / "meta.json").read_text())["key"])

    centre, v1, v2 = (opened(n) for n in names[:3])
    assert not np.array_equal(centre.cls, v1.cls) and not np.array_equal(v1.cls, v2.cls)  # three sets of features
    np.testing.assert_array_equal(v1.labels, centre.labels)
    capsys.readouterr()
    linear.main([*common, "views=3"])
    assert "(cached)" in capsys.readouterr().out  # the same views: every set read back
    linear.main([*common, "views=2"])
    assert "(cached)" not in capsys.readouterr().out  # 2 views: its random view is extracted anew ...
    names2 = sorted(p.name.rsplit("-", 1)[0] for p in cache.iterdir())
    assert names2 == sorted([*names, "global-colours-train-view1of2"])  # ... into a folder of its own
    folder3 = next(p for p in cache.iterdir() if "view1of3" in p.name)
    key2 = json.loads((next(p for p in cache.iterdir() if "view1of2" in p.name) / "meta.json").read_text())["key"]
    assert open_features(folder3, key2) is None  # view 1 of 3 is refused for the key of view 1 of 2
    linear.main([*common, "views=1"])  # the centre crop alone: the cache of before, no view folder
    assert "(cached)" in capsys.readouterr().out
    assert "view_draws" not in json.loads((run / "eval" / "linear-zhang-in1k-colours.json").read_text())


def test_views_that_left_out_other_images_are_one_sentence():
    def features(valid):
        n = len(valid)
        return GlobalFeatures(np.zeros((n, 1, 2), np.float32), np.zeros((n, 2), np.float32), np.zeros((n, 2), np.float32),
                              np.zeros(n, np.int64), np.array(valid))

    check_views_agree([features([True, True]), features([True, True])], "colours train")
    with pytest.raises(MalformedDatasetError, match="random view 1 of colours train left out 1 other images"):
        check_views_agree([features([True, True]), features([True, False])], "colours train")
