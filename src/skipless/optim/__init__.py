"""Optimizers and schedules of every training run (DINO, MAE, supervised).

``build_optimizer`` turns the ``optim`` config group into an optimizer: AdamW (Loshchilov & Hutter,
ICLR 2019; PyTorch's), SOAP (Vyas et al., ICLR 2025; ours, ``soap.py``) or SGD with momentum (PyTorch's; its
weight decay is L2 added to the gradient, as in the ResNet recipes, not AdamW's decoupled one). ``optim.implementation``
says how the same update is computed: ``fused`` (AdamW: one kernel for all parameters, on CPU and
GPU), ``foreach`` (AdamW: PyTorch's multi-tensor path; SOAP: parameters of one shape batched) or
``loop`` (one parameter at a time). The numbers agree to float tolerance (tests/test_optim_soap.py,
tests/test_optim_implementation.py); the speed of each is in ``make bench --only optim``.
``schedules.py`` holds the per-step cosine and warm-up schedules (DINO's, and MAE's warm-up) and the
step schedule of the ResNet recipes (``step_schedule``); the
training loop writes their values into each param group's ``lr`` / ``weight_decay`` before every step,
which both optimizers read.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from .schedules import cosine_schedule, linear_then_constant, step_schedule
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
IMPLEMENTATIONS = {"adamw": ("fused", "foreach", "loop"), "soap": ("loop", "foreach"), "sgd": ("foreach", "loop")}
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


def _sgd(param_groups: list[Any], *, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
         implementation: str = "foreach", momentum: float = 0.0, nesterov: bool = False) -> torch.optim.Optimizer:
    # betas and eps are Adam's: SGD has neither (configs/optim/sgd.yaml says so)
    return torch.optim.SGD(param_groups, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay,
                           foreach=implementation == "foreach")


OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {"adamw": _adamw, "soap": _soap, "sgd": _sgd}


def build_optimizer(name: str, param_groups: Iterable[Any], *, lr: float, betas: tuple[float, float],
                    eps: float, weight_decay: float, implementation: str | None = None,
                    **soap_kwargs: Any) -> torch.optim.Optimizer:
    """The optimizer ``name`` (a key of ``OPTIMIZERS``) over ``param_groups``.

    Args:
        name: ``adamw``, ``soap`` or ``sgd``.
        param_groups: parameters or param-group dicts (e.g. weights with decay, biases/norms without).
        lr: initial learning rate (the schedule overwrites it every step).
        betas: Adam's ``(beta1, beta2)`` (SGD: unused).
        eps: Adam's epsilon (SGD: unused).
        weight_decay: initial decoupled weight decay (the schedule overwrites it every step).
        implementation: one of ``IMPLEMENTATIONS[name]``; None: the first (the measured default).
        **soap_kwargs: SOAP-only options (``shampoo_beta``, ``precondition_frequency``,
            ``max_precond_dim``, ``precondition_1d``, ``normalize_grads``, ``correct_bias``), or SGD's
            (``momentum``, ``nesterov``).

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
SGD_KEYS = ("momentum", "nesterov")
OWN_KEYS = {"soap": SOAP_KEYS, "sgd": SGD_KEYS}  # each optimizer's keys of configs/optim/<name>.yaml


def optimizer_from_config(o: Any, param_groups: Iterable[Any], lr: float) -> torch.optim.Optimizer:
    """The optimizer of an ``optim`` config group (pretraining's and supervised training's) at ``lr``."""
    extra = {k: o[k] for k in OWN_KEYS.get(o.name, ())}
    return build_optimizer(o.name, param_groups, lr=lr, betas=tuple(o.betas), eps=o.eps,
                           weight_decay=o.weight_decay, implementation=o.implementation, **extra)


__all__ = ["IMPLEMENTATIONS", "OPTIMIZERS", "SOAP", "build_optimizer", "cosine_schedule", "linear_then_constant",
           "optimizer_from_config", "step_schedule"]
