"""End-to-end fine-tuning: ``python -m skipless.finetune [ckpt=<CKPT item>] [data=...] [key=value ...]``.

Supervised training (``train.py``, the same module, run folder, resume, precision, accumulation, divergence
and collapse rules) that starts from the backbone one ``CKPT`` item names, in the evaluators' grammar
(``models/backbone_items.py``: a run, a backbone file, a released state dict with its arch, timm's cache,
``init:<model>``). Flow:

1. the item is resolved (``finetune.ckpt``; null: the newest run under ``run.root``) and its stored
   architecture written into ``model.*`` (``models/from_config.model_keys_of``) before the config is checked,
   so ``config.yaml`` says what was trained; a ``model.*`` key of the architecture given on the command line
   is refused (the checkpoint decides it), the head's (``global_pool``, ``drop_path_rate``, ``head_init_std``)
   are the recipe's;
2. the backbone is built as ``model.*`` says, with the fine-tuning's pooling and drop-path, and the stored
   weights are loaded into it: strictly, but for the final norm that average pooling replaces by its own
   (MAE: the encoder's ``norm`` is dropped, ``fc_norm`` starts at 1 and 0, as ``main_finetune.py`` loads it);
   with ``finetune.random_init=true`` no weight is read: the same architecture and init drawn with
   ``run.seed``, the floor a pretrained backbone is read against;
3. ``train.run_training`` trains it with a fresh head (``model.head_init_std``) and layer-wise lr decay
   (``optim.layer_decay``, ``optim/param_groups.layer_decay_groups``: timm's groups).

The recipes: ``configs/recipe/finetune-paper.yaml`` (He et al. 2022's ViT-B fine-tuning) and
``finetune-demo.yaml`` (the CPU demo).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Sequence

import lightning.pytorch as pl
from omegaconf import DictConfig
from torch import nn

from .config import HELP, ConfigError, load_config
from .models.backbone_items import RANDOM, BackboneSpec, newest_run, resolve_backbones, spec_model
from .models.checkpoint import BackboneLoadError
from .models.from_config import ARCHITECTURE_KEYS, model_keys_of
from .supervised.classifier import classifier_backbone
from .train import check_config, run_training
from .training.interrupt import run_command
from .training.run_plan import RunPlan

# What each kind of CKPT item is, in the header's words (models/backbone_items.BackboneSpec.kind).
KINDS = {"skipless": "a skipless backbone file", "state_dict": "a plain state dict", "timm": "timm's cached weights",
         "init": "a model preset at init"}

# The final norm that average pooling swaps for its own (timm: norm -> fc_norm), either way round.
POOL_NORMS = ({"norm.weight", "norm.bias"}, {"fc_norm.weight", "fc_norm.bias"})


def _given(argv: Sequence[str], key: str) -> str | None:
    """The value of ``key=`` on the command line (the last one), or None."""
    values = [item.split("=", 1)[1] for item in argv if item.split("=", 1)[0].strip() == key]
    return values[-1] if values else None


def resolve_checkpoint(argv: Sequence[str]) -> BackboneSpec:
    """The one backbone ``finetune.ckpt`` names (``ckpt=`` is taken as its short form), else the newest run that
    is not a fine-tuning (fine-tuning the last fine-tuned backbone again is never what an empty CKPT means)."""
    item = _given(argv, "finetune.ckpt") or _given(argv, "ckpt")
    runs_root = _given(argv, "run.root") or "runs"
    if item is None:  # the newest run that is not itself a fine-tuning
        run = newest_run(runs_root, fine_tunings=False)
        item = None if run is None else str(run)
    specs = resolve_backbones(item, runs_root)
    if len(specs) != 1 or specs[0].name == RANDOM:
        raise ConfigError(f"finetune.ckpt={item} names {len(specs)} backbones; expected one item (a run, a backbone "
                          "file, <state dict>:<arch>, timm:<name> or init:<model>); the random floor of an "
                          "architecture is finetune.random_init=true with that architecture's CKPT")
    return specs[0]


def finetune_config(argv: Sequence[str]) -> tuple[DictConfig, BackboneSpec]:
    """The resolved config of a fine-tuning (the checkpoint's architecture in ``model.*``) and its backbone."""
    if any(item in HELP for item in argv):  # before a checkpoint is looked for: load_config prints the help, exits
        load_config("finetune", argv)
    argv = [f"finetune.ckpt={item.split('=', 1)[1]}" if item.split("=", 1)[0].strip() == "ckpt" else item
            for item in argv]
    spec = resolve_checkpoint(argv)
    try:
        owned = model_keys_of(spec.args)
    except KeyError as err:
        raise ConfigError(f"{spec.name} stores the model argument {err.args[0]!r}, which fine-tuning cannot write "
                          "into model.*; expected a backbone of the skipless ViT family") from None
    given = sorted(k for k in (item.split("=", 1)[0].strip() for item in argv)
                   if k == "model.name" or any(k == a or k.startswith(f"{a}.") for a in ARCHITECTURE_KEYS))
    if given:
        raise ConfigError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} the checkpoint's ({spec.name}); "
                          "fine-tuning trains the architecture it holds: name another CKPT to change it")
    overrides = [f"{key}={json.dumps(value)}" for key, value in owned.items()]
    cfg = load_config("finetune", [*overrides, f"model.name={json.dumps(spec.name)}",
                                   f"finetune.ckpt={json.dumps(str(spec.path or spec.name))}", *argv])
    return cfg, spec


def run_dir_of(cfg: DictConfig, spec: BackboneSpec) -> Path:
    name = cfg.run.name or f"ft-{spec.name}-{cfg.data.name}{'-random' if cfg.finetune.random_init else ''}"
    return Path(cfg.run.root) / name


def starting_backbone(cfg: DictConfig, spec: BackboneSpec) -> nn.Module:
    """The backbone fine-tuning starts from (module docstring, step 2)."""
    model = classifier_backbone(cfg.model, int(cfg.aug.image_size))
    if cfg.finetune.random_init:
        return model
    state = spec_model(spec).state_dict()
    own = model.state_dict()
    missing, unexpected = set(own) - set(state), set(state) - set(own)
    swapped = any(missing == a and unexpected == b for a, b in (POOL_NORMS, POOL_NORMS[::-1]))
    shapes = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    if (missing or unexpected) and not swapped or shapes:
        raise BackboneLoadError(f"{spec.name} does not load into the model it describes (missing {sorted(missing)[:4]}, "
                                f"unexpected {sorted(unexpected)[:4]}, shapes differ at {shapes[:4]}); expected a "
                                "backbone of the skipless ViT family")
    model.load_state_dict(state, strict=False)
    return model


def describe_start(cfg: DictConfig, spec: BackboneSpec) -> str:
    """The header's line on where the weights come from."""
    where = spec.path or spec.name
    if cfg.finetune.random_init:
        return f"a fresh {cfg.model.arch} init of {spec.name}'s architecture (seed {cfg.run.seed}); no weight read"
    kind = KINDS.get(spec.kind, spec.kind)
    return f"{where} ({kind}), global pool {cfg.model.global_pool}, drop-path {cfg.model.drop_path_rate:g}"


def main(argv: Sequence[str] | None = None, extra_callbacks: Sequence[pl.Callback] = ()) -> int:
    """The command line (``make finetune``)."""
    specs: list[BackboneSpec] = []

    def plan_of(args: list[str]) -> RunPlan:
        cfg, spec = finetune_config(args)
        specs.append(spec)
        return check_config(cfg, run_dir_of(cfg, spec))

    def train_plan(plan: RunPlan) -> pl.Trainer:
        cfg, spec = plan.cfg, specs[-1]
        return run_training(plan, extra_callbacks, backbone=lambda: starting_backbone(cfg, spec),
                            source=describe_start(cfg, spec))[0]

    return run_command(list(sys.argv[1:] if argv is None else argv), "finetune", plan_of, train_plan,
                       "fine-tuned backbone")


if __name__ == "__main__":
    sys.exit(main())
