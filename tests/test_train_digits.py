"""``make train DATA=digits``: the osa-mnist recipe is seeds/004's Appendix E key by key, its training
transform is the identity plus normalisation, its lr is a constant 3e-4, and a short run on the digits
finishes with a validation accuracy in its summary."""
import json

import numpy as np
import pytest
import torch
from torchvision.transforms import functional as TF

from skipless.config import load_config
from skipless.data.classification.registry import classification_split
from skipless.data.conventions import IMAGENET_MEAN, IMAGENET_STD
from skipless.reports.summary import peak_lr
from skipless.supervised.augment import batch_mixer, eval_transform, train_transform
from skipless.train import main, run_dir_of, train

# seeds/004, Appendix E (and what "no augmentation, plain cross-entropy, no dropout" means in our keys)
APPENDIX_E = {
    "model.arch": "vit_micro",          # 6 blocks, d 64, 4 heads, MLP ratio 4
    "model.patch_size": 4,
    "model.img_size": 28,               # 50 learned positions (7 x 7 + CLS), not interpolated
    "model.global_pool": "token",       # the CLS token -> a linear layer
    "model.drop_path_rate": 0.0,        # no dropout
    "optim.name": "adamw",
    "optim.warmup_epochs": 0,           # no schedule: constant lr (the recipe's reading)
    "optim.weight_decay": 0.05,
    "optim.weight_decay_end": 0.05,
    "optim.clip_grad": 1.0,
    "aug.image_size": 28,
    "aug.scale": [1.0, 1.0],
    "aug.hflip": 0.0,
    "aug.auto_augment": None,
    "aug.color_jitter": 0.0,
    "aug.re_prob": 0.0,
    "aug.mixup": 0.0,
    "aug.cutmix": 0.0,
    "aug.label_smoothing": 0.0,
    "aug.eval_crop_pct": 1.0,
    "train.epochs": 10,
    "train.batch_size_per_device": 128,
    "train.val_every_n_epochs": 1,
    "data.name": "digits",
}


def _get(cfg, key):
    value = cfg
    for part in key.split("."):
        value = value[part]
    return list(value) if hasattr(value, "__len__") and not isinstance(value, str) else value


@pytest.mark.parametrize("choice", [[], ["recipe=osa-mnist"]])
def test_the_recipe_is_appendix_e_key_by_key_and_the_default_of_digits(choice):
    cfg = load_config("train", ["data=digits", "model=skip", *choice])
    assert cfg.choices["recipe"] == "osa-mnist"
    assert {k: _get(cfg, k) for k in APPENDIX_E} == APPENDIX_E
    assert peak_lr(cfg) == 3e-4  # exactly: lr 3e-4 at batch 128 on one device
    assert cfg.optim.min_lr == 3e-4  # the cosine from 3e-4 to 3e-4: constant


@pytest.mark.parametrize("model", ["skip", "skipless", "skipless-plain"])
def test_the_recipe_leaves_the_model_presets_own_choices(model):
    """Every preset trains with the same optimisation; residual mode and init stay the preset's."""
    preset = load_config("train", ["data=imagenet", f"model={model}"]).model
    cfg = load_config("train", ["data=digits", f"model={model}"])
    assert (cfg.model.residual, cfg.model.init, cfg.model.norm) == (preset.residual, preset.init, preset.norm)
    assert peak_lr(cfg) == 3e-4


def test_training_images_get_the_identity_plus_normalisation_and_no_batch_mixing():
    cfg = load_config("train", ["data=digits"])
    digits = classification_split("digits", cfg.data.root, "train")
    train_tf, eval_tf = train_transform(cfg.aug), eval_transform(cfg.aug)
    torch.manual_seed(0)
    for i in range(0, len(digits), 7):  # 206 images, each a fresh draw of the random crop and flip
        image = digits.image(i)
        plain = TF.normalize(TF.to_tensor(image), IMAGENET_MEAN, IMAGENET_STD)
        torch.testing.assert_close(train_tf(image), plain, rtol=0, atol=0)
        torch.testing.assert_close(eval_tf(image), plain, rtol=0, atol=0)
    assert batch_mixer(cfg.aug, 10) is None


def test_a_short_run_on_the_digits_finishes_with_val_accuracy_at_a_constant_lr(tmp_path):
    cfg = load_config("train", ["data=digits", "model=skip", "model.depth=1", "train.epochs=1",
                                "train.limit_train_batches=3", "train.limit_val_batches=1",
                                "train.log_every_n_steps=1", f"run.root={tmp_path / 'runs'}"])
    trainer, module = train(cfg)
    summary = json.loads((run_dir_of(cfg) / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 3 and np.isfinite(summary["final_loss"])
    assert 0.0 <= summary["val"]["top1"] <= 100.0 and summary["val"]["epoch"] == 1
    assert trainer.callback_metrics["val/top1"].item() == pytest.approx(summary["val"]["top1"])
    assert module.schedules["lr"].tolist() == [3e-4] * 3 and module.schedules["wd"].tolist() == [0.05] * 3
    groups = {g["name"]: g for g in trainer.optimizers[0].param_groups}
    assert groups["decay"]["lr"] == 3e-4 and groups["decay"]["weight_decay"] == 0.05
    assert module.backbone.patch_embed.grid_size == (7, 7) and module.backbone.pos_embed.shape == (1, 50, 64)


def test_an_unknown_dataset_is_one_sentence_that_lists_digits(tmp_path, capsys):
    for override in ("data=svhn", "data.name=svhn"):
        root = tmp_path / "runs"
        code = main([f"run.root={root}", "data=digits", override] if override.startswith("data.")
                    else [f"run.root={root}", override])
        err = capsys.readouterr().err.strip()
        assert code == 1 and "svhn" in err and "digits" in err and err.count("\n") == 0, err
        assert not root.exists()


def test_knn_and_linear_read_the_digits_at_28_px_as_they_are():
    """A digits backbone (patch 4, positions learned at 28 px) is evaluated at its own size, not DINO's 224."""
    from skipless.eval.shared.global_eval import image_sizes

    for entry in ("knn", "linear"):
        assert image_sizes(load_config(entry, ["dataset=digits"])) == (28, 28)
