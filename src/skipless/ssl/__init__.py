"""Self-supervised methods, one sub-package each, and the table ``make pretrain SSL=<name>`` reads.

What a method must provide is written once in ``method.py`` (``Method``); ``METHODS`` maps each
``ssl=`` name (``configs/ssl/<name>.yaml``) to its entry, and ``method_of`` refuses an unknown name
listing the known ones.
"""
from __future__ import annotations

from collections.abc import Mapping

from ..config import ConfigError
from .dino.module import METHOD as DINO_METHOD
from .mae.module import METHOD as MAE_METHOD
from .method import Method

METHODS: dict[str, Method] = {m.name: m for m in (DINO_METHOD, MAE_METHOD)}


def method_of(cfg: Mapping) -> Method:
    """The method a pretraining config names (``ssl``; configs saved before the key existed are DINO's)."""
    name = str(cfg.get("ssl", "dino"))
    if name not in METHODS:
        raise ConfigError(f"unknown ssl method {name!r}; expected one of: {', '.join(METHODS)}")
    return METHODS[name]


__all__ = ["METHODS", "Method", "method_of"]
