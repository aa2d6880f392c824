"""make linear: heads learn separable features, train side by side as alone, the best lr is chosen on val,
the knn cache is reused, the entry point end to end, refusals."""
import json

import pytest
import torch

from skipless.eval.knn import run as knn
from skipless.eval.linear import run as linear
from skipless.eval.linear.run import train_and_score
from skipless.eval.linear.heads import ClassifierHeads, best_lr_index, evaluate_heads, train_heads
from skipless.eval.linear.recipe import Recipe
from skipless.eval.linear.schedule import lr_at
from global_fixtures import SMALL, register_colours, tiny_backbone
from host_reads import HostReads
from skipless.config import load_config


def recipe(lrs, epochs: int = 10, batch_size: int = 32, *more: str) -> Recipe:
    """DINO's preset with these lrs taken as they are (lr_batch = batch_size: no scaling)."""
    return Recipe.from_config(load_config("linear", [f"lrs={list(lrs)}", f"epochs={epochs}",
                                                     f"batch_size={batch_size}", f"lr_batch={batch_size}", *more]))


def separable(n_per_class: int, classes: int = 7, dim: int = 24, seed: int = 0):
    """Gaussian clusters far apart: a linear map separates them."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=torch.Generator().manual_seed(99)) * 4
    y = torch.arange(classes).repeat_interleave(n_per_class)
    return centres[y] + torch.randn(len(y), dim, generator=g), y


def test_heads_reach_full_accuracy_on_linearly_separable_features():
    x, y = separable(30)
    xv, yv = separable(10, seed=1)
    out = train_and_score({"a": x, "b": torch.cat([x, x[:, :4]], 1)}, y, {"a": xv, "b": torch.cat([xv, xv[:, :4]], 1)},
                          yv, 7, recipe([1e-3, 1e-2], 30))
    for group in ("a", "b"):
        assert out[group]["top1"] == 100.0 and out[group]["top5"] == 100.0
        assert out[group]["dim"] == (24 if group == "a" else 28)


def test_the_reported_lr_is_the_best_on_val_and_a_useless_lr_is_never_chosen():
    x, y = separable(30)
    xv, yv = separable(10, seed=1)
    out = train_and_score({"a": x}, y, {"a": xv}, yv, 7, recipe([1e-9, 1e-2]))
    sweep = out["a"]["sweep"]
    assert sweep[0]["top1"] < 60 < sweep[1]["top1"]  # 1e-9 barely moves the N(0, 0.01) init
    assert out["a"]["best_lr"] == 1e-2 and out["a"]["top1"] == sweep[1]["top1"] and out["a"]["best_lr_at_edge"]


def test_a_sweep_where_every_lr_ties_is_not_at_its_edge(capsys):
    x, y = separable(30, classes=3)
    xv, yv = separable(10, classes=3, seed=1)
    out = train_and_score({"a": x}, y, {"a": xv}, yv, 3, recipe([1e-3, 1e-2, 1e-1], 30))
    assert [s["top1"] for s in out["a"]["sweep"]] == [100.0] * 3  # all tie: no optimum beyond the sweep
    assert out["a"]["best_lr_at_edge"] is None


def test_best_lr_index_breaks_ties_by_top5_then_by_order():
    assert best_lr_index([{"top1": 50, "top5": 90}, {"top1": 70, "top5": 80}, {"top1": 60, "top5": 99}]) == 1
    assert best_lr_index([{"top1": 70, "top5": 80}, {"top1": 70, "top5": 95}]) == 1
    assert best_lr_index([{"top1": 70, "top5": None}, {"top1": 70, "top5": None}]) == 0


def test_heads_trained_side_by_side_are_the_heads_trained_alone():
    x, y = separable(12)
    both = ClassifierHeads({"a": 24}, 7, [1e-3, 1e-1], recipe([1e-3, 1e-1], 3, 16), seed=3)
    alone = ClassifierHeads({"a": 24}, 7, [1e-1], recipe([1e-1], 3, 16), seed=3)
    assert torch.equal(both.heads["a"][1].weight, alone.heads["a"][0].weight)  # the init depends on the lr only
    train_heads(both, {"a": x}, y, recipe([1e-3, 1e-1], 3, 16), 16, progress=False)
    train_heads(alone, {"a": x}, y, recipe([1e-1], 3, 16), 16, progress=False)
    assert torch.allclose(both.heads["a"][1].weight, alone.heads["a"][0].weight, atol=1e-6)
    assert not torch.allclose(both.heads["a"][0].weight, both.heads["a"][1].weight)


def test_scores_are_each_heads_own_top1_and_top5_read_back_once_per_group():
    x, y = separable(6)
    heads = ClassifierHeads({"a": 24, "b": 12}, 7, [1e-3, 1e-1], recipe([1e-3, 1e-1]), seed=1)
    inputs = {"a": x, "b": x[:, :12]}
    with HostReads() as reads:
        scores = evaluate_heads(heads, inputs, y, batch_size=5)  # 9 batches of 42 images
    assert [name for _, name, _ in reads.calls] == ["tolist", "tolist"]
    for (group, j), got in scores.items():
        with torch.no_grad():
            best = heads.heads[group][j](inputs[group]).topk(5, dim=1).indices
        assert got["top1"] == pytest.approx(100 * (best[:, 0] == y).float().mean().item())
        assert got["top5"] == pytest.approx(100 * (best == y[:, None]).any(1).float().mean().item())
    assert len({round(v["top1"], 3) for v in scores.values()}) > 1  # the heads differ


def test_the_cosine_follows_cosine_annealing_per_epoch():
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 5, eta_min=0)
    for epoch in range(5):
        assert lr_at(0.4, epoch, 5) == pytest.approx(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()


def test_make_linear_end_to_end_reuses_the_knn_cache_and_writes_json_and_table(tmp_path, monkeypatch, capsys):
    register_colours(monkeypatch)
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    common = ["dataset=colours", f"ckpt={run} random", f"runs_root={tmp_path / 'runs'}", *SMALL]
    knn.main([*common, "ks=[3]", "report_k=3"])
    capsys.readouterr()
    linear.main([*common, "epochs=15", "batch_size=8", "lrs=[0.01,0.1,1.0]"])
    out = capsys.readouterr().out
    assert out.count("(cached)") == 2  # both backbones: features from make knn's cache, no backbone pass
    result = json.loads((run / "eval" / "linear-colours.json").read_text())
    assert result["lr_scale"] == 8 / 256 and result["timings"]["cache_reused"]
    for group, dim in (("cls", 2 * 192), ("cls+avgpool", 3 * 192)):
        r = result["groups"][group]
        assert r["dim"] == dim and len(r["sweep"]) == 3
        assert r["top1"] == max(s["top1"] for s in r["sweep"]) and r["top1"] > 50
        assert r["best_lr"] in [s["lr"] for s in r["sweep"]]
    table = (tmp_path / "runs" / "compare" / "linear-colours.md").read_text()
    assert "| tiny |" in table and "| random |" in table and "cls+avgpool top-1" in table
    assert table.split("\n\n", 1)[1] in out
    # TensorBoard beside the probe's and TokenCut's, one folder per evaluation in each backbone's eval/tb
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    knn_result = json.loads((run / "eval" / "knn-colours.json").read_text())
    for backbone in (run, tmp_path / "runs" / "random-vit_tiny-skipless-timm"):
        knn_events = EventAccumulator(str(backbone / "eval" / "tb" / "knn-colours")).Reload()
        assert [(e.step, e.value) for e in knn_events.Scalars("knn-colours/top1_per_k")][0][0] == 3
        # the sweep: one sub-run per lr, its tags without the lr, so each quantity is one chart of every lr
        folder = backbone / "eval" / "tb" / "linear-colours"
        assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [f"lr={lr:g}" for lr in (0.01, 0.1, 1)]
        for lr in ("0.01", "1"):
            tags = set(EventAccumulator(str(folder / f"lr={lr}")).Reload().Tags()["scalars"])
            assert tags == {f"linear-colours/{g}/{t}" for g in ("cls", "cls+avgpool") for t in ("val_top1", "head_loss")}
        sweep = EventAccumulator(str(folder / "lr=0.1")).Reload()
        assert [e.step for e in sweep.Scalars("linear-colours/cls/head_loss")] == list(range(1, 16))
        assert set(EventAccumulator(str(folder)).Reload().Tags()["scalars"]) == {
            f"linear-colours/{g}/val_top1" for g in ("cls", "cls+avgpool")}  # the best lr's, on the same chart
    (best,) = EventAccumulator(str(run / "eval" / "tb" / "linear-colours")).Reload().Scalars("linear-colours/cls/val_top1")
    assert best.step == 15 and best.value == pytest.approx(result["groups"]["cls"]["top1"])
    (top1,) = EventAccumulator(str(run / "eval" / "tb" / "knn-colours")).Reload().Scalars("knn-colours/top1")
    assert top1.value == pytest.approx(knn_result["top1"])


@pytest.mark.parametrize("bad, says", [
    (["dataset=nope"], "unknown classification dataset 'nope'"),
    (["lrs=[]"], "lrs must be a non-empty list of finite numbers > 0"),
    (["lrs=[0.1,-1]"], "lrs must be a non-empty list of finite numbers > 0"),
    (["epochs=0"], "epochs must be an integer >= 1, got 0"),
    (["features.n_last_blocks=3"], "features.n_last_blocks must be at most the depth of tiny (2 blocks), got 3"),
])
def test_bad_values_are_refused_in_one_sentence_before_anything_is_written(tmp_path, monkeypatch, bad, says):
    register_colours(monkeypatch)
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    with pytest.raises(SystemExit) as err:
        linear.main(["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", *SMALL, *bad])
    assert says in str(err.value) and str(err.value).startswith("error: ")
    assert not (run / "eval").exists()
