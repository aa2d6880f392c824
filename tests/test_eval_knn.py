"""make knn: the weighted vote against numpy, the shared feature cache, the entry point end to end, refusals."""
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from skipless.eval.shared.global_features import build_global_features, global_tokens
from skipless.eval.knn.run import knn_scores, main
from global_fixtures import SMALL, colour_images, register_colours, tiny_backbone
from host_reads import HostReads
from skipless.data.classification.registry import LabelledImages
from skipless.models import create_vit

ROOT = Path(__file__).resolve().parents[1]


def numpy_knn(train, train_y, test, test_y, k, t, classes):
    """DINO's vote written out plainly: cosine similarity, k nearest, exp(sim/T) weights per class."""
    tr = train / np.linalg.norm(train, axis=1, keepdims=True)
    te = test / np.linalg.norm(test, axis=1, keepdims=True)
    top1 = top5 = 0
    for i in range(len(te)):
        sims = tr @ te[i]
        nearest = np.argsort(-sims)[:k]
        votes = np.zeros(classes)
        for j in nearest:
            votes[train_y[j]] += np.exp(sims[j] / t)
        top1 += int(np.argmax(votes) == test_y[i])
        mine = votes[test_y[i]]
        top5 += int(mine > 0 and (votes > mine).sum() < 5)
    return 100 * top1 / len(te), 100 * top5 / len(te)


def test_knn_scores_match_numpy_for_several_k_at_once():
    rng = np.random.default_rng(0)
    classes = 8
    centres = rng.normal(size=(classes, 16))
    train_y, test_y = rng.integers(0, classes, 200), rng.integers(0, classes, 60)
    train = centres[train_y] + 1.2 * rng.normal(size=(200, 16))
    test = centres[test_y] + 1.2 * rng.normal(size=(60, 16))
    ks = [1, 5, 20, 50]
    tensors = [torch.tensor(a) for a in (train, train_y, test, test_y)]
    with HostReads() as reads:
        got = knn_scores(*tensors, ks, temperature=0.1, num_classes=classes, chunk=7)
    assert sorted(got) == ks
    assert len(reads.calls) == len(ks)  # the counts are read back once per k, not per chunk of 7
    for k in ks:
        top1, top5 = numpy_knn(train, train_y, test, test_y, k, 0.1, classes)
        assert got[k]["top1"] == pytest.approx(top1) and got[k]["top5"] == pytest.approx(top5), k
    assert len({round(got[k]["top1"], 3) for k in ks}) > 1  # the ks are not all the same vote
    assert got[1]["top5"] == got[1]["top1"]  # one neighbour gives one class a vote: top-5 is top-1


def test_global_tokens_are_the_normed_cls_of_the_last_blocks_and_the_mean_normed_patch():
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="skipless", depth=3, img_size=32).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        cls, avg, pooled = global_tokens(model, x, 2)
        h = model.norm_pre(model.patch_drop(model._pos_embed(model.patch_embed(x))))
        outs = []
        for blk in model.blocks:
            h = blk(h)
            outs.append(model.norm(h))
    assert torch.allclose(cls[:, 0], outs[1][:, 0], atol=1e-5) and torch.allclose(cls[:, 1], outs[2][:, 0], atol=1e-5)
    assert torch.allclose(avg, outs[2][:, 1:].mean(1), atol=1e-5)
    with torch.no_grad():  # the deepest is what the backbone's own forward gives as its CLS feature
        assert torch.allclose(cls[:, 1], model.forward_features(x)[:, 0], atol=1e-5)
        assert torch.allclose(pooled, model(x), atol=1e-5) and torch.allclose(pooled, cls[:, 1], atol=1e-5)


def test_the_knn_feature_of_a_mean_token_backbone_is_its_own_pooled_feature():
    """A backbone trained on its mean patch token (global_pool=avg, the CPU demo's DINO) is scored on
    that feature, the final norm of the mean token (timm's fc_norm), not on its untrained CLS token."""
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="skip", depth=2, img_size=32, global_pool="avg").eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        cls, avg, pooled = global_tokens(model, x, 1)
        torch.testing.assert_close(pooled, model(x), atol=1e-5, rtol=0)
        tokens = model.blocks(model.norm_pre(model._pos_embed(model.patch_embed(x))))
        torch.testing.assert_close(pooled, model.fc_norm(tokens[:, 1:].mean(1)), atol=1e-5, rtol=0)
    assert not torch.allclose(pooled, cls[:, -1], atol=1e-2)


class Counting(torch.nn.Module):
    """Counts the images the patch embedding sees (i.e. backbone passes)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.images = inner, 0

    def forward(self, x):
        self.images += x.shape[0]
        return self.inner(x)


def test_the_cache_is_reused_with_the_same_key_and_rebuilt_when_it_changes(tmp_path):
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="skipless", depth=2, img_size=32).eval()
    model.patch_embed.proj = counter = Counting(model.patch_embed.proj)
    data = colour_images("val", 2)
    kw = dict(n_last=2, resize=32, crop=32, folder=tmp_path / "c", key={"backbone": "x"}, progress=False)
    first = build_global_features(model, data, **kw)
    assert counter.images == len(data) and not first.reused
    again = build_global_features(model, data, **kw)
    assert counter.images == len(data) and again.reused  # the backbone was not called
    assert np.array_equal(again.cls, first.cls) and np.array_equal(again.labels, data.labels)
    build_global_features(model, data, **{**kw, "crop": 16})  # another size: another content
    assert counter.images == 2 * len(data)
    build_global_features(model, data, **{**kw, "key": {"backbone": "y"}})  # another backbone file
    assert counter.images == 3 * len(data)


def test_unreadable_images_are_left_out_and_counted(tmp_path, capsys):
    good = colour_images("train", 1)
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"not a jpeg")
    data = LabelledImages("mixed", [good.items[0], bad, good.items[1]], [0, 1, 1], good.class_names)
    model = create_vit("vit_tiny", residual="skipless", depth=1, img_size=32).eval()
    feats = build_global_features(model, data, n_last=1, resize=32, crop=32, progress=False)
    assert feats.valid.tolist() == [True, False, True] and feats.n_valid == 2
    assert len(feats.skipped) == 1 and "broken.jpg" in feats.skipped[0]
    assert feats.knn().shape == (2, 192) and feats.valid_labels().tolist() == [0, 1]
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: 1 unreadable images of mixed left out (of 3)")


def test_make_knn_end_to_end_writes_json_and_table(tmp_path, monkeypatch, capsys):
    register_colours(monkeypatch)
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    args = ["dataset=colours", f"ckpt={run} random", f"runs_root={tmp_path / 'runs'}", "ks=[1,3,100]", "report_k=3",
            *SMALL]
    main(args)
    out = capsys.readouterr().out
    result = json.loads((run / "eval" / "knn-colours.json").read_text())
    assert result["report_k"] == 3 and set(result["k"]) == {"1", "3", "100"}
    assert result["top1"] == result["k"]["3"]["top1"] and result["k_above_train_images"] == [100]
    assert result["train_images"] == 24 and result["val_images"] == 12 and result["model"]["cls_blocks"] == [0, 1]
    assert result["top1"] > 50  # colours are easy: far above the 1-in-6 chance
    table = (tmp_path / "runs" / "compare" / "knn-colours.md").read_text()
    assert "| tiny |" in table and "| random |" in table and "top-1 k=100" in table
    assert table.split("\n\n", 1)[1] in out  # the same table printed
    main(args)  # again: features from the cache
    assert "(cached)" in capsys.readouterr().out


def test_a_subset_of_the_default_dataset(tmp_path, capsys):
    if not (ROOT / "data" / "default" / "VOCdevkit").exists():
        pytest.skip("needs the generated default dataset (make data)")
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    main(["dataset=default", f"root={ROOT / 'data' / 'default'}", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}",
          "train_subset=20", "val_subset=10", "ks=[5]", "report_k=5", *SMALL])
    result = json.loads((run / "eval" / "knn-default.json").read_text())
    assert result["train_images"] == 20 and result["val_images"] == 10 and result["num_classes"] == 10


@pytest.mark.parametrize("bad, says", [
    (["dataset=nope"], "unknown classification dataset 'nope'"),
    (["ks=[0,20]"], "ks must be a non-empty list of integers >= 1"),
    (["ks=[]"], "ks must be a non-empty list of integers >= 1"),
    (["report_k=7"], "report_k must be one of ks"),
    (["temperature=0"], "temperature must be a finite number > 0"),
    (["features.crop=300"], "features.crop (300) must be at most features.resize"),
])
def test_bad_values_are_refused_in_one_sentence_before_anything_is_written(tmp_path, monkeypatch, bad, says):
    register_colours(monkeypatch)
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    with pytest.raises(SystemExit) as err:
        main(["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", *SMALL, *bad])
    assert says in str(err.value) and str(err.value).startswith("error: ")
    assert not (run / "eval").exists()


def test_a_crop_off_the_patch_grid_is_refused_before_features_are_computed(tmp_path, monkeypatch):
    register_colours(monkeypatch)
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    with pytest.raises(SystemExit, match="features.crop 30 is not a multiple of tiny's patch size 16; use 32"):
        main(["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", *SMALL, "features.crop=30"])
    assert not (run / "eval").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("target", ["knn", "linear"])
def test_make_passes_only_what_is_set(target):
    def line(*args):
        out = subprocess.run(["make", "-n", "-s", "STAMP=", "PY=python", target, *args], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        return " ".join(out.split())

    assert line() == f"python -m skipless.eval.{target}"
    assert line("CKPT=runs/a random", "DATASET=default", "OUT=/tmp/o", "ARGS=seed=1") == \
        f"python -m skipless.eval.{target} dataset=default 'ckpt='\\''runs/a random'\\''' 'out='\\''/tmp/o'\\''' seed=1"
