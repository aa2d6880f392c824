"""The rule of every evaluator setting, as a table: key -> (check, what is expected).

Each evaluator (``probe_settings``, ``tokencut``, ``pca``) lists its keys once, with a rule built
here, and calls ``check_rules`` before it resolves a backbone, reads data or writes a file. A bad
value stops the run with one ``ConfigError`` sentence that names the key, its value and what was
expected: ``epochs must be an integer >= 1, got 0``; ``lrs must be a non-empty list of finite
numbers > 0, got [nan]``. What needs the backbone (a block index in range, a size that is a multiple
of the patch) is checked per backbone by the evaluator, still before its features are computed.

A rule's ``check`` takes the plain value (lists as Python lists) and returns True when it is valid.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from omegaconf import DictConfig, ListConfig, OmegaConf

from skipless.config import ConfigError


@dataclass(frozen=True)
class Rule:
    """A valid value: ``check(value)`` is True; ``expected`` completes "<key> must be ..."."""

    check: Callable[[Any], bool]
    expected: str


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def integer(low: int) -> Rule:
    """An integer >= ``low``."""
    return Rule(lambda v: _is_int(v) and v >= low, f"an integer >= {low}")


def number(low: float, high: float | None = None, low_open: bool = False, high_open: bool = True) -> Rule:
    """A finite number in the interval from ``low`` to ``high`` (None: no upper end); NaN and inf fail."""
    def check(v: Any) -> bool:
        if not _is_number(v) or not math.isfinite(v):
            return False
        above = v > low if low_open else v >= low
        below = high is None or (v < high if high_open else v <= high)
        return above and below

    if high is None:
        text = f"a finite number {'>' if low_open else '>='} {low:g}"
    else:
        text = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return Rule(check, text)


def one_of(*choices: Any) -> Rule:
    """One of ``choices`` (compared as text, so ``multiscale: 1`` matches ``"1"``)."""
    names = [str(c) for c in choices]
    return Rule(lambda v: not isinstance(v, (list, dict)) and str(v) in names,
                names[0] if len(names) == 1 else f"one of {', '.join(names)}")


def boolean() -> Rule:
    return Rule(lambda v: isinstance(v, bool), "true or false")


def text() -> Rule:
    """A non-empty string (a path, a split name)."""
    return Rule(lambda v: isinstance(v, str) and v.strip() != "", "a non-empty text")


def optional(rule: Rule) -> Rule:
    """null, or a value of ``rule``."""
    return Rule(lambda v: v is None or rule.check(v), f"null or {rule.expected}")


def non_empty_list(rule: Rule, plural: str) -> Rule:
    """A non-empty list whose every item follows ``rule``; ``plural`` describes the items."""
    return Rule(lambda v: isinstance(v, list) and len(v) > 0 and all(rule.check(x) for x in v),
                f"a non-empty list of {plural}")


def either(*rules: Rule) -> Rule:
    return Rule(lambda v: any(r.check(v) for r in rules), " or ".join(r.expected for r in rules))


# Shared by every evaluator (the keys that "mean the same" in probe.yaml, tokencut.yaml and pca.yaml).
BLOCK = Rule(_is_int, "a block index (an integer; -1 is the last)")
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
    "device": text(),  # its name is checked by eval.devices.resolve_device
    "norm": boolean(),
}


def plain(value: Any) -> Any:
    """A config value as plain Python (lists and mappings resolved)."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def shown(value: Any) -> str:
    """A value as the user would type it: ``0``, ``nan``, ``[nan]``, ``'ram'``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return repr(value)


def check_rules(cfg: DictConfig, rules: Mapping[str, Rule]) -> None:
    """Raise ``ConfigError`` on the first key (dotted paths allowed) whose value breaks its rule."""
    for key, rule in rules.items():
        value = plain(OmegaConf.select(cfg, key, throw_on_missing=False))
        if not rule.check(value):
            raise ConfigError(f"{key} must be {rule.expected}, got {shown(value)}")


def require_feature_out_for_norm(cfg: DictConfig) -> None:
    """``norm`` applies the final LayerNorm to block outputs only; with another feature it would do nothing."""
    if cfg.norm and cfg.feature != "out":
        raise ConfigError(f"norm=true applies to feature=out only, got feature={cfg.feature!r}; "
                          "set norm=false or feature=out")
