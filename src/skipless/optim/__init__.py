"""Optimizers and schedules of DINO pretraining.

``build_optimizer`` turns the ``optim`` config group into an optimizer: AdamW (Loshchilov & Hutter,
ICLR 2019; PyTorch's, fused on GPU) or SOAP (Vyas et al., ICLR 2025; ours, ``soap.py``).
``schedules.py`` holds DINO's per-step cosine and warm-up schedules; the training loop writes their
values into each param group's ``lr`` / ``weight_decay`` before every step, which both optimizers read.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from .schedules import cosine_schedule, linear_then_constant
from .soap import SOAP


def _as_groups(param_groups: Iterable[Any]) -> list[Any]:
    """Parameters or group dicts, with every group's ``params`` a list (generators are read once)."""
    groups = []
    for g in param_groups:
        if isinstance(g, dict):
            params = g["params"]
            g = {**g, "params": [params] if isinstance(params, Tensor) else list(params)}
        groups.append(g)
    return groups


def _params(param_groups: list[Any]) -> list[Tensor]:
    return [p for g in param_groups for p in (g["params"] if isinstance(g, dict) else [g])]


def _adamw(param_groups: list[Any], *, lr: float, betas: tuple[float, float], eps: float,
           weight_decay: float, **extra: Any) -> torch.optim.Optimizer:
    if extra:
        raise ValueError("adamw takes no options besides lr, betas, eps, weight_decay; "
                         f"got: {', '.join(sorted(extra))}")
    on_cuda = all(p.is_cuda for p in _params(param_groups))
    return torch.optim.AdamW(param_groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                             **({"fused": True} if on_cuda else {}))


def _soap(param_groups: list[Any], *, lr: float, betas: tuple[float, float], eps: float,
          weight_decay: float, **soap_kwargs: Any) -> torch.optim.Optimizer:
    return SOAP(param_groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, **soap_kwargs)


OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {"adamw": _adamw, "soap": _soap}


def build_optimizer(name: str, param_groups: Iterable[Any], *, lr: float, betas: tuple[float, float],
                    eps: float, weight_decay: float, **soap_kwargs: Any) -> torch.optim.Optimizer:
    """The optimizer ``name`` (a key of ``OPTIMIZERS``) over ``param_groups``.

    Args:
        name: ``adamw`` or ``soap``.
        param_groups: parameters or param-group dicts (e.g. weights with decay, biases/norms without).
        lr: initial learning rate (the schedule overwrites it every step).
        betas: Adam's ``(beta1, beta2)``.
        eps: Adam's epsilon.
        weight_decay: initial decoupled weight decay (the schedule overwrites it every step).
        **soap_kwargs: SOAP-only options (``shampoo_beta``, ``precondition_frequency``,
            ``max_precond_dim``, ``precondition_1d``, ``normalize_grads``, ``correct_bias``).

    Raises:
        ValueError: for an unknown name, or SOAP options given to AdamW.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{name}'; expected one of: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[name](_as_groups(param_groups), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                            **soap_kwargs)


__all__ = ["OPTIMIZERS", "SOAP", "build_optimizer", "cosine_schedule", "linear_then_constant"]
