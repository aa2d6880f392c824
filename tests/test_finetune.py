"""make finetune (skipless/finetune.py): a CKPT's backbone loaded into the classifier, its architecture
owned by the checkpoint, MAE's layer-wise lr decay, the random floor, resume, released weights."""
import re
from pathlib import Path

import pytest
import torch
from test_train_run import Recorder, StopAfterEpoch

from skipless.config import ConfigError, load_saved_config
from skipless.finetune import finetune_config, main, run_dir_of, starting_backbone
from skipless.models import create_vit, load_backbone, save_backbone
from skipless.optim.param_groups import layer_decay_groups
from skipless.supervised.classifier import Supervised
from skipless.train import check_config, run_training

TINY = ["aug.image_size=32", "data.n_train=16", "data.n_val=8", "train.batch_size_per_device=4",
        "train.num_workers=0", "train.log_every_n_steps=1", "train.precision=32-true"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A skipless backbone file of a tiny decayed ViT (MAE's architecture: sin-cos table, its init), and the data."""
    root = tmp_path_factory.mktemp("ft")
    torch.manual_seed(3)
    model = create_vit("vit_tiny", depth=2, residual="decayed", init="mae", pos_embed="sincos", img_size=32)
    return save_backbone(root / "src" / "backbone.pt", model), root / "data"


def argv_of(tmp_path, source, *extra):
    file, data = source
    return [f"ckpt={file}", f"data.root={data}", f"run.root={tmp_path / 'runs'}", *TINY, *extra]


def mae_param_groups_lrd(named, depth: int, layer_decay: float) -> dict[str, tuple[float, bool]]:
    """My reading of MAE's ``util/lr_decay.py`` (``param_groups_lrd`` with ``get_layer_id_for_vit``), for a model
    whose parameters are ``named`` as MAE's VisionTransformer names them: per parameter (lr scale, decayed)."""
    num_layers = depth + 1
    out = {}
    for name, p in named:
        if not p.requires_grad:
            continue
        decayed = not (p.ndim == 1 or name in ("pos_embed", "cls_token", "dist_token"))
        if name in ("cls_token", "pos_embed") or name.startswith("patch_embed"):
            layer = 0
        elif name.startswith("blocks"):
            layer = int(name.split(".")[1]) + 1
        else:
            layer = num_layers
        out[name] = (layer_decay ** (num_layers - layer), decayed)
    return out


def groups_per_parameter(groups, names: dict[int, str]) -> dict[str, tuple[float, bool]]:
    return {names[id(p)]: (g["lr_scale"], g["name"] == "decay") for g in groups for p in g["params"]}


@pytest.mark.parametrize("pos_embed", ["learned", "sincos"])
def test_layer_decay_groups_equal_maes_param_groups_lrd_on_maes_fine_tuning_model(pos_embed):
    backbone = create_vit("vit_tiny", depth=3, global_pool="avg", pos_embed=pos_embed, img_size=32)
    head = torch.nn.Linear(backbone.embed_dim, 5)
    named = [*backbone.named_parameters(), *(("head." + n, p) for n, p in head.named_parameters())]
    ours = groups_per_parameter(layer_decay_groups(backbone, head, 0.65), {id(p): n for n, p in named})
    expected = mae_param_groups_lrd(named, depth=3, layer_decay=0.65)
    assert ours.keys() == expected.keys() and "fc_norm.weight" in ours
    for name in expected:
        assert ours[name][1] == expected[name][1], name
        assert ours[name][0] == pytest.approx(expected[name][0], rel=1e-12), name
    assert expected["blocks.0.attn.qkv.weight"][0] == pytest.approx(0.65 ** 3)  # the reading itself: (L + 1) - 1


def test_with_the_cls_token_timm_keeps_the_final_norm_with_the_last_block_where_mae_gives_it_scale_1():
    """The one difference (token pooling, MAE's --cls_token): timm's group_matcher puts ``norm`` with the last
    block (scale 0.65), MAE's get_layer_id_for_vit at the head (1). Stated in optim/param_groups.py."""
    backbone = create_vit("vit_tiny", depth=2, global_pool="token", img_size=32)
    head = torch.nn.Linear(backbone.embed_dim, 5)
    named = [*backbone.named_parameters(), *(("head." + n, p) for n, p in head.named_parameters())]
    ours = groups_per_parameter(layer_decay_groups(backbone, head, 0.65), {id(p): n for n, p in named})
    expected = mae_param_groups_lrd(named, depth=2, layer_decay=0.65)
    differ = {n for n in expected if ours[n][1] != expected[n][1] or abs(ours[n][0] - expected[n][0]) > 1e-12}
    assert differ == {"norm.weight", "norm.bias"}
    assert ours["norm.weight"][0] == pytest.approx(0.65) and expected["norm.weight"][0] == 1.0


def test_the_checkpoint_owns_the_architecture_and_its_weights_load_with_maes_pooling(tmp_path, source):
    cfg, spec = finetune_config(argv_of(tmp_path, source))
    assert (cfg.model.residual, cfg.model.init, cfg.model.pos_embed, cfg.model.depth, cfg.model.img_size) == (
        "decayed", "mae", "sincos", 2, 32)
    assert (cfg.model.global_pool, cfg.model.drop_path_rate, cfg.optim.layer_decay) == ("avg", 0.1, 0.75)
    model = starting_backbone(cfg, spec)
    stored = load_backbone(source[0]).state_dict()
    own = model.state_dict()
    for key, value in stored.items():
        if not key.startswith("norm."):  # average pooling reads fc_norm, which starts at 1 and 0 (MAE)
            torch.testing.assert_close(own[key], value, rtol=0, atol=0)
    assert torch.equal(own["fc_norm.weight"], torch.ones(model.embed_dim)) and not own["fc_norm.bias"].any()
    assert model.blocks[0].drop_path_rates() == (0.0, 0.0) and model.blocks[1].drop_path_rates()[1] > 0
    # the random floor: the same architecture and init drawn afresh, no weight read
    floor_cfg, _ = finetune_config(argv_of(tmp_path, source, "finetune.random_init=true"))
    torch.manual_seed(0)
    floor = starting_backbone(floor_cfg, spec).state_dict()
    assert not torch.equal(floor["blocks.0.attn.qkv.weight"], stored["blocks.0.attn.qkv.weight"])
    torch.testing.assert_close(floor["pos_embed"], stored["pos_embed"])  # MAE's fixed table is no draw
    assert run_dir_of(floor_cfg, spec).name == "ft-src-default-random"


@pytest.mark.parametrize("bad, said", [
    ("model.depth=4", "model.depth is the checkpoint's (src); fine-tuning trains the architecture it holds"),
    ("model.decay.indexing=layer", "model.decay.indexing is the checkpoint's"),
    ("optim.layer_decay=1.5", "optim.layer_decay must be"),
])
def test_bad_values_are_one_sentence_before_anything_is_written(tmp_path, source, capsys, bad, said):
    assert main(argv_of(tmp_path, source, bad)) == 1
    err = capsys.readouterr().err.strip()
    assert said in err and err.count("\n") == 0, err
    assert not (tmp_path / "runs").exists()


def test_two_items_or_the_random_floor_as_a_ckpt_are_refused(tmp_path, source):
    with pytest.raises(ConfigError, match="names 2 backbones; expected one item"):
        finetune_config(argv_of(tmp_path, source, f"ckpt={source[0]} init:skip:vit_tiny"))


def test_a_fine_tuning_resumes_exactly_and_trains_every_weight_with_its_layers_lr(tmp_path, source):
    straight = Recorder()
    cfg, spec = finetune_config(argv_of(tmp_path, source, "run.name=straight", "train.epochs=2"))
    trainer, module = run_training(check_config(cfg, run_dir_of(cfg, spec)), [straight],
                                   backbone=lambda: starting_backbone(cfg, spec))
    lrs = {round(g["lr_scale"], 6) for g in trainer.optimizers[0].param_groups}
    assert lrs == {round(0.75 ** k, 6) for k in range(4)}  # the stem (0.75^3), two blocks, the head (1)
    first, second = Recorder(), Recorder()
    argv = argv_of(tmp_path, source, "run.name=resumed", "train.epochs=2")
    cfg, spec = finetune_config(argv)
    run_training(check_config(cfg, run_dir_of(cfg, spec)), [first, StopAfterEpoch(1)],
                 backbone=lambda: starting_backbone(cfg, spec))
    cfg, spec = finetune_config([*argv, "run.resume=true"])
    run_training(check_config(cfg, run_dir_of(cfg, spec)), [second], backbone=lambda: starting_backbone(cfg, spec))
    assert len(straight.losses) == 8 and len(first.losses + second.losses) == 8
    torch.testing.assert_close(torch.tensor(first.losses + second.losses), torch.tensor(straight.losses),
                               rtol=0, atol=0)
    saved = load_saved_config(tmp_path / "runs" / "resumed" / "config.yaml")
    assert saved.finetune.ckpt == str(source[0]) and saved.model.residual == "decayed"
    # every weight moved, the patch embedding least (its lr is 0.75^3 of the head's)
    tuned = load_backbone(tmp_path / "runs" / "straight" / "backbone.pt").state_dict()
    stored = load_backbone(source[0]).state_dict()
    assert all(not torch.equal(tuned[k], v) for k, v in stored.items() if k not in ("pos_embed", "norm.weight",
                                                                                   "norm.bias"))


def test_a_released_state_dict_in_timms_names_is_fine_tuned(tmp_path, source, capsys):
    """A released DINO or MAE file is a plain state dict in timm's names, given with its arch."""
    import timm

    released = timm.create_model("vit_tiny_patch16_224", num_classes=0, depth=12, img_size=32)
    file = tmp_path / "dino_vittiny16_pretrain.pth"
    torch.save({"model": released.state_dict()}, file)  # MAE's files wrap the weights in "model"
    code = main([f"ckpt={file}:vit_tiny", f"data.root={source[1]}", f"run.root={tmp_path / 'runs'}", *TINY,
                 "train.epochs=1", "train.limit_train_batches=1", "train.limit_val_batches=1"])
    out = capsys.readouterr().out
    assert code == 0 and re.search(r"from +.*dino_vittiny16_pretrain\.pth \(a plain state dict\)", out), out
    tuned = load_backbone(tmp_path / "runs" / "ft-dino_vittiny16_pretrain-default" / "backbone.pt")
    assert tuned.skipless_args["global_pool"] == "avg" and len(tuned.blocks) == 12


def test_make_finetune_passes_ckpt_and_the_shared_variables():
    import shlex

    from test_makefile import dry_run

    words = shlex.split(dry_run("finetune", "CKPT=runs/my run", "DATA=cifar10", "RECIPE=paper", "GPUS=8", "RESUME=1"))
    assert words == ["python", "-m", "skipless.finetune", "finetune.ckpt='runs/my run'", "data=cifar10", "recipe=paper",
                     "train.devices=8", "run.resume=true"]


def test_the_in_run_diagnostics_watch_a_fine_tuning_with_kappa_in_and_out(tmp_path, source):
    """Seed 003's Fig. 4 and Table 3 quantities during supervised training (make train and make finetune share it)."""
    import json

    assert main(argv_of(tmp_path, source, "train.epochs=2", "diagnostics.every_n_epochs=1", "diagnostics.images=4",
                        "diagnostics.layers=all")) == 0
    rows = [json.loads(line) for line in
            (tmp_path / "runs" / "ft-src-default" / "diagnostics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2] and all(r["images"] == 4 for r in rows)
    kappas = rows[-1]["embeddings_log_kappa"]
    assert set(kappas) == {"0", "1"} and {"in", "attn+skip"} <= set(kappas["0"])
    assert rows[0]["embeddings_log_kappa"]["1"]["in"] != rows[-1]["embeddings_log_kappa"]["1"]["in"]  # it trained
    # Table 3's kappa_in and kappa_out: the mean over the blocks
    for name in ("in", "attn+skip"):
        assert rows[-1]["embeddings_mean_log_kappa"][name] == pytest.approx((kappas["0"][name] + kappas["1"][name]) / 2)


def test_without_ckpt_it_takes_the_newest_run_that_is_not_a_fine_tuning(tmp_path):
    import os
    import time

    from skipless.finetune import resolve_checkpoint

    torch.manual_seed(0)
    model = create_vit("vit_tiny", depth=1, img_size=32)
    runs = tmp_path / "runs"
    pretrained = save_backbone(runs / "dino" / "backbone.pt", model).parent
    tuned = save_backbone(runs / "ft-dino" / "backbone.pt", model).parent
    (tuned / "config.yaml").write_text("finetune:\n  ckpt: runs/dino\n")
    os.utime(pretrained / "backbone.pt", (time.time() - 100, time.time() - 100))
    assert resolve_checkpoint([f"run.root={runs}"]).path == pretrained / "backbone.pt"
