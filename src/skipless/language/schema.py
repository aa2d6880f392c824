"""What each key of a language-model config (``configs/lm.yaml`` and its groups) may hold.

The run keys, the optimizer's shared keys and the trainer's keys are pretraining's, with the same rules
(``training/schema.py``); the model, schedule, data and validation keys are the LM's own, checked here. Every
value is checked before anything is written or built, and the first bad one is refused in one sentence.

The model group is shared with the image entry points (``configs/model/``): skip, skipless, skipless-plain and
the other residual modes mean the same there and here (the residual mode; ``skipless`` also the paper's init,
whose values for the LM are ``lm.yaml``'s). A preset that sets a key the LM does not have (``model=osa``: its
attention; ``model=resnet``: another family) is refused in one sentence naming the presets that do build.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig, OmegaConf

from ..config import CONFIG_DIR, ConfigError, available, leaf_values
from ..config.rules import Rule, integer, one_of, optional
from ..data.text.registry import BUILDERS, PATH_PREFIX
from ..models.block import RESIDUAL_MODES
from ..models.causal_lm import LM_ARCHS
from ..models.decay import DECAY_BRANCHES, DECAY_INDEXINGS
from ..models.init import qk_reading_problem
from ..models.lm_init import LM_CUTSKIP_DEFAULTS, LM_INITS, LM_QK_READINGS
from ..training import schema as shared
from ..training.schema import BOOL, COUNT, NON_NEGATIVE, POSITIVE, POSITIVE_INT, REAL, check_against

DATA_NAMES = ("default", "c4")  # configs/text/<name>.yaml
WEIGHT_DECAY_PARAMS = ("all", "matrices")
_SHARED_TRAIN = ("batch_size_per_device", "global_batch", "num_workers", "cpu_threads", "accelerator", "devices",
                 "num_nodes", "strategy", "collective_timeout_minutes", "precision", "log_every_n_steps", "compile",
                 "keep_checkpoints", "checkpoint_every_minutes", "max_steps")
_SHARED_OPTIM = ("name", "lr", "weight_decay", "clip_grad", "betas", "eps", "shampoo_beta", "precondition_frequency",
                 "max_precond_dim", "precondition_1d", "implementation", "momentum", "nesterov")


def _tokenizer_name(value: Any) -> bool:
    return isinstance(value, str) and (value in BUILDERS or (value.startswith(PATH_PREFIX) and
                                                             len(value) > len(PATH_PREFIX)))


RULES: dict[str, Rule] = {k: r for k, r in shared.RULES.items() if k.startswith("run.")}
RULES.update({f"optim.{k}": shared.RULES[f"optim.{k}"] for k in _SHARED_OPTIM})
RULES.update({f"train.{k}": shared.RULES[f"train.{k}"] for k in _SHARED_TRAIN})
RULES.update({
    "model.name": shared.NAME,
    "model.arch": one_of(*LM_ARCHS),
    "model.embed_dim": optional(POSITIVE_INT),
    "model.depth": optional(POSITIVE_INT),
    "model.num_heads": optional(POSITIVE_INT),
    "model.mlp_hidden": optional(POSITIVE_INT),
    "model.vocab_size": optional(POSITIVE_INT),  # at least the tokenizer's: skipless/lm.py, once it is built
    "model.context": optional(integer(2)),
    "model.residual": one_of(*RESIDUAL_MODES),
    "model.init": one_of(*LM_INITS),
    "model.init_args.alpha": optional(REAL),
    "model.init_args.beta": optional(REAL),
    "model.init_args.c": optional(REAL),
    "model.init_args.qk": optional(one_of(*LM_QK_READINGS)),
    "model.alpha_min": optional(shared.UNIT),
    "model.decay.indexing": one_of(*DECAY_INDEXINGS),
    "model.decay.branches": one_of(*DECAY_BRANCHES),
    "model.decay.zero_init": BOOL,
    "model.rope_theta": POSITIVE,
    "model.lr.*": POSITIVE,
    "optim.warmup_steps": COUNT,
    "optim.min_lr_ratio": shared.UNIT,
    "optim.weight_decay_params": one_of(*WEIGHT_DECAY_PARAMS),
    "train.steps": POSITIVE_INT,
    "train.val_every_n_steps": POSITIVE_INT,
    "data.name": one_of(*DATA_NAMES),
    "data.root": shared.NAME,
    "data.cache": shared.NAME,
    "data.tokenizer": Rule(_tokenizer_name, f"one of {', '.join(BUILDERS)} or {PATH_PREFIX}<tokenizer.json>"),
    "data.shards": optional(POSITIVE_INT),
    "data.val_shards": optional(POSITIVE_INT),
})
# Keys of the model section, without the preset patterns (``model.lr.*``): what a model group may set here.
MODEL_KEYS = {k for k in RULES if k.startswith("model.") and "*" not in k}


def building_presets(config_dir: Path = CONFIG_DIR) -> list[str]:
    """The model presets (``configs/model/``) whose every key is one the language model has."""
    def keys_of(name: str) -> set[str]:
        return set(leaf_values(OmegaConf.load(config_dir / "model" / f"{name}.yaml")))

    return [name for name in available("model", config_dir) if keys_of(name) <= MODEL_KEYS]


def check_model_preset(cfg: DictConfig) -> None:
    """Refuse a model preset of the image models that sets a key the LM has not (module docstring)."""
    foreign = [k for k in leaf_values(cfg.model, "model.") if k not in MODEL_KEYS and not k.startswith("model.lr.")]
    if foreign:
        name = cfg.get("choices", {}).get("model", cfg.model.get("name"))
        raise ConfigError(f"model={name} sets {foreign[0]}, which the language model does not have (a preset of the "
                          f"image models); expected one of {', '.join(building_presets())}")


def _warmup_within(v: dict[str, Any]) -> str | None:
    if v["optim.warmup_steps"] > v["train.steps"]:
        return (f"optim.warmup_steps={v['optim.warmup_steps']} is longer than train.steps={v['train.steps']}; "
                f"expected at most train.steps")
    return None


def _cutskip_reading(v: dict[str, Any]) -> str | None:
    """cutskip's Eq. 11 reading with its alpha (``models/init.py``); null keys take ``LM_CUTSKIP_DEFAULTS``."""
    if v["model.init"] != "cutskip":
        return None
    qk, alpha = v["model.init_args.qk"], v["model.init_args.alpha"]
    return qk_reading_problem(LM_CUTSKIP_DEFAULTS["qk"] if qk is None else qk,
                              LM_CUTSKIP_DEFAULTS["alpha"] if alpha is None else alpha, prefix="model.init_args.")


def _decay_keys_apply(v: dict[str, Any]) -> str | None:
    """The decayed mode's keys shape only it (``create_causal_lm`` refuses them otherwise, after the folder)."""
    if v["model.residual"] == "decayed":
        return None
    for key, kept in (("model.decay.indexing", DECAY_INDEXINGS[0]), ("model.decay.branches", DECAY_BRANCHES[0]),
                      ("model.decay.zero_init", True)):
        if v[key] != kept:
            return (f"{key}={v[key]} shapes the decayed mode and does nothing for "
                    f"model.residual={v['model.residual']}; "
                    f"expected model=decayed, or {key}={str(kept).lower()}")
    return None


def _heads_split(v: dict[str, Any]) -> str | None:
    sizes = LM_ARCHS[v["model.arch"]]
    width = v["model.embed_dim"] or sizes["embed_dim"]
    heads = v["model.num_heads"] or sizes["num_heads"]
    if width % heads or (width // heads) % 2:
        return (f"model.embed_dim={width} does not split into model.num_heads={heads} heads of an even width (RoPE "
                f"rotates pairs of coordinates); expected a width that is a multiple of 2 x heads")
    return None


RELATIONS: tuple[Callable[[dict[str, Any]], str | None], ...] = (
    _warmup_within, _cutskip_reading, _decay_keys_apply, _heads_split, shared.implementation_exists)


def check_lm_config(cfg: DictConfig) -> None:
    """Refuse the first value a language-model run cannot run with (``ConfigError``, one sentence)."""
    check_model_preset(cfg)
    check_against(cfg, RULES, RELATIONS, "skipless/language/schema.py")


__all__ = ["DATA_NAMES", "MODEL_KEYS", "RULES", "building_presets", "check_lm_config", "check_model_preset"]
