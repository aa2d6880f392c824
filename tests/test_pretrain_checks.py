"""Bad values of a pretraining are one sentence before anything is written; a run reports what it
skipped and how to resume (issue 12)."""
import itertools
import json
import math
import shlex
import signal
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
from PIL import Image
from test_config import METHOD_RECIPES

import skipless.pretrain as pretrain_module
from omegaconf import OmegaConf

from skipless.config import CONFIG_DIR, ConfigError, available, leaf_values, load_config, owned_choices
from skipless.pretrain import check_keys, main, pretrain, run_dir_of
from skipless.training.divergence import divergence_message
from skipless.training.interrupt import resume_message
from skipless.ssl import METHODS
from skipless.training.data import DATASETS
from skipless.training.schema import RULES, SKIPPED, rule_of

# A tiny run on an image folder (DATA=imagenet picks the paper's recipe: its scale is undone here).
TINY_FOLDER = [
    "data=imagenet", "model.arch=vit_tiny", "model.depth=1",
    "dino.out_dim=32", "dino.hidden_dim=32", "dino.bottleneck_dim=16",
    "dino.global_crop_size=32", "dino.local_crop_size=16", "dino.local_crops_number=1",
    "train.batch_size_per_device=4", "train.global_batch=null", "train.epochs=2", "optim.warmup_epochs=0",
    "train.export_epochs=[]",
    "train.log_every_n_steps=1", "train.accelerator=cpu",
    "diagnostics.every_n_epochs=0", "diagnostics.signals_every_n_steps=0",  # tests/test_pretrain_diagnostics.py
]


def write_images(folder: Path, good: int, broken: int = 0) -> Path:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(good):
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(folder / f"good{i}.png")
    for i in range(broken):
        (folder / f"zz_broken{i}.jpg").write_bytes(b"\xff\xd8 not a jpeg" * 20)
    return folder


def run_main(tmp_path, capsys, *args: str) -> tuple[int, str]:
    code = main([f"run.root={tmp_path / 'runs'}", *args])
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("args, message", [
    (["train.epochs=0"], "train.epochs must be an integer >= 1, got 0"),
    (["model.depth=4", "diagnostics.layers=[0,5]"], "diagnostics.layers lists blocks [5] that a 4-block model does not have"),
    (["diagnostics.dtype=float16"], "diagnostics.dtype must be one of float64, float32, got 'float16'"),
    (["optim=soap", "model.lr.soap=nan"], "model.lr.soap must be a finite number > 0, got nan"),
    (["optim.lr_scale=inf"], "optim.lr_scale must be a finite number > 0, got inf"),
    (["train.epochs=3", "optim.warmup_epochs=10"],
     "optim.warmup_epochs=10 is longer than train.epochs=3; expected at most train.epochs"),
    (["dino.teacher_temp=-1"], "dino.teacher_temp must be a finite number > 0, got -1"),
    (["dino.momentum_teacher=1.5"], "dino.momentum_teacher must be a number in [0, 1], got 1.5"),
    (["optim.betas=[0.9,1.0]"], "optim.betas must be a pair [beta1, beta2], each in [0, 1), got [0.9, 1.0]"),
    (["optim.eps=0"], "optim.eps must be a finite number > 0, got 0"),
    (["optim.clip_grad=-1"], "optim.clip_grad must be a finite number >= 0, got -1"),
    (["train.batch_size_per_device=0"], "train.batch_size_per_device must be an integer >= 1, got 0"),
    (["train.num_workers=-2"], "train.num_workers must be an integer >= 0, got -2"),
    (["dino.local_crops_scale=[0.5,0.1]"], "dino.local_crops_scale must be a pair [lo, hi] with 0 < lo"),
    (["dino.local_crop_size=50"], "dino.local_crop_size=50 is not a multiple of model.patch_size=16"),
    (["model.drop_path_rate=1.0"], "model.drop_path_rate must be a number in [0, 1), got 1.0"),
    (["train.devices=0"], "train.devices must be auto or an integer >= 1, got 0"),
    (["train.precision=fp8"], "train.precision must be one of auto, 32-true, bf16-mixed, 16-mixed, 64-true"),
    (["train.precision=bf16-true"], "train.precision must be one of auto, 32-true, bf16-mixed, 16-mixed, 64-true "
                                    "(16-bit weights, as bf16-true and 16-true keep them, lose the EMA teacher's"),
    (["optim=soap", "optim.precondition_frequency=0"], "optim.precondition_frequency must be an integer >= 1, got 0"),
    (["train.epochs=2.5"], "train.epochs must be an integer >= 1, got 2.5"),
    (["run.name=two\nlines"], "run.name must be null or a folder name without '/' or control characters, got 'two\\nlines'"),
])
def test_bad_values_are_one_sentence_before_anything_is_written(tmp_path, capsys, args, message):
    code, err = run_main(tmp_path, capsys, f"data.root={tmp_path / 'data'}", *args)
    assert code == 1 and err.startswith(f"error: {message}") and len(err.splitlines()) == 1
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()


def test_every_key_of_every_group_choice_has_a_rule_and_the_shipped_configs_pass():
    """Every choice of every group, under every method: each key has a rule (the shared ones or the method's)
    and the shipped values pass; a recipe written for another method is refused in one sentence instead of
    being half applied (it leaves this method's recipe values unset, or sets the other method's section)."""
    scales = sorted({scale for ssl in METHODS for scale in owned_choices("recipe", ssl)})
    for ssl, model, optim, data, recipe in itertools.product(METHODS, available("model"), available("optim"),
                                                             available("data"), scales):
        argv = [f"ssl={ssl}", f"model={model}", f"optim={optim}", f"data={data}", f"recipe={recipe}"]
        if recipe not in METHOD_RECIPES[ssl]:  # another method's recipe is never read (skipless.config, per: ssl)
            with pytest.raises(ConfigError, match=rf"unknown recipe '{recipe}' for {ssl}; expected one of: "):
                load_config("pretrain", argv)
            continue
        cfg = load_config("pretrain", argv)  # MAE's recipes state every value, and set mae.*: refused below
        others = [m for m in METHODS if m != ssl and m in cfg]
        if others:
            with pytest.raises(ConfigError, match=f"recipe={recipe} sets keys of ssl={others[0]}"):
                check_keys(cfg)
            continue
        family = OmegaConf.select(OmegaConf.load(CONFIG_DIR / "model" / f"{model}.yaml"), "model.family")
        if family not in (None, "vit"):  # make train's other timm models (model=swin-s): pretraining builds ViTs
            with pytest.raises(ConfigError, match="^model.family must be vit: pretraining builds the suite's ViT"):
                check_keys(cfg)
            continue
        if cfg.data.name not in DATASETS:  # a classification reader of make train: pretraining reads none
            with pytest.raises(ConfigError, match=f"data.name must be one of {', '.join(DATASETS)}, got '{cfg.data.name}'"):
                check_keys(cfg)
            continue
        preset_init = OmegaConf.select(OmegaConf.load(CONFIG_DIR / "model" / f"{model}.yaml"), "model.init")
        if ssl == "mae" and cfg.model.init == "mae" and preset_init not in (None, "mae"):
            with pytest.raises(ConfigError, match=f"model={model} names its own init {preset_init}"):
                check_keys(cfg)  # the MAE recipe's init=mae would silently replace the preset's
            continue
        check_keys(cfg)
        rules = {**RULES, **METHODS[ssl].rules}
        keys = [k for k in leaf_values(cfg) if not any(k.startswith(p.rstrip("*")) for p in SKIPPED)]
        assert all(rule_of(k, rules) is not None for k in keys), [k for k in keys if rule_of(k, rules) is None]
    assert all(rule.expected for ssl in METHODS for rule in {**RULES, **METHODS[ssl].rules}.values())


def test_a_dataset_smaller_than_one_batch_is_refused_before_the_run_folder(tmp_path, capsys):
    images = write_images(tmp_path / "images", good=3)
    code, err = run_main(tmp_path, capsys, *TINY_FOLDER, f"data.root={images}")
    assert code == 1 and len(err.splitlines()) == 1
    assert f"data.root={images} holds 3 training images, fewer than one batch of train.batch_size_per_device=4" in err
    assert "set train.batch_size_per_device=3 or less" in err
    assert not (tmp_path / "runs").exists()


def test_a_folder_of_only_unreadable_images_is_refused_before_the_run_folder(tmp_path, capsys):
    images = write_images(tmp_path / "images", good=0, broken=5)
    code, err = run_main(tmp_path, capsys, *TINY_FOLDER, f"data.root={images}")
    assert code == 1 and len(err.splitlines()) == 1
    assert f"none of the 5 images under data.root={images} can be read (first: zz_broken0.jpg" in err
    assert not (tmp_path / "runs").exists()


def test_a_truncated_checkpoint_to_resume_is_named_and_nothing_is_written(tmp_path, capsys):
    images = write_images(tmp_path / "images", good=8)
    last = tmp_path / "runs" / "cut" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    last.write_bytes(b"PK\x03\x04" + bytes(100))  # the first bytes of a zip, cut short
    code, err = run_main(tmp_path, capsys, *TINY_FOLDER, f"data.root={images}", "run.name=cut", "run.resume=true")
    assert code == 1 and len(err.splitlines()) == 1
    assert f"the checkpoint to resume, {last}, cannot be read" in err
    assert "restore a good copy of it, or start anew without RESUME=1 under another run.name=" in err
    assert sorted(p.name for p in (tmp_path / "runs" / "cut").iterdir()) == ["checkpoints"]


def test_a_run_root_under_a_regular_file_is_refused(tmp_path, capsys):
    (tmp_path / "afile").write_text("not a folder")
    code = main([f"run.root={tmp_path / 'afile' / 'runs'}", f"data.root={tmp_path / 'data'}"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert f"run.root cannot hold the run folder {tmp_path / 'afile' / 'runs'}" in err
    assert f"{tmp_path / 'afile'} is a file, not a folder" in err
    assert not (tmp_path / "data").exists()


def test_divergence_names_the_checkpoint_only_when_it_exists_and_a_third_of_the_lr(tmp_path):
    cfg = load_config("pretrain", ["optim=soap", "model.lr.soap=3e-4"])
    run = tmp_path / "myrun"
    first = divergence_message(cfg, 2, "loss nan", 1e-3, run)
    assert "no checkpoint exists yet" in first and "last.ckpt" not in first
    assert first.endswith("lower model.lr.soap to a third and start anew, adding to ARGS: model.lr.soap=0.0001 "
                          "run.name=myrun-lr0.0001")
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "last.ckpt").write_bytes(b"")
    later = divergence_message(cfg, 70, "loss nan", 1e-3, run)
    assert f"the last good checkpoint {run / 'checkpoints' / 'last.ckpt'} is kept" in later


@pytest.mark.parametrize("workers", [0, 2])
def test_each_unreadable_image_is_counted_and_named_once_and_the_total_said_at_the_end(tmp_path, capfd, workers):
    # 5 readable images + 3 empty files in a row (the reader serves the next index in place of an
    # unreadable one, so they are read 3 + 2 + 1 times an epoch), over 2 epochs and 0 or 2 workers
    images = write_images(tmp_path / "images", good=5)
    for i in range(3):
        (images / f"zz_empty{i}.jpg").write_bytes(b"")
    cfg = load_config("pretrain", [*TINY_FOLDER, f"data.root={images}", f"run.root={tmp_path / 'runs'}",
                                   f"train.num_workers={workers}"])
    pretrain(cfg)
    captured = capfd.readouterr()
    said = captured.out + captured.err
    for i in range(3):
        assert said.count(f"zz_empty{i}.jpg") == 1, said  # named once, in the log of the run
    assert "epoch 1: 3 unreadable images skipped (3 in this run so far), each counted and named once:" in said
    assert "epoch 2:" not in said.replace("Epoch 2", "")  # no new file in epoch 2: nothing to say
    assert "run end: 3 unreadable images skipped in all, each once" in said
    summary = json.loads((run_dir_of(cfg) / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["skipped_images"] == 3
    assert summary["skipped_files"] == [str(images / f"zz_empty{i}.jpg") for i in range(3)]
    assert summary["epochs_done"] == 2 and summary["epochs"] == 2 and summary["steps"] == 4
    assert math.isfinite(summary["final_loss"])


class InterruptAt(pl.Callback):
    """A Ctrl-C arriving before the given global step (Lightning catches it inside ``fit``)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            raise KeyboardInterrupt


def test_ctrl_c_says_how_to_resume_and_exits_130(tmp_path, capsys, monkeypatch):
    images = write_images(tmp_path / "images", good=8)
    args = [*TINY_FOLDER, f"data.root={images}", f"run.root={tmp_path / 'runs'}", "run.name=ctrlc",
            "train.num_workers=0"]
    real = pretrain_module.run_pretraining
    monkeypatch.setattr(pretrain_module, "run_pretraining",
                        lambda method, plan, extra=(): real(method, plan, [*extra, InterruptAt(3)]))
    handler = signal.getsignal(signal.SIGINT)
    try:
        code = main(args)
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores further Ctrl-C once it caught one
    err = capsys.readouterr().err.strip().splitlines()[-1]
    last = tmp_path / "runs" / "ctrlc" / "checkpoints" / "last.ckpt"
    assert code == 130
    assert err.startswith(f"error: interrupted; resume from {last}")
    assert err.endswith(f'with: make pretrain RESUME=1 ARGS="{shlex.join(args)}"')
    summary = json.loads((tmp_path / "runs" / "ctrlc" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["epochs_done"] == 1 and summary["steps"] == 3


def test_ctrl_c_before_the_first_checkpoint_says_there_is_nothing_to_resume(tmp_path):
    message = resume_message(["model=skip", "run.resume=true"], tmp_path / "runs" / "x")
    assert message.endswith('before the run started; start it again with: make pretrain ARGS="model=skip"')
    run = tmp_path / "runs" / "x"
    (run / "tb").mkdir(parents=True)  # what an interrupted start leaves: its config and events, no checkpoint
    message = resume_message(["model=skip", "run.name=x"], run)
    assert "nothing to resume" in message  # the same command starts afresh (tests/test_training_run_folder.py)
    assert message.endswith(f'start again with: make pretrain ARGS="model=skip run.name=x" (this attempt\'s files '
                            f'move to {run}/attempts/<n>/)')
