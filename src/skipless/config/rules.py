"""Rules for config values, shared by every entry point: key -> (check, what is expected).

The pretraining schema (``training/schema.py``) and the evaluators' tables (``eval/shared/settings_rules.py``)
build their rules from these pieces, so every bad value reads the same, one sentence that names the
key, its value and what was expected:

    train.epochs must be an integer >= 1, got 0
    lrs must be a non-empty list of finite numbers > 0, got [nan]

A rule's ``check`` takes the plain value (lists as Python lists) and returns True when it is valid.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from omegaconf import DictConfig, ListConfig, OmegaConf

from . import ConfigError


@dataclass(frozen=True)
class Rule:
    """A valid value: ``check(value)`` is True; ``expected`` completes "<key> must be ..."."""

    check: Callable[[Any], bool]
    expected: str


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: Any) -> bool:
    """A finite int or float (NaN, inf and booleans are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def integer(low: int) -> Rule:
    """An integer >= ``low``."""
    return Rule(lambda v: is_int(v) and v >= low, f"an integer >= {low}")


def number(low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = True) -> Rule:
    """A finite number between ``low`` and ``high`` (None: no bound there); NaN and inf fail."""
    def check(v: Any) -> bool:
        if not is_real(v):
            return False
        above = low is None or (v > low if low_open else v >= low)
        below = high is None or (v < high if high_open else v <= high)
        return above and below

    if low is None and high is None:
        text_ = "a finite number"
    elif high is None:
        text_ = f"a finite number {'>' if low_open else '>='} {low:g}"
    elif low is None:
        text_ = f"a number {'<' if high_open else '<='} {high:g}"
    else:
        text_ = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return Rule(check, text_)


def one_of(*choices: Any) -> Rule:
    """One of ``choices`` (compared as text, so ``multiscale: 1`` matches ``"1"``)."""
    names = [str(c) for c in choices]
    return Rule(lambda v: not isinstance(v, (list, dict, bool)) and str(v) in names,
                names[0] if len(names) == 1 else f"one of {', '.join(names)}")


def boolean() -> Rule:
    return Rule(lambda v: isinstance(v, bool), "true or false")


def text(what: str = "a non-empty text") -> Rule:
    """A non-empty string (a name, a path, a split)."""
    return Rule(lambda v: isinstance(v, str) and v.strip() != "", what)


def optional(rule: Rule) -> Rule:
    """null, or a value of ``rule``."""
    return Rule(lambda v: v is None or rule.check(v), f"null or {rule.expected}")


def non_empty_list(rule: Rule, plural: str) -> Rule:
    """A non-empty list whose every item follows ``rule``; ``plural`` describes the items."""
    return Rule(lambda v: isinstance(v, list) and len(v) > 0 and all(rule.check(x) for x in v),
                f"a non-empty list of {plural}")


def either(*rules: Rule) -> Rule:
    return Rule(lambda v: any(r.check(v) for r in rules), " or ".join(r.expected for r in rules))


def plain(value: Any) -> Any:
    """A config value as plain Python (lists and mappings resolved)."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def shown(value: Any) -> str:
    """A value as the user types it: ``0``, ``2.0``, ``nan``, ``[0.9, 1.0]``, ``true``, ``null``, ``'ram'``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)  # 2.0 stays 2.0 (not an integer), nan and inf as typed
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    return repr(value)


def check_value(key: str, value: Any, rule: Rule) -> None:
    """Raise the one-sentence ``ConfigError`` when ``value`` breaks ``rule``."""
    if not rule.check(value):
        raise ConfigError(f"{key} must be {rule.expected}, got {shown(value)}")
