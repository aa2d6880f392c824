"""eval/shared/backbones.py: CKPT items -> backbones, the random floor, clear errors; eval/shared/report.py tables."""
import os
import shutil
import time

import pytest
import torch

from skipless.eval.shared.backbones import BackboneNotFoundError, load_spec, newest_run, resolve_backbones, split_items
from skipless.eval.shared.report import markdown_table
from skipless.models import create_vit, extract_features, save_backbone


def _run(root, name, residual="skip", seed=0):
    torch.manual_seed(seed)
    model = create_vit("vit_tiny", residual=residual, img_size=32, depth=2)
    run = root / name
    save_backbone(run / "backbone.pt", model, extra={"epoch": 1})
    return run, model


def test_split_items_accepts_spaces_commas_and_lists():
    assert split_items(" runs/a  runs/b,random ") == ["runs/a", "runs/b", "random"]
    assert split_items(["runs/a", "random"]) == ["runs/a", "random"]
    assert split_items(None) == [] and split_items("") == []


def test_items_are_split_like_a_shell_line_so_a_path_with_spaces_or_commas_can_be_named(tmp_path):
    assert split_items('"runs/my run" random') == ["runs/my run", "random"]
    assert split_items("runs/my\\ run,'runs/a,b' random") == ["runs/my run", "runs/a,b", "random"]
    assert split_items(["runs/my run", "random"]) == ["runs/my run", "random"]  # a list: each element is one item
    run, _ = _run(tmp_path, "my run, 2")
    assert split_items(str(run)) == [str(run)]  # an existing path (its quotes already taken off by the config)
    specs = resolve_backbones(f'"{run}" random', runs_root=tmp_path)
    assert [s.name for s in specs] == ["my run, 2", "random"] and specs[0].out_dir == run / "eval"


def test_a_ckpt_that_cannot_be_split_and_a_missing_path_are_one_plain_sentence(tmp_path):
    with pytest.raises(BackboneNotFoundError, match="quote an item that holds spaces") as err:
        split_items('"runs/my run random')
    assert "\n" not in str(err.value)
    with pytest.raises(BackboneNotFoundError) as err:
        resolve_backbones(f'"{tmp_path / "no such"}"', runs_root=tmp_path)
    assert str(err.value).startswith(f"no backbone at {tmp_path / 'no such'}; ") and "PosixPath" not in str(err.value)


def test_default_is_the_newest_run_and_loads_its_weights(tmp_path):
    old, _ = _run(tmp_path, "old", seed=1)
    new, model = _run(tmp_path, "new", seed=2)
    past = time.time() - 100
    os.utime(old / "backbone.pt", (past, past))
    assert newest_run(tmp_path) == new
    (spec,) = resolve_backbones(None, runs_root=tmp_path)
    assert spec.name == "new" and spec.out_dir == new / "eval" and not spec.is_random
    loaded = load_spec(spec)
    x = torch.randn(1, 3, 32, 32)
    assert torch.equal(loaded(x), model.eval()(x))
    assert not any(p.requires_grad for p in loaded.parameters())


def test_random_floor_copies_the_architecture_of_the_first_checkpoint(tmp_path):
    run, model = _run(tmp_path, "a", residual="skipless", seed=5)
    specs = resolve_backbones(f"{run} random", runs_root=tmp_path)
    assert [s.name for s in specs] == ["a", "random"]
    floor = specs[1]
    assert floor.args == specs[0].args and floor.out_dir.parent.parent == tmp_path
    rand = load_spec(floor, seed=0)
    assert rand.skipless_args["residual"] == "skipless" and len(rand.blocks) == 2
    # seeded: the same floor twice, and different from the trained weights
    again = load_spec(floor, seed=0)
    x = torch.randn(1, 3, 32, 32)
    assert torch.equal(rand(x), again(x))
    assert not torch.allclose(rand(x), model.eval()(x))


def test_the_newest_run_passes_over_other_families_and_on_request_fine_tunings(tmp_path):
    pretrained, _ = _run(tmp_path, "pretrained", seed=1)
    tuned, _ = _run(tmp_path, "tuned", seed=2)
    swin, _ = _run(tmp_path, "swin", seed=3)
    (tuned / "config.yaml").write_text("finetune:\n  ckpt: runs/pretrained\nmodel:\n  family: vit\n")
    (swin / "config.yaml").write_text("model:\n  family: timm\n  timm_name: swin_small_patch4_window7_224\n")
    for age, run in ((300, pretrained), (200, tuned), (100, swin)):
        os.utime(run / "backbone.pt", (time.time() - age, time.time() - age))
    assert newest_run(tmp_path) == tuned  # the swin run, newer, is no backbone an evaluator reads
    assert newest_run(tmp_path, fine_tunings=False) == pretrained  # make finetune's default


def test_random_alone_uses_the_newest_run(tmp_path):
    _run(tmp_path, "only", residual="skipless")
    (floor,) = resolve_backbones("random", runs_root=tmp_path)
    assert floor.is_random and floor.args["residual"] == "skipless"


def test_backbone_file_item_and_lightning_checkpoint_error(tmp_path):
    run, _ = _run(tmp_path, "r")
    (spec,) = resolve_backbones(str(run / "backbone.pt"), runs_root=tmp_path)
    assert spec.name == "r" and spec.out_dir == run / "eval"
    shutil.copy(run / "backbone.pt", run / "backbone-epoch2.pt")  # an exported epoch: results of its own
    final, epoch2 = resolve_backbones(f"{run} {run / 'backbone-epoch2.pt'}", runs_root=tmp_path)
    assert (epoch2.name, epoch2.out_dir) == ("r-backbone-epoch2", run / "eval" / "backbone-epoch2")
    assert final.out_dir == run / "eval"
    ckpt = run / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"x")
    with pytest.raises(BackboneNotFoundError, match="exported teacher"):
        resolve_backbones(str(ckpt), runs_root=tmp_path)


@pytest.mark.parametrize("ckpt, message", [
    (None, "make pretrain"),
    ("random", "copies the architecture"),
    ("nowhere/run", "expected a run folder"),
])
def test_missing_backbones_give_one_clear_error(tmp_path, ckpt, message):
    with pytest.raises(BackboneNotFoundError, match=message):
        resolve_backbones(ckpt, runs_root=tmp_path)


def test_same_backbone_twice_is_refused(tmp_path):
    run, _ = _run(tmp_path, "r")
    with pytest.raises(BackboneNotFoundError, match="twice"):
        resolve_backbones(f"{run} {run}", runs_root=tmp_path)


def test_random_floor_features_are_usable(tmp_path):
    run, _ = _run(tmp_path, "a")
    floor = resolve_backbones(f"{run},random", runs_root=tmp_path)[1]
    feats = extract_features(load_spec(floor), torch.randn(2, 3, 32, 32), layers="all", kinds=("k",))
    assert sorted(feats) == [("k", 0), ("k", 1)]


def test_markdown_table_formats_and_checks_widths():
    text = markdown_table(["model", "mIoU"], [["skip", 56.34], ["a|b", None]], float_format=".1f")
    assert text.splitlines() == ["| model | mIoU |", "|---|---|", "| skip | 56.3 |", "| a\\|b | - |"]
    with pytest.raises(ValueError, match="do not have 2 cells"):
        markdown_table(["a", "b"], [[1]])


def test_random_floor_of_an_old_backbone_file_keeps_timms_resample(tmp_path):
    run, _ = _run(tmp_path, "old")
    payload = torch.load(run / "backbone.pt", weights_only=True)
    del payload["args"]["pos_embed_interp"]  # written before the argument existed
    torch.save(payload, run / "backbone.pt")
    spec, floor = resolve_backbones(f"{run} random", runs_root=tmp_path)
    assert spec.args["pos_embed_interp"] == "timm" == floor.args["pos_embed_interp"]
    assert load_spec(floor).pos_embed_interp == "timm" and load_spec(spec).pos_embed_interp == "timm"


def test_init_items_build_the_backbone_pretraining_starts_from(tmp_path):
    from skipless.config import load_config
    from skipless.models.from_config import vit_from_config

    specs = resolve_backbones("init:skipless-centered init:skip:vit_tiny", tmp_path)
    assert [s.name for s in specs] == ["init-skipless-centered", "init-skip-vit_tiny"]
    assert [s.out_dir for s in specs] == [tmp_path / "init-skipless-centered" / "eval", tmp_path / "init-skip-vit_tiny" / "eval"]
    assert specs[0].args["arch"] == "vit_small" and specs[0].args["init_args"]["center_mlp"] is True
    model = load_spec(specs[1], seed=3)
    torch.manual_seed(3)
    expected = vit_from_config(load_config("pretrain", ["model=skip", "recipe=paper", "model.arch=vit_tiny"]).model)
    for (name, a), b in zip(model.state_dict().items(), expected.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert not any(p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("item", ["init:nonsense", "init:skip:vit_huge", "init:skip:vit_tiny:x"])
def test_bad_init_items_name_what_is_expected(tmp_path, item):
    with pytest.raises(BackboneNotFoundError, match="expected init:<model> or init:<model>:<arch>"):
        resolve_backbones(item, tmp_path)


def test_load_spec_compiles_the_blocks_only_when_asked(tmp_path):
    (spec,) = resolve_backbones("init:skip:vit_tiny", runs_root=tmp_path)
    eager, compiled = load_spec(spec), load_spec(spec, compile=True)
    assert all(getattr(b, "_compiled_call_impl", None) is None for b in eager.blocks)
    assert all(getattr(b, "_compiled_call_impl", None) is not None for b in compiled.blocks)
    assert not any(p.requires_grad for p in compiled.parameters()) and not compiled.training


def test_the_random_floor_follows_one_trained_backbone_only(tmp_path):
    runs = tmp_path / "runs"
    (a, _), (b, _) = _run(runs, "a", residual="skipless"), _run(runs, "b")
    names = lambda ckpt: [s.name for s in resolve_backbones(ckpt, runs_root=runs, floor=True)]  # noqa: E731
    floor = resolve_backbones(str(a), runs_root=runs, floor=True)[1]
    assert names(str(a)) == ["a", "random"] and floor.args == resolve_backbones(str(a), runs_root=runs)[0].args
    assert floor.kind == "random" and floor.out_dir == runs / "random-vit_tiny-skipless-timm" / "eval"
    assert names(None) == ["b", "random"]  # the newest run, then its floor
    assert names(f"{a} {b}") == ["a", "b"] and names("random") == ["random"] and names(f"{a} random") == ["a", "random"]
    assert names("init:skip") == ["init-skip"]  # a preset at initialisation is its own floor
    assert [s.name for s in resolve_backbones(str(a), runs_root=runs)] == ["a"]  # floor=False: as given
