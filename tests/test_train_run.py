"""Whole supervised runs (``make train``) on a tiny generated default: presets x optimizers, validation
metrics, the exported backbone, resume, divergence, refusals."""
import json
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from skipless.config import ConfigError, load_config, load_saved_config
from skipless.models import load_backbone
from skipless.training.divergence import DivergenceError
from skipless.supervised.classifier import Supervised
from skipless.train import main, run_dir_of, train
from skipless.training.run_folder import ResumeMismatchError

TINY = [
    "model.arch=vit_tiny", "model.depth=2", "aug.image_size=32",
    "data.n_train=16", "data.n_val=8",
    "train.batch_size_per_device=4", "train.num_workers=0", "train.log_every_n_steps=1",
    "optim.warmup_epochs=1",
    "train.precision=32-true",  # the tests compare logged numbers with a recomputation outside the step:
]                               # one code path (test_training_precision.py covers bf16-mixed and 16-mixed)


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def tiny_cfg(tmp_path: Path, data_root: Path, *extra: str):
    return load_config("train", [*TINY, f"data.root={data_root}", f"run.root={tmp_path / 'runs'}", *extra])


class Recorder(pl.Callback):
    """The training losses, and the logits and labels of every validation batch."""

    def __init__(self):
        self.losses, self.val = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"] if isinstance(outputs, dict) else outputs))

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        with torch.no_grad():
            self.val.append((pl_module(batch[0]).float(), batch[1]))


@pytest.mark.parametrize("model,optim", [("skip", "adamw"), ("skipless", "adamw"), ("skipless-plain", "soap"),
                                         ("attn-skip", "adamw"), ("mlp-skip", "soap")])
def test_presets_train_validate_and_export_a_backbone_evaluators_read(tmp_path, data_root, model, optim):
    cfg = tiny_cfg(tmp_path, data_root, f"model={model}", f"optim={optim}", "train.epochs=1")
    rec = Recorder()
    trainer, module = train(cfg, extra_callbacks=[rec])
    run = run_dir_of(cfg)
    assert len(rec.losses) == 4 and np.isfinite(rec.losses).all()
    # top-1 / top-5 as logged equal a direct count over the validation logits
    logits = torch.cat([l for l, _ in rec.val])
    labels = torch.cat([y for _, y in rec.val])
    top1 = (logits.argmax(1) == labels).float().mean().item() * 100
    top5 = (logits.topk(5, dim=1).indices == labels[:, None]).any(1).float().mean().item() * 100
    assert len(labels) == 8
    assert trainer.callback_metrics["val/top1"].item() == pytest.approx(top1)
    assert trainer.callback_metrics["val/top5"].item() == pytest.approx(top5)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["val"]["top1"] == pytest.approx(top1)
    # the exported backbone is the classifier's, without its head, in the evaluators' format
    backbone = load_backbone(run / "backbone.pt").eval()
    assert backbone.skipless_args["residual"] == cfg.model.residual
    module.eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(backbone(x), module.backbone(x))
    assert load_saved_config(run / "config.yaml").model.name == model


def test_the_paper_init_is_the_supervised_one(tmp_path, data_root):
    """Section 6.1: the supervised ViT-B's cutskip values are alpha 2, beta 0.6, c 3 (not DINO's 1.8 / 1 / 3)."""
    cfg = load_config("train", ["data=imagenet"])
    assert cfg.model.arch == "vit_base" and cfg.model.drop_path_rate == 0.0
    module = Supervised(load_config("train", [*TINY]), num_classes=10)
    args = module.backbone.skipless_args["init_args"]
    assert (args["alpha"], args["beta"], args["c"]) == (2.0, 0.6, 3.0)


class StopAfterEpoch(pl.Callback):
    def __init__(self, epoch):
        self.epoch = epoch

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch + 1 == self.epoch:
            trainer.should_stop = True


def test_resume_continues_the_loss_curve_exactly(tmp_path, data_root):
    straight = Recorder()
    train(tiny_cfg(tmp_path, data_root, "run.name=straight", "train.epochs=2"), extra_callbacks=[straight])
    first, second = Recorder(), Recorder()
    cfg = tiny_cfg(tmp_path, data_root, "run.name=resumed", "train.epochs=2")
    train(cfg, extra_callbacks=[first, StopAfterEpoch(1)])
    train(tiny_cfg(tmp_path, data_root, "run.name=resumed", "train.epochs=2", "run.resume=true"),
          extra_callbacks=[second])
    assert len(straight.losses) == 8 and len(first.losses) == 4 and len(second.losses) == 4
    torch.testing.assert_close(torch.tensor(first.losses + second.losses), torch.tensor(straight.losses),
                               rtol=0, atol=0)
    resumes = (run_dir_of(cfg) / "resumes.jsonl").read_text().splitlines()
    assert len(resumes) == 1


def test_mixup_runs_on_soft_targets(tmp_path, data_root):
    """The paper's recipe mixes batches (mixup 0.8 / cutmix 1.0, timm's Mixup): the loss is the soft-target
    cross-entropy, and an odd batch is refused before anything is written."""
    cfg = tiny_cfg(tmp_path, data_root, "aug.mixup=0.8", "aug.cutmix=1.0", "aug.auto_augment=rand-m9-mstd0.5-inc1",
                   "aug.re_prob=0.25", "train.epochs=1", "train.max_steps=2")
    rec = Recorder()
    train(cfg, extra_callbacks=[rec])
    assert len(rec.losses) == 2 and np.isfinite(rec.losses).all()
    odd = tiny_cfg(tmp_path, data_root, "aug.mixup=0.8", "train.batch_size_per_device=3", "run.name=odd")
    with pytest.raises(ConfigError, match="train.batch_size_per_device=3 is odd"):
        train(odd)
    assert not run_dir_of(odd).exists()


class TrainAccuracy(pl.Callback):
    """Each batch's accuracy counted from the model before its step, and train/top1 as logged after it."""

    def __init__(self):
        self.counted, self.logged = [], []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        with torch.no_grad():  # drop-path and dropout are 0: the training forward gives these logits
            self.counted.append(float((pl_module(batch[0]).argmax(-1) == batch[1]).float().mean() * 100))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.logged.append(float(trainer.callback_metrics["train/top1"]))


def test_train_top1_is_each_batchs_accuracy_and_absent_under_mixup(tmp_path, data_root):
    rec = TrainAccuracy()
    train(tiny_cfg(tmp_path, data_root, "train.epochs=1", "aug.mixup=0", "aug.cutmix=0"), extra_callbacks=[rec])
    assert len(rec.logged) == 4 and rec.logged == pytest.approx(rec.counted)
    mixed = tiny_cfg(tmp_path, data_root, "train.epochs=1", "train.max_steps=1", "aug.mixup=0.8", "run.name=mixed")
    trainer, _ = train(mixed)
    assert "train/top1" not in trainer.callback_metrics and "train/loss" in trainer.callback_metrics


def test_divergence_stops_with_the_sentence_and_keeps_the_last_checkpoint(tmp_path, data_root):
    cfg = tiny_cfg(tmp_path, data_root, "train.epochs=2")
    train(cfg)
    last = run_dir_of(cfg) / "checkpoints" / "last.ckpt"
    before = last.read_bytes()
    blown = tiny_cfg(tmp_path, data_root, "train.epochs=3", "run.resume=true", "model.lr.adamw=1e30")
    with pytest.raises(ResumeMismatchError, match="model.lr.adamw"):  # the recipe is not resumable
        train(blown)
    fresh = tiny_cfg(tmp_path, data_root, "run.name=blown", "model.lr.adamw=1e30", "train.epochs=2")
    with pytest.raises(DivergenceError, match="training diverged at step .* model.lr.adamw"):
        train(fresh)
    assert last.read_bytes() == before


@pytest.mark.parametrize("override,words", [
    ("aug.image_size=30", "aug.image_size=30 is not a multiple of model.patch_size=16"),
    ("aug.label_smoothing=1.5", "aug.label_smoothing"),
    ("data=nope", "unknown data 'nope'"),
    ("train.val_every_n_epochs=0", "train.val_every_n_epochs"),
])
def test_bad_values_are_one_sentence_before_anything_is_written(tmp_path, capsys, override, words):
    root = tmp_path / "runs"
    code = main([f"run.root={root}", "train.max_steps=1", override])
    err = capsys.readouterr().err.strip()
    assert code == 1 and words in err and err.count("\n") == 0
    assert not root.exists()


def test_a_corrupt_image_in_a_class_folder_is_skipped_and_counted_not_fatal(tmp_path, capsys):
    """ImageNet layout (train/<wnid>/, val/<wnid>/) with one truncated JPEG: the run finishes and its
    summary counts the skip."""
    from PIL import Image

    root = tmp_path / "imagenet"
    for split, n in (("train", 4), ("val", 2)):
        for c, wnid in enumerate(("n01440764", "n01443537")):
            folder = root / split / wnid
            folder.mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (40, 40), (255 * c, 40 * i, 90)).save(folder / f"{wnid}_{i}.JPEG")
    bad = root / "train" / "n01440764" / "n01440764_1.JPEG"
    bad.write_bytes(bad.read_bytes()[:40])
    cfg = load_config("train", [*(o for o in TINY if not o.startswith("data.")), "data=imagenet", f"data.root={root}", f"run.root={tmp_path / 'runs'}",
                                "train.epochs=1", "recipe=demo", "aug.image_size=32"])
    train(cfg)
    assert f"each counted and named once:\n  {bad} (truncated or corrupt)\n" in capsys.readouterr().out
    summary = json.loads((run_dir_of(cfg) / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["skipped_images"] == 1 and summary["steps"] == 2
    assert summary["skipped_files"] == [str(bad)]


def test_training_and_the_evaluators_look_for_a_dataset_in_the_same_place(monkeypatch):
    """make train DATA=x and make knn DATASET=x read the same folder when no root is given."""
    from skipless.eval.shared.global_eval import data_root
    from skipless.data.classification.registry import READERS

    monkeypatch.delenv("DATA_ROOT", raising=False)
    for name in READERS:
        train_root = load_config("train", [f"data={name}"]).data.root
        assert train_root == data_root(load_config("knn", [f"dataset={name}"])), name
