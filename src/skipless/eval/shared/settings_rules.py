"""The rule of every evaluator setting, as a table: key -> (check, what is expected).

The building blocks (``Rule``, ``integer``, ``number`` ...) are ``skipless.config.rules``, shared with
the pretraining schema; this module adds the keys every evaluator has and ``check_rules``.

Each evaluator (``eval.probe.settings``, ``eval.tokencut.run``, ``eval.pca.run``) lists its keys once, with
a rule built here, and calls ``check_rules`` before it resolves a backbone, reads data or writes a file. A bad
value stops the run with one ``ConfigError`` sentence that names the key, its value and what was
expected: ``epochs must be an integer >= 1, got 0``; ``lrs must be a non-empty list of finite
numbers > 0, got [nan]``. What needs the backbone (a block index in range, a size that is a multiple
of the patch) is checked per backbone by the evaluator, still before its features are computed.

A rule's ``check`` takes the plain value (lists as Python lists) and returns True when it is valid.
"""
from __future__ import annotations

from typing import Mapping

from omegaconf import DictConfig, OmegaConf

from skipless.config import ConfigError
from skipless.config.rules import (Rule, boolean, check_value, either, integer, is_int, non_empty_list, one_of, optional,
                                   plain, text)



# Shared by every evaluator (the keys that "mean the same" in probe.yaml, tokencut.yaml and pca.yaml).
BLOCK = Rule(is_int, "a block index (an integer; -1 is the last)")
BLOCKS = either(BLOCK, non_empty_list(BLOCK, "block indices"))
BLOCKS_OR_ALL = either(one_of("all"), BLOCKS)
# ckpt: `make` passes ckpt="" when CKPT is not set, which means the newest run, as null does.
CKPT = Rule(lambda v: v is None or isinstance(v, str) or non_empty_list(text(), "").check(v),
            "null, a text of checkpoint items or a list of them")
COMMON = {
    "ckpt": CKPT,
    "runs_root": text(),
    "out": optional(text()),
    "seed": integer(0),
    "device": text(),  # its name is checked by eval.shared.devices.resolve_device
    "norm": boolean(),
    "cpu_threads": optional(integer(1)),  # null: skipless.devices.cpu_threads's rule
    "random_floor": boolean(),            # one backbone given: its random init beside it (output_dirs.py)
}


def check_rules(cfg: DictConfig, rules: Mapping[str, Rule]) -> None:
    """Raise ``ConfigError`` on the first key (dotted paths allowed) whose value breaks its rule."""
    for key, rule in rules.items():
        check_value(key, plain(OmegaConf.select(cfg, key, throw_on_missing=False)), rule)


def require_feature_out_for_norm(cfg: DictConfig) -> None:
    """``norm`` applies the final LayerNorm to block outputs only; with another feature it would do nothing."""
    if cfg.norm and cfg.feature != "out":
        raise ConfigError(f"norm=true applies to feature=out only, got feature={cfg.feature!r}; "
                          "set norm=false or feature=out")
