"""make tsne: the seeded choice of classes and images, the outputs end to end (points, classes, figures,
TensorBoard), the knn cache reused, refusals."""
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from skipless.eval.knn import run as knn
from skipless.eval.tsne import run as tsne
from skipless.eval.tsne.points import choose_points
from global_fixtures import SMALL, register_colours, tiny_backbone

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["perplexity=5", "max_iter=300"]


def test_the_classes_are_drawn_with_the_seed_and_respect_the_count():
    labels = np.repeat(np.arange(100), 7)
    classes, idx = choose_points(labels, 10, None, seed=0)
    assert len(classes) == 10 == len(set(classes)) and classes == sorted(classes)
    assert sorted(set(labels[idx].tolist())) == classes and len(idx) == 70  # every image of each chosen class
    assert choose_points(labels, 10, None, seed=0)[0] == classes  # seeded
    assert choose_points(labels, 10, None, seed=1)[0] != classes
    few, idx = choose_points(np.array([2, 0, 2, 1, 0]), 10, None, seed=0)  # fewer classes than asked: all
    assert few == [0, 1, 2] and idx.tolist() == [0, 1, 2, 3, 4]
    classes, idx = choose_points(labels, 3, 4, seed=5)  # at most 4 images of each, seeded too
    assert [int((labels[idx] == c).sum()) for c in classes] == [4, 4, 4]
    assert choose_points(labels, 3, 4, seed=5)[1].tolist() == idx.tolist()
    assert choose_points(np.array([0, -1, 1]), 5, None, seed=0)[1].tolist() == [0, 2]  # unlabelled (-1) left out


def test_make_tsne_end_to_end_one_png_json_and_tensorboard_per_backbone_and_side_by_side(tmp_path, monkeypatch, capsys):
    register_colours(monkeypatch, {"train": 4, "val": 5})
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    tsne.main(["dataset=colours", f"ckpt={run} random", f"runs_root={tmp_path / 'runs'}", *SMALL, *QUICK,
               "num_classes=4"])
    out = capsys.readouterr().out
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    chosen = None
    for backbone in (run, tmp_path / "runs" / "random-vit_tiny-skipless-timm"):
        r = json.loads((backbone / "eval" / "tsne-colours.json").read_text())
        assert r["num_points"] == len(r["points"]) == 20  # 4 classes x 5 val images
        assert len(r["classes"]) == 4 and all(c["points"] == 5 for c in r["classes"])
        assert {p["label"] for p in r["points"]} == {c["label"] for c in r["classes"]}
        assert all(np.isfinite([p["x"], p["y"]]).all() and p["image"].startswith("colours val #") for p in r["points"])
        assert r["settings"]["perplexity"] == 5 and r["feature"] == "cls" and r["split"] == "val"
        chosen = chosen or [c["label"] for c in r["classes"]]
        assert [c["label"] for c in r["classes"]] == chosen  # the same classes for every backbone
        assert (backbone / "eval" / "tsne-colours.png").stat().st_size > 0
        events = EventAccumulator(str(backbone / "eval" / "tb" / "tsne-colours")).Reload()
        assert events.Tags()["images"] == ["tsne-colours"]
    assert (tmp_path / "runs" / "compare" / "tsne-colours.png").stat().st_size > 0
    assert EventAccumulator(str(tmp_path / "runs" / "compare" / "tb" / "tsne-colours")).Reload().Tags()["images"]
    assert "20 images of 4 classes" in out and "side by side:" in out
    assert choose_points(np.repeat(np.arange(6), 5), 4, None, 0)[0] == chosen


def test_make_tsne_slices_the_cache_make_knn_left_and_a_small_dataset_shows_all_its_classes(tmp_path, monkeypatch, capsys):
    register_colours(monkeypatch, {"train": 4, "val": 5})
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    common = ["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", "random_floor=false", *SMALL]
    knn.main([*common, "ks=[3]", "report_k=3"])
    tsne.main([*common, *QUICK])  # num_classes 10 > the 6 colours: all of them
    r = json.loads((run / "eval" / "tsne-colours.json").read_text())
    assert r["timings"]["cache_reused"] and len(r["classes"]) == 6 and r["num_points"] == 30
    assert "-val-" in r["cache"]  # the whole split's cache of make knn, not one of its own
    assert "(cached)" in capsys.readouterr().out
    assert not (tmp_path / "runs" / "compare").exists()  # one backbone: no side by side


@pytest.mark.parametrize("bad, says", [
    (["perplexity=30"], "perplexity must be less than the number of points shown (12 images of the val split), got 30"),
    (["num_classes=0"], "num_classes must be an integer >= 1, got 0"),
    (["max_per_class=0"], "max_per_class must be null or an integer >= 1, got 0"),
    (["max_iter=250"], "max_iter must be an integer > 250"),
    (["split=test"], "split must be one of val, train, got 'test'"),
    (["feature=patch"], "feature must be one of cls, pooled, got 'patch'"),
    (["learning_rate=-1"], "learning_rate must be auto or a number > 0, got -1"),
    (["dataset=nope"], "unknown classification dataset 'nope'"),
])
def test_bad_settings_are_refused_in_one_sentence_before_anything_is_written(tmp_path, monkeypatch, bad, says):
    register_colours(monkeypatch)  # 2 val images of each of 6 colours: 12 points
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    with pytest.raises(SystemExit) as err:
        tsne.main(["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", *SMALL, *bad])
    assert says in str(err.value) and str(err.value).startswith("error: ") and "\n" not in str(err.value)
    assert not (run / "eval").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_tsne_passes_only_what_is_set_and_is_listed_in_help():
    def line(*args):
        out = subprocess.run(["make", "-n", "-s", "STAMP=", "PY=python", "tsne", *args], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return " ".join(out.split())

    assert line() == "python -m skipless.eval.tsne"
    assert line("DATASET=default", "ARGS=num_classes=5") == "python -m skipless.eval.tsne dataset=default num_classes=5"
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "make tsne" in out
