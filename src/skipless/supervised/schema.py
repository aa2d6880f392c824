"""What each key of a supervised config (``configs/train.yaml`` and its groups) may hold.

The run, model, optimizer and trainer keys are the pretraining's, with the same rules
(``training/schema.py``); the augmentation, dataset and validation keys are checked here. Every
value is checked before anything is written or loaded, and the first bad one refused in one sentence.
"""
from __future__ import annotations

from typing import Any, Callable

from omegaconf import DictConfig

from ..config.rules import Rule, integer, is_int, is_real, number, one_of, optional, text
from ..data.classification.registry import READERS
from ..models.timm_family import FAMILIES, TIMM_CLASSES, TimmFamilyError, create_timm_backbone, is_timm_model
from ..training import schema as pretrain_schema
from ..training.schema import POSITIVE_INT, UNIT, check_against

_SHARED_SECTIONS = ("run.", "model.", "optim.", "diagnostics.", "data.root", "data.n_train", "data.n_val", "data.seed",
                    "data.max_image_pixels", "data.min_image_side")
_SHARED_TRAIN = ("epochs", "batch_size_per_device", "global_batch", "num_workers", "cpu_threads", "accelerator",
                 "devices", "num_nodes", "strategy", "collective_timeout_minutes", "precision", "log_every_n_steps", "compile", "keep_checkpoints",
                 "checkpoint_every_minutes",
                 "export_epochs", "max_steps", "limit_train_batches")

RULES: dict[str, Rule] = {k: r for k, r in pretrain_schema.RULES.items()
                          if k.startswith(_SHARED_SECTIONS) or k in {f"train.{t}" for t in _SHARED_TRAIN}}
RULES.update({
    "data.name": one_of(*READERS),
    "aug.image_size": POSITIVE_INT,
    "aug.scale": Rule(lambda v: isinstance(v, (list, tuple)) and len(v) == 2 and all(is_real(x) for x in v)
                      and 0 < v[0] <= v[1] <= 1, "a pair [lo, hi] with 0 < lo <= hi <= 1 (fractions of the image area)"),
    "aug.hflip": UNIT,
    "aug.auto_augment": optional(text("a timm auto-augment policy, e.g. rand-m9-mstd0.5-inc1")),
    "aug.color_jitter": number(0),
    "aug.interpolation": one_of("bicubic", "bilinear", "nearest", "random"),
    "aug.re_prob": UNIT,
    "aug.mixup": number(0),
    "aug.cutmix": number(0),
    "aug.mixup_prob": UNIT,
    "aug.mixup_switch_prob": UNIT,
    "aug.label_smoothing": number(0, 1, high_open=True),
    "aug.eval_crop_pct": number(0, 1, low_open=True, high_open=False),  # 1: the whole image, no crop
    "model.family": one_of(*FAMILIES),
    "model.timm_args.*": Rule(lambda v: True, "a timm constructor argument"),  # timm itself checks them (_timm_family)
    "model.head_init_std": number(0, low_open=True),
    "optim.layer_decay": number(0, 1, low_open=True, high_open=False),
    # configs/train.yaml: epochs at which the lr drops x 0.1 (optim/schedules.py step_schedule); [] : the cosine
    "optim.lr_drops": Rule(lambda v: isinstance(v, (list, tuple)) and all(is_int(x) and x >= 1 for x in v)
                           and list(v) == sorted(set(v)), "a list of increasing epochs >= 1 ([] : the cosine to optim.min_lr)"),
    "train.val_every_n_epochs": integer(1),
    # make finetune's own keys (configs/finetune.yaml, skipless/finetune.py)
    "finetune.ckpt": optional(text("one CKPT item: a run folder, a backbone file, <state dict>:<arch>, timm:<name> "
                                   "or init:<model>")),
    "finetune.random_init": pretrain_schema.BOOL,
    "train.limit_val_batches": pretrain_schema.RULES["train.limit_train_batches"],
})


def _image_tiles(v: dict[str, Any]) -> str | None:
    size, patch = v["aug.image_size"], v["model.patch_size"]
    if size % patch:
        return (f"aug.image_size={size} is not a multiple of model.patch_size={patch}; expected a size the patches "
                f"tile, e.g. aug.image_size={max(patch, size // patch * patch)}")
    return None


def _mixup_pairs(v: dict[str, Any]) -> str | None:
    batch = v["train.batch_size_per_device"]
    if (v["aug.mixup"] > 0 or v["aug.cutmix"] > 0) and batch % 2:
        return (f"train.batch_size_per_device={batch} is odd, but mixup/cutmix mix each batch with itself reversed "
                f"and need an even batch; expected an even size, e.g. {batch + 1}, or aug.mixup=0 aug.cutmix=0")
    return None


# What model.family=timm leaves to timm (models/timm_family.py): the ViT's own keys must stay at what timm builds.
_TIMM_KEEPS = {"model.init": "timm", "model.attention": "softmax", "model.norm": "layernorm",
               "model.depth": None, "model.pos_embed": "learned", "optim.layer_decay": 1.0,
               "model.decay.branches": "both", "model.decay.zero_init": True,
               "diagnostics.every_n_epochs": 0, "diagnostics.signals_every_n_steps": 0}


def _lr_drops_within(v: dict[str, Any]) -> str | None:
    late = [d for d in v["optim.lr_drops"] if d >= v["train.epochs"]]
    if late:
        return (f"optim.lr_drops lists epochs {late} that train.epochs={v['train.epochs']} never starts; expected "
                f"epochs within 1..{v['train.epochs'] - 1} (epochs count from 0), or [] for the cosine")
    return None


def _timm_family(v: dict[str, Any]) -> str | None:
    args = {k[len("model.timm_args."):]: x for k, x in v.items() if k.startswith("model.timm_args.")}
    if v["model.family"] != "timm":
        if v["model.timm_name"] is not None or args:
            return (f"model.timm_name and model.timm_args apply to model.family=timm, but model.family is "
                    f"{v['model.family']}; expected a timm model group (model=swin-s, cait-s, pvt-v2-b3) or neither")
        return None
    name = v["model.timm_name"]
    if name is None or not is_timm_model(name):
        return (f"model.family=timm needs model.timm_name to be a timm model, got {name!r}; expected a name of "
                f"timm.list_models() or {', '.join(TIMM_CLASSES)}, e.g. swin_small_patch4_window7_224")
    for key, kept in _TIMM_KEEPS.items():
        if v[key] != kept:
            return (f"{key}={v[key]} does not apply to model.family=timm ({name} keeps timm's skips, init, "
                    f"attention and blocks; the diagnostics and layer decay read ViT blocks); expected {kept}")
    try:  # built once here, so that arguments timm refuses are one sentence before the run folder is written
        create_timm_backbone(name, v["model.img_size"] or v["aug.image_size"], v["model.patch_size"], None,
                             v["model.drop_path_rate"], args, v["model.residual"], v["model.alpha_min"],
                             v["model.decay.indexing"])
    except TimmFamilyError as err:
        return str(err)
    return None


RELATIONS: tuple[Callable[[dict[str, Any]], str | None], ...] = (
    pretrain_schema.warmup_within, pretrain_schema.exports_reached, pretrain_schema.implementation_exists,
    pretrain_schema.diagnosed_blocks_exist, pretrain_schema.diagnostics_within_collective_timeout,
    pretrain_schema.cutskip_qk_reading, _image_tiles, _mixup_pairs, _timm_family, _lr_drops_within)


def check_train_config(cfg: DictConfig) -> None:
    """Refuse the first value that a supervised run cannot run with (``ConfigError``, one sentence)."""
    check_against(cfg, RULES, RELATIONS, "skipless/supervised/schema.py")
