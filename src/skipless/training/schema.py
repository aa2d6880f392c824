"""What each key of a pretraining config may hold, checked before anything is written or loaded.

``RULES`` maps every key of ``configs/pretrain.yaml`` and its groups to a ``Rule``: the values it
accepts and the words that say so. It states types and ranges only; the defaults stay in the YAML
files (one place each). ``RELATIONS`` are the checks between keys (a warm-up within the training,
exports the run reaches). A method's own section (``dino:``, ``mae:``) is checked by the rules and
relations of its ``skipless.ssl.Method``, built from the same pieces (``warmup_of``, ``tiles_patches``). ``check_pretrain_config`` refuses the first bad value in one
sentence that names the key, its value and what was expected (``skipless.config.rules``, the
building blocks the evaluators' rules use too):

    train.epochs must be an integer >= 1, got 0

A key of the config without a rule is a bug of this file, or of the method's schema (a test walks
every group choice).
"""
from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Any, Callable

from omegaconf import DictConfig

from ..config import ConfigError, leaf_values
from ..config.rules import Rule, boolean, check_value, either, integer, is_int, is_real, number, one_of, optional, text
from ..models.compile import COMPILE_MODES
from ..models.init import CUTSKIP_DEFAULTS, QK_READINGS, qk_reading_problem
from ..models.vit import ARCHS
from ..optim import IMPLEMENTATIONS, OPTIMIZERS
from ..devices.world import AUGMENT_ON, world_size
from .data import DATASETS

# bf16-true / 16-true are not offered: they keep the weights, the optimizer state and DINO's EMA teacher in
# 16 bits, where an EMA at momentum 0.996 loses most of each update to rounding (training/precision.py).
PRECISIONS = ("auto", "32-true", "bf16-mixed", "16-mixed", "64-true")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")


def _pair(v: Any, item: Callable[[Any], bool]) -> bool:
    return isinstance(v, (list, tuple)) and len(v) == 2 and all(item(x) for x in v)


POSITIVE_INT = integer(1)
COUNT = integer(0)
INT = Rule(is_int, "an integer")
BOOL = boolean()
NAME = text("a non-empty name")
POSITIVE = number(0, low_open=True)
NON_NEGATIVE = number(0)
REAL = number()
UNIT = number(0, 1, high_open=False)
UNIT_OPEN = number(0, 1)
CROP_SCALE = Rule(lambda v: _pair(v, is_real) and 0 < v[0] <= v[1] <= 1,
                  "a pair [lo, hi] with 0 < lo <= hi <= 1 (fractions of the image area)")
BETAS = Rule(lambda v: _pair(v, lambda x: is_real(x) and 0 <= x < 1), "a pair [beta1, beta2], each in [0, 1)")
WORLD = either(one_of("auto"), POSITIVE_INT)

RULES: dict[str, Rule] = {
    # printable: an evaluator names the run on one line (CKPT=, tables, one-sentence errors); a newline or tab
    # in a folder name is beyond what make passes and what a message or table shows
    "run.name": optional(Rule(lambda v: isinstance(v, str) and v.strip() not in ("", ".", "..") and "/" not in v
                              and v.isprintable(), "a folder name without '/' or control characters")),
    "run.root": NAME,
    "run.seed": INT,
    "ssl": NAME,  # the method (configs/ssl/<name>.yaml); its section is checked by its Method's rules
    "run.resume": optional(either(BOOL, one_of("auto"))),  # null: auto under a scheduler (run_start.py)
    "run.requeue": either(one_of("auto"), Rule(lambda v: v is False, "false")),
    "model.name": NAME,
    # model groups of another family (configs/model/swin-s.yaml ...) set these; pretraining builds the suite's ViT
    "model.family": Rule(lambda v: v == "vit", "vit: pretraining builds the suite's ViT (model=swin-s, cait-s and "
                                               "pvt-v2-b3 are model.family=timm models for make train)"),
    "model.timm_name": optional(NAME),
    "model.timm_args": Rule(lambda v: v is None, "null: pretraining builds the suite's ViT"),
    "model.arch": NAME,  # create_vit refuses unknown names, listing the known ones
    "model.patch_size": POSITIVE_INT,
    "model.depth": optional(POSITIVE_INT),
    "model.img_size": optional(POSITIVE_INT),
    "model.residual": NAME,
    "model.init": NAME,
    "model.init_args.alpha": optional(REAL),
    "model.init_args.beta": optional(REAL),
    "model.init_args.c": optional(REAL),
    "model.init_args.center_mlp": optional(BOOL),
    "model.init_args.qk": optional(one_of(*QK_READINGS)),  # null: CUTSKIP_DEFAULTS; alpha 0: cutskip_qk_reading
    "model.alpha_min": optional(UNIT),
    "model.decay.indexing": one_of("sub_block", "layer"),
    "model.decay.branches": one_of("both", "attn", "mlp"),
    "model.decay.zero_init": BOOL,
    "model.pos_embed": one_of("learned", "sincos"),
    "model.pos_embed_interp": NAME,
    "model.attention": NAME,
    "model.attention_args.k": optional(POSITIVE),
    "model.attention_args.basis": optional(one_of("qr", "newton-schulz")),
    "model.attention_args.ns_steps": optional(POSITIVE_INT),
    "model.attention_args.alpha": optional(REAL),
    "model.norm": one_of("layernorm", "none"),
    "model.final_norm": BOOL,
    "model.token_graying.method": one_of("none", "svd", "dct"),
    "model.token_graying.eps": optional(number(0, 1, low_open=True)),
    "model.global_pool": NAME,
    "model.drop_path_rate": UNIT_OPEN,
    "model.grad_checkpointing": BOOL,
    "model.lr.*": POSITIVE,
    "optim.name": one_of(*OPTIMIZERS),
    "optim.lr": POSITIVE,
    "optim.lr_scale": POSITIVE,
    "optim.min_lr": NON_NEGATIVE,
    "optim.warmup_epochs": COUNT,
    "optim.weight_decay": NON_NEGATIVE,
    "optim.weight_decay_end": NON_NEGATIVE,
    "optim.clip_grad": NON_NEGATIVE,
    "optim.betas": BETAS,
    "optim.eps": POSITIVE,
    "optim.shampoo_beta": Rule(number(high=1).check, "a number < 1 (< 0: use optim.betas[1])"),
    "optim.precondition_frequency": POSITIVE_INT,
    "optim.max_precond_dim": POSITIVE_INT,
    "optim.precondition_1d": BOOL,
    "optim.implementation": one_of("fused", "foreach", "loop"),
    "optim.momentum": number(0, 1),  # configs/optim/sgd.yaml
    "optim.nesterov": BOOL,
    "train.epochs": POSITIVE_INT,
    "train.batch_size_per_device": POSITIVE_INT,
    "train.global_batch": optional(POSITIVE_INT),  # divisibility by the devices: world.check_global_batch
    "train.num_workers": COUNT,
    "train.cpu_threads": optional(POSITIVE_INT),  # null: skipless.devices.cpu_threads's rule
    "train.accelerator": one_of(*ACCELERATORS),
    "train.devices": WORLD,
    "train.num_nodes": POSITIVE_INT,
    "train.strategy": NAME,
    "train.collective_timeout_minutes": POSITIVE,
    "train.precision": Rule(lambda v: v in PRECISIONS,
                            f"one of {', '.join(PRECISIONS)} (16-bit weights, as bf16-true and 16-true keep them, "
                            "lose the EMA teacher's updates to rounding: use bf16-mixed or 16-mixed)"),
    "train.log_every_n_steps": POSITIVE_INT,
    "train.compile": either(BOOL, one_of(*COMPILE_MODES)),
    "train.knn_every_n_epochs": COUNT,
    "train.knn_k": POSITIVE_INT,
    "train.keep_checkpoints": BOOL,
    "train.checkpoint_every_minutes": NON_NEGATIVE,
    "train.export_epochs": Rule(lambda v: isinstance(v, (list, tuple)) and all(is_int(e) for e in v),
                                "a list of epochs, e.g. [200, 300] or []"),
    "train.max_steps": Rule(lambda v: is_int(v) and (v == -1 or v >= 1), "-1 (all epochs) or a positive integer"),
    "train.limit_train_batches": Rule(lambda v: (is_int(v) and v >= 1) or (is_real(v) and 0 < v <= 1),
                                      "a fraction in (0, 1] or a positive number of batches"),
    "diagnostics.every_n_epochs": COUNT,
    "diagnostics.signals_every_n_steps": COUNT,
    "diagnostics.layers": either(one_of("paper", "all"), Rule(lambda v: isinstance(v, (list, tuple)) and len(v) > 0
                                                     and all(is_int(b) for b in v), "a non-empty list of block indices")),
    "diagnostics.images": integer(2),
    "diagnostics.jacobian_images": COUNT,
    "diagnostics.tol": number(0, 1, low_open=True, high_open=True),
    "diagnostics.max_iter": integer(2),
    "diagnostics.dtype": one_of("float64", "float32"),
    "diagnostics.budget_s": optional(number(0, low_open=True)),
    "diagnostics.rank_images": Rule(lambda v: is_int(v) and (v == 0 or v >= 2), "0 (off) or a number of images >= 2"),
    "data.name": one_of(*DATASETS),
    "data.root": NAME,
    "data.n_train": POSITIVE_INT,
    "data.n_val": POSITIVE_INT,
    "data.seed": INT,
    "data.max_image_pixels": POSITIVE_INT,  # larger images are skipped undecoded (data/reads.py)
    "data.min_image_side": COUNT,  # smaller images are named; 0: no check
    "data.augment_on": Rule(lambda v: v in AUGMENT_ON,
                            "auto (device on CUDA, else workers), device (the colour augmentation batched on the "
                            "training device), device_crops (the crops and resizes there too) or workers (in the loader's workers)"),
}
SKIPPED = ("choices.*",)  # written by the loader (the group choices), not by a user


def rule_of(key: str, rules: dict[str, Rule] = RULES) -> Rule | None:
    """The rule of a dotted key (exact, else the first pattern that matches)."""
    return rules.get(key) or next((r for k, r in rules.items() if "*" in k and fnmatchcase(key, k)), None)


def warmup_of(key: str) -> Callable[[dict[str, Any]], str | None]:
    """The relation "the warm-up ``key`` (in epochs) fits in ``train.epochs``"; a method adds its own
    (DINO: the teacher temperature's)."""

    def within(v: dict[str, Any]) -> str | None:
        if key in v and v[key] > v["train.epochs"]:
            return (f"{key}={v[key]} is longer than train.epochs={v['train.epochs']}; expected at most "
                    f"train.epochs (set {key}={v['train.epochs']} or fewer, or train more epochs)")
        return None

    within.__name__ = f"warmup_within[{key}]"
    return within


warmup_within = warmup_of("optim.warmup_epochs")


def tiles_patches(*keys: str) -> Callable[[dict[str, Any]], str | None]:
    """The relation "each image size of ``keys`` (pixels) is a multiple of ``model.patch_size``"."""

    def tiles(v: dict[str, Any]) -> str | None:
        patch = v["model.patch_size"]
        for key in keys:
            if v[key] % patch:
                return (f"{key}={v[key]} is not a multiple of model.patch_size={patch}; expected a size the "
                        f"patches tile, e.g. {key}={max(patch, v[key] // patch * patch)}")
        return None

    tiles.__name__ = f"tiles_patches[{', '.join(keys)}]"
    return tiles


def exports_reached(v: dict[str, Any]) -> str | None:
    late = [e for e in v["train.export_epochs"] if not 1 <= e <= v["train.epochs"]]
    if late:
        return (f"train.export_epochs lists epochs {late} outside 1..train.epochs={v['train.epochs']}; "
                f"set train.export_epochs=[...] to epochs the run reaches (or [] for none)")
    return None


def diagnosed_blocks_exist(v: dict[str, Any]) -> str | None:
    depth = v["model.depth"] or ARCHS.get(v["model.arch"], {}).get("depth")
    if depth is None or v["diagnostics.layers"] in ("paper", "all"):
        return None
    outside = [b for b in v["diagnostics.layers"] if not -depth <= b < depth]
    if outside:
        return (f"diagnostics.layers lists blocks {outside} that a {depth}-block model does not have; expected "
                f"indices in 0..{depth - 1} (negative count from the end), e.g. diagnostics.layers=all")
    return None


def implementation_exists(v: dict[str, Any]) -> str | None:
    name, impl = v["optim.name"], v["optim.implementation"]
    if impl not in IMPLEMENTATIONS[name]:
        return (f"optim.implementation={impl} does not exist for {name}; expected one of "
                f"{', '.join(IMPLEMENTATIONS[name])} (optim={name} sets {IMPLEMENTATIONS[name][0]})")
    return None


def diagnostics_within_collective_timeout(v: dict[str, Any]) -> str | None:
    """Under DDP the other ranks wait for rank 0's diagnostics in their next collective, which fails after
    ``train.collective_timeout_minutes``: a budget of more than half of it is refused (null takes half)."""
    budget, timeout = v.get("diagnostics.budget_s"), float(v["train.collective_timeout_minutes"]) * 60
    world = world_size({"train": {k: v[f"train.{k}"] for k in ("accelerator", "devices", "num_nodes")}})
    if world > 1 and budget is not None and budget > timeout / 2:
        return (f"diagnostics.budget_s={budget:g} is more than half of train.collective_timeout_minutes="
                f"{v['train.collective_timeout_minutes']:g} ({timeout:g} s), and under DDP the ranks other than 0 "
                f"wait for rank 0's diagnostics in a collective that fails at that timeout; expected at most "
                f"{timeout / 2:g} (or null, which takes half), or a longer train.collective_timeout_minutes")
    return None


def cutskip_qk_reading(v: dict[str, Any]) -> str | None:
    """``model.init=cutskip`` with ``qk=head`` and ``alpha=0`` gives every head the same query and key
    matrices (``models/init.py``, ``qk_reading_problem``); null keys take ``CUTSKIP_DEFAULTS``. Other
    inits ignore ``init_args``."""
    if v["model.init"] != "cutskip":
        return None
    qk, alpha = v.get("model.init_args.qk"), v.get("model.init_args.alpha")
    return qk_reading_problem(CUTSKIP_DEFAULTS["qk"] if qk is None else qk,
                              CUTSKIP_DEFAULTS["alpha"] if alpha is None else alpha, prefix="model.init_args.")


RELATIONS: tuple[Callable[[dict[str, Any]], str | None], ...] = (
    warmup_within, exports_reached, diagnosed_blocks_exist, implementation_exists,
    diagnostics_within_collective_timeout, cutskip_qk_reading)


def check_against(cfg: DictConfig, rules: dict[str, Rule],
                  relations: tuple[Callable[[dict[str, Any]], str | None], ...], where: str) -> None:
    """Refuse the first value of ``cfg`` that breaks ``rules`` or ``relations`` (``ConfigError``, one
    sentence); a key without a rule is a bug of the schema module ``where``."""
    values = leaf_values(cfg)
    for key, value in values.items():
        if any(fnmatchcase(key, p) for p in SKIPPED):
            continue
        rule = rule_of(key, rules)
        if rule is None:
            raise LookupError(f"{key} has no rule in {where} (a bug): add one")
        check_value(key, value, rule)
    for relation in relations:
        message = relation(values)
        if message:
            raise ConfigError(message)


def check_pretrain_config(cfg: DictConfig, method_rules: dict[str, Rule] | None = None,
                          method_relations: tuple[Callable[[dict[str, Any]], str | None], ...] = ()) -> None:
    """Refuse the first value that a pretraining cannot run with (``ConfigError``, one sentence): the
    shared keys by ``RULES`` and ``RELATIONS``, the method's section by the rules and relations its
    ``skipless.ssl.Method`` brings (this module knows no method's keys)."""
    check_against(cfg, {**RULES, **(method_rules or {})}, RELATIONS + tuple(method_relations),
                  "skipless/training/schema.py or the method's schema")
