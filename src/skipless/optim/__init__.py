"""Optimizers and schedules of every training run (DINO, MAE, supervised).

``build_optimizer`` turns the ``optim`` config group into an optimizer: AdamW (Loshchilov & Hutter,
ICLR 2019; PyTorch's) or SOAP (Vyas et al., ICLR 2025; ours, ``soap.py``). ``optim.implementation``
says how the same update is computed: ``fused`` (AdamW: one kernel for all parameters, on CPU and
GPU), ``foreach`` (AdamW: PyTorch's multi-tensor path; SOAP: parameters of one shape batched) or
``loop`` (one parameter at a time). The numbers agree to float tolerance (tests/test_optim_soap.py,
tests/test_optim_implementation.py); the speed of each is in ``make bench --only optim``.
``schedules.py`` holds the per-step cosine and warm-up schedules (DINO's, and MAE's warm-up); the
training loop writes their values into each param group's ``lr`` / ``weight_decay`` before every step,
which both optimizers read.
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


# What each optimizer can run; the first is its default (``configs/optim/<name>.yaml`` states it too).
IMPLEMENTATIONS = {"adamw": ("fused", "foreach", "loop"), "soap": ("loop", "foreach")}
_ADAMW_FLAGS = {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}


def _adamw(param_groups: list[Any], *, lr: float, betas: tuple[float, float], eps: float,
           weight_decay: float, implementation: str = "fused", **extra: Any) -> torch.optim.Optimizer:
    if extra:
        raise ValueError("adamw takes no options besides lr, betas, eps, weight_decay, implementation; "
                         f"got: {', '.join(sorted(extra))}")
    return torch.optim.AdamW(param_groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                             **_ADAMW_FLAGS[implementation])


def _soap(param_groups: list[Any], *, lr: float, betas: tuple[float, float], eps: float,
          weight_decay: float, implementation: str = "loop", **soap_kwargs: Any) -> torch.optim.Optimizer:
    return SOAP(param_groups, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                foreach=implementation == "foreach", **soap_kwargs)


OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {"adamw": _adamw, "soap": _soap}


def build_optimizer(name: str, param_groups: Iterable[Any], *, lr: float, betas: tuple[float, float],
                    eps: float, weight_decay: float, implementation: str | None = None,
                    **soap_kwargs: Any) -> torch.optim.Optimizer:
    """The optimizer ``name`` (a key of ``OPTIMIZERS``) over ``param_groups``.

    Args:
        name: ``adamw`` or ``soap``.
        param_groups: parameters or param-group dicts (e.g. weights with decay, biases/norms without).
        lr: initial learning rate (the schedule overwrites it every step).
        betas: Adam's ``(beta1, beta2)``.
        eps: Adam's epsilon.
        weight_decay: initial decoupled weight decay (the schedule overwrites it every step).
        implementation: one of ``IMPLEMENTATIONS[name]``; None: the first (the measured default).
        **soap_kwargs: SOAP-only options (``shampoo_beta``, ``precondition_frequency``,
            ``max_precond_dim``, ``precondition_1d``, ``normalize_grads``, ``correct_bias``).

    Raises:
        ValueError: for an unknown name or implementation, or SOAP options given to AdamW.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{name}'; expected one of: {', '.join(OPTIMIZERS)}")
    implementation = implementation or IMPLEMENTATIONS[name][0]
    if implementation not in IMPLEMENTATIONS[name]:
        raise ValueError(f"{name} has no '{implementation}' implementation; expected one of: "
                         f"{', '.join(IMPLEMENTATIONS[name])}")
    return OPTIMIZERS[name](_as_groups(param_groups), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                            implementation=implementation, **soap_kwargs)


SOAP_KEYS = ("shampoo_beta", "precondition_frequency", "max_precond_dim", "precondition_1d")


def optimizer_from_config(o: Any, param_groups: Iterable[Any], lr: float) -> torch.optim.Optimizer:
    """The optimizer of an ``optim`` config group (pretraining's and supervised training's) at ``lr``."""
    extra = {k: o[k] for k in SOAP_KEYS} if o.name == "soap" else {}
    return build_optimizer(o.name, param_groups, lr=lr, betas=tuple(o.betas), eps=o.eps,
                           weight_decay=o.weight_decay, implementation=o.implementation, **extra)


__all__ = ["IMPLEMENTATIONS", "OPTIMIZERS", "SOAP", "build_optimizer", "cosine_schedule", "linear_then_constant",
           "optimizer_from_config"]
