"""make linear PRESET=dino|zhang|zhang-in1k|mae: each preset's values, MAE's BatchNorm head, the lr scaling and the
warm-up + cosine by hand, the batch of a small split, each preset end to end, refusals."""
import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from skipless.eval.linear import heads as heads_module
from skipless.eval.linear import run as linear
from skipless.eval.linear.heads import ClassifierHeads, train_heads
from skipless.eval.linear.recipe import Recipe
from skipless.eval.linear.run import train_and_score
from skipless.eval.linear.schedule import lr_at
from global_fixtures import SMALL, register_colours, tiny_backbone
from skipless.config import CONFIG_DIR, ConfigError, leaf_values, load_config

ROOT = Path(__file__).resolve().parents[1]
PROBE_KEYS = {"inputs", "lrs", "lr_batch", "epochs", "warmup_epochs", "lr_update", "batch_size", "drop_last", "views",
              "head.norm", "head.norm_eps", "head.init", "head.init_std", "optimizer.name", "optimizer.momentum",
              "optimizer.weight_decay", "optimizer.trust_coefficient", "optimizer.betas"}


def preset(name: str, *overrides: str) -> Recipe:
    return Recipe.from_config(load_config("linear", [f"linear-preset={name}", *overrides]))


def probe_values(name: str) -> dict:
    flat = leaf_values(load_config("linear", [f"linear-preset={name}"]))
    return {k: v for k, v in flat.items() if k in PROBE_KEYS}


def test_each_preset_resolves_to_its_papers_values():
    dino = {"inputs": ["cls", "cls+avgpool"], "lrs": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1, 3e-1, 1.0],
            "lr_batch": 256, "epochs": 100, "warmup_epochs": 0, "lr_update": "epoch", "batch_size": 256,
            "drop_last": False, "views": 1, "head.norm": "none", "head.norm_eps": 1e-6, "head.init": "normal",
            "head.init_std": 0.01, "optimizer.name": "sgd", "optimizer.momentum": 0.9,
            "optimizer.weight_decay": 0.0, "optimizer.trust_coefficient": 0.001, "optimizer.betas": [0.9, 0.999]}
    assert probe_values("dino") == dino
    assert load_config("linear").choices["linear-preset"] == "dino"  # the default
    zhang = {**dino, "inputs": ["last_cls"], "lrs": [1e-2], "lr_batch": 1024, "epochs": 200, "batch_size": 1024,
             "lr_update": "step", "optimizer.name": "adamw", "optimizer.weight_decay": 0.01}
    assert probe_values("zhang") == zhang
    # seed 002's ImageNet-1k probe: its ImageNet-100 one with a warm-up, batch 5120 and 3 random views + the centre crop
    assert probe_values("zhang-in1k") == {**zhang, "lr_batch": 5120, "batch_size": 5120, "warmup_epochs": 20, "views": 4}
    mae = {**dino, "inputs": ["last_cls"], "lrs": [0.1], "epochs": 90, "warmup_epochs": 10, "lr_update": "step",
           "batch_size": 16384, "drop_last": True, "head.norm": "batchnorm", "head.init": "trunc_normal",
           "optimizer.name": "lars"}
    assert probe_values("mae") == mae
    # the features are the same block for every preset: one cache (last_cls is sliced from it)
    feats = {p: OmegaConf.to_container(load_config("linear", [f"linear-preset={p}"]).features)
             for p in ("dino", "zhang", "zhang-in1k", "mae")}
    assert feats["dino"] == feats["zhang"] == feats["zhang-in1k"] == feats["mae"]


def test_a_preset_states_only_probe_keys_and_only_what_it_changes():
    base = leaf_values(OmegaConf.load(CONFIG_DIR / "linear.yaml"))
    for path in sorted((CONFIG_DIR / "linear-preset").glob("*.yaml")):
        keys = leaf_values(OmegaConf.load(path))
        assert set(keys) <= PROBE_KEYS, (path.name, sorted(set(keys) - PROBE_KEYS))
        restated = {k: v for k, v in keys.items() if base.get(k) == v}
        assert not restated, f"{path.name} restates {restated}"
    assert leaf_values(OmegaConf.load(CONFIG_DIR / "linear-preset" / "dino.yaml")) == {}


def test_a_bad_preset_name_is_one_sentence_listing_the_valid_ones(capsys):
    with pytest.raises(SystemExit) as err:
        linear.main(["linear-preset=moco"])
    message = str(err.value)
    assert message == "error: unknown linear-preset 'moco'; expected one of: dino, mae, zhang, zhang-in1k"


@pytest.mark.parametrize("bad, says", [
    (["warmup_epochs=100"], "warmup_epochs (100) must be less than epochs (100)"),
    (["inputs=[cls,cls]"], "inputs must be a non-empty list of distinct names among cls, cls+avgpool, last_cls"),
    (["optimizer.name=adam"], "optimizer.name must be one of sgd, adamw, lars, got 'adam'"),
    (["head.norm=layernorm"], "head.norm must be one of none, batchnorm, got 'layernorm'"),
    (["optimizer.momentum=1.0"], "optimizer.momentum must be a number in [0, 1), got 1.0"),
    (["lr_update=iteration"], "lr_update must be one of epoch, step, got 'iteration'"),
])
def test_bad_probe_values_are_refused_in_one_sentence_before_anything_is_written(tmp_path, monkeypatch, bad, says):
    register_colours(monkeypatch)
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    with pytest.raises(SystemExit) as err:
        linear.main(["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", *SMALL, *bad])
    assert says in str(err.value) and str(err.value).startswith("error: ")
    assert not (run / "eval").exists()


def test_the_mae_head_is_a_batchnorm_without_affine_then_a_trunc_normal_linear_layer():
    recipe = preset("mae")
    heads = ClassifierHeads({"a": 64}, 5, [0.1, 1.0], recipe, seed=0)
    norm = heads.norms["a"]
    assert isinstance(norm, torch.nn.BatchNorm1d) and not norm.affine and norm.eps == 1e-6
    assert not list(norm.parameters())  # nothing for the optimizer but the heads' weights and biases
    params = [p for g in heads.param_groups() for p in g["params"]]
    assert sorted(tuple(p.shape) for p in params) == [(5,), (5,), (5, 64), (5, 64)]
    w = heads.heads["a"][0].weight
    assert w.std().item() == pytest.approx(0.01, rel=0.15) and w.abs().max().item() < 2.0
    assert not heads.heads["a"][0].bias.any()
    x = torch.randn(32, 64) * 5 + 3
    heads.train()
    logits = heads.group_logits("a", x)
    normed = (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + 1e-6)  # the batch's own statistics
    torch.testing.assert_close(logits[:, 1], normed @ heads.heads["a"][1].weight.T + heads.heads["a"][1].bias)
    heads.eval()  # at evaluation, the running statistics: momentum 0.1 from (0, 1)
    mean, var = 0.1 * x.mean(0), 0.9 + 0.1 * x.var(0, unbiased=True)
    w0, b0 = heads.heads["a"][0].weight, heads.heads["a"][0].bias
    torch.testing.assert_close(heads.group_logits("a", x)[:, 0], ((x - mean) / torch.sqrt(var + 1e-6)) @ w0.T + b0)
    # DINO's and zhang's heads read the features as they are
    assert isinstance(ClassifierHeads({"a": 64}, 5, [0.1], preset("zhang")).norms["a"], torch.nn.Identity)


def test_the_lr_scaling_and_warm_up_then_cosine_by_hand():
    mae = preset("mae")
    assert mae.scaled_lrs(mae.batch_for(10**6)) == [pytest.approx(6.4)]  # 0.1 x 16384 / 256
    assert mae.batch_for(2000) == 2000 and mae.scaled_lrs(2000) == [pytest.approx(0.1 * 2000 / 256)]
    zhang = preset("zhang")
    assert zhang.scaled_lrs(zhang.batch_for(10**6)) == [pytest.approx(1e-2)]  # 1e-2 at its batch of 1024
    # MAE's schedule at base 6.4: linear warm-up over 10 epochs, then a cosine over the other 80
    for t, want in ((0, 0.0), (2.5, 1.6), (5, 3.2), (10, 6.4), (30, 3.2 * (1 + math.sqrt(0.5))), (50, 3.2),
                    (70, 3.2 * (1 - math.sqrt(0.5))), (90, 0.0)):
        assert lr_at(6.4, t, 90, 10) == pytest.approx(want, abs=1e-12)


def test_the_lr_moves_every_step_with_a_fractional_epoch_and_drop_last_counts_the_steps(monkeypatch):
    """10 images, batch 4, drop_last: 2 steps per epoch at t = 0, 0.5, 1, 1.5, 2, 2.5 of 3 epochs, 1 of warm-up."""
    recipe = preset("mae", "epochs=3", "warmup_epochs=1", "batch_size=4", "lrs=[0.256]")  # 0.256 x 4 / 256
    seen = []
    build = heads_module.build_optimizer

    def spy(recipe, groups):
        opt = build(recipe, groups)
        step = opt.step
        opt.step = lambda: (seen.append(opt.param_groups[0]["lr"]), step())[1]
        return opt

    monkeypatch.setattr(heads_module, "build_optimizer", spy)
    x, y = torch.randn(10, 6), torch.arange(10) % 3
    heads = ClassifierHeads({"a": 6}, 3, recipe.scaled_lrs(4), recipe)
    train_heads(heads, {"a": x}, y, recipe, 4, progress=False)
    base = 0.004
    want = [0.0, base / 2, base, base / 2 * (1 + math.cos(math.pi / 4)), base / 2, base / 2 * (1 + math.cos(3 * math.pi / 4))]
    assert seen == pytest.approx(want)
    seen.clear()
    dino = preset("dino", "epochs=3", "batch_size=4", "lrs=[0.256]")  # per epoch, last batch kept: 3 steps each
    train_heads(ClassifierHeads({"a": 6}, 3, [0.004], dino), {"a": x}, y, dino, 4, progress=False)
    assert seen == pytest.approx([0.004] * 3 + [0.004 * 0.75] * 3 + [0.004 * 0.25] * 3)


def test_mae_heads_trained_side_by_side_are_the_heads_trained_alone():
    """LARS, the BatchNorm and the sweep: each head's trust ratio is its own, the BatchNorm has no parameter."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 16, generator=g) * 3, torch.arange(40) % 4
    recipe = preset("mae", "epochs=4", "warmup_epochs=1", "batch_size=16")
    both = ClassifierHeads({"a": 16}, 4, [0.05, 2.0], recipe, seed=3)
    alone = ClassifierHeads({"a": 16}, 4, [2.0], recipe, seed=3)
    train_heads(both, {"a": x}, y, recipe, 16, progress=False)
    train_heads(alone, {"a": x}, y, recipe, 16, progress=False)
    torch.testing.assert_close(both.heads["a"][1].weight, alone.heads["a"][0].weight, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(both.norms["a"].running_mean, alone.norms["a"].running_mean)


def test_a_batchnorm_batch_of_one_is_refused_in_one_sentence():
    x, y = torch.randn(9, 6), torch.arange(9) % 3
    with pytest.raises(ConfigError, match="the last batch of 9 training images at batch_size 4 holds 1; set "
                                          "drop_last=true"):
        train_and_score({"a": x}, y, {"a": x}, y, 3, preset("mae", "batch_size=4", "drop_last=false"))


def test_each_preset_end_to_end_on_one_cache_and_a_batch_larger_than_the_split(tmp_path, monkeypatch, capsys):
    register_colours(monkeypatch)
    run = tiny_backbone(tmp_path / "runs" / "tiny")
    common = ["dataset=colours", f"ckpt={run}", f"runs_root={tmp_path / 'runs'}", "random_floor=false", *SMALL]
    for name in ("dino", "zhang", "mae"):
        linear.main([*common, f"linear-preset={name}"])
    out = capsys.readouterr().out
    assert out.count("(cached)") == 2  # zhang and mae read the cache dino's run wrote: one backbone pass
    results = {n: json.loads((run / "eval" / f"{s}.json").read_text())
               for n, s in (("dino", "linear-colours"), ("zhang", "linear-zhang-colours"), ("mae", "linear-mae-colours"))}
    assert set(results["dino"]["groups"]) == {"cls", "cls+avgpool"}
    for name in ("zhang", "mae"):
        r = results[name]
        assert r["preset"] == name and set(r["groups"]) == {"last_cls"} and r["groups"]["last_cls"]["dim"] == 192
        assert r["train_images"] == 24 and r["batch_size"] == 24  # 6 classes x 4: the batch is the split
        assert r["groups"]["last_cls"]["top1"] > 100 / 6  # above chance on separable colours
        assert (run / "eval" / "tb" / f"linear-{name}-colours").is_dir()
    assert results["mae"]["batch_size_configured"] == 16384 and results["mae"]["lr_scale"] == 24 / 256
    assert results["zhang"]["lr_scale"] == 24 / 1024 and results["zhang"]["optimizer"]["name"] == "adamw"
    assert results["mae"]["head"] == {"norm": "batchnorm", "norm_eps": 1e-6, "init": "trunc_normal", "init_std": 0.01}
    assert "batch_size 16384 is more than the 24 training images: one batch of 24 per epoch" in out
    # last_cls is the last of DINO's CLS tokens: the same numbers, sliced
    from skipless.eval.shared.global_features import open_features
    cache = [p for p in (run / "eval" / "cache").iterdir() if "-train-" in p.name]
    assert len(cache) == 1
    f = open_features(cache[0], json.loads((cache[0] / "meta.json").read_text())["key"])
    torch.testing.assert_close(f.last_cls(), f.cls_concat()[:, -192:])


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_linear_passes_preset_only_when_set_and_help_lists_the_presets():
    def line(*args):
        out = subprocess.run(["make", "-n", "-s", "STAMP=", "PY=python", "linear", *args], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        return " ".join(out.split())

    assert line() == "python -m skipless.eval.linear"
    assert line("PRESET=mae", "DATASET=default") == "python -m skipless.eval.linear linear-preset=mae dataset=default"
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "PRESET=dino|mae|zhang|zhang-in1k" in out
