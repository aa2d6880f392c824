"""Condition numbers of a convolutional network's block Jacobians, with and without the shortcut.

Ji et al. ("Cutting the Skip", Eq. 7, Table 6) measure ``kappa(K K^T)`` of each ViT sub-block with the
shortcut's ``g I`` added (``jacobians.py``). "Always Skip Attention" (seeds/003, Sec. 4, App. B) argues that a
convolution, unlike self-attention, is well conditioned on its own, which is why a ConvMixer trains without its
skips; Zhang et al. (seeds/002, Sec. 5.1) decay a ResNet's shortcuts. This file measures the same quantity on
those networks' blocks (``timm_family.feature_blocks``), at each block's own input ``x`` for one image:

* ``branch``: ``kappa(K K^T)``, ``K = d f(x) / dx``: the residual branch alone, the block without its shortcut;
* ``block``: ``kappa(A A^T)``, ``A = d (g s(x) + f(x)) / dx``: the block as the model wires it, ``g = 1`` with a
  skip, ``0`` without one (then ``A = K``), a decayed ResNet's ``alpha_l`` (``timm_family.shortcut_gain``). ``s``
  is the identity, or the stage's strided 1 x 1 projection where a ResNet block changes size (``A`` is then wide:
  half as many outputs as inputs, and ``A A^T`` has the output's size).

Where each is read:

* A ResNet block (``BasicBlock``, ``Bottleneck``) before its last ReLU. That ReLU's Jacobian is a 0/1 diagonal,
  zero on every unit it switches off, so with it ``kappa`` is ∞ for almost every input and says nothing: the
  same reason the ViT's ``K`` is read after its LayerNorm. At initialisation a ResNet's branch is zero (timm's
  ``zero_init_last``, seeds/002 Sec. 3.2), so ``K = 0``: ``branch`` is ∞ and ``block`` is ``kappa(g^2 I) = 1``.
* A ConvMixer layer is ``Residual(BN(GELU(depthwise conv)))`` followed by a pointwise convolution, GELU and BN
  (seeds/003 Eq. 22); the skip goes around the first part only, and that sub-block is what is measured.

Matrix-free Lanczos on ``A A^T`` (``jacobians.gram_matvec``, ``condition_number.py``'s rules for ∞), on a float
copy of the model in eval mode (BatchNorm is then a fixed per-channel affine map); ``*_dense`` forms ``A`` with
``jacrev`` for small inputs (the tests' reference and ``dense_check``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn
from torch.func import jacrev

from ..models.timm_family import ShortcutGain, feature_blocks, resnet_blocks, shortcut_gain
from .condition_number import DIVERGED, OVERFLOW, Condition, Solver, infinite_condition, operator_condition
from .jacobians import JacobianArgumentError, check_dense_size, float_copy, gram_matvec
from .sub_blocks import has_finite_weights

__all__ = ["MAPS", "BlockMaps", "ConvBlockCondition", "block_inputs", "block_maps", "conv_block_conditions",
           "conv_block_jacobian_dense"]

MAPS = ("branch", "block")
Watch = Callable[[int, float, float, float, float], bool]  # lanczos.extreme_eigenvalues' watch


class _NoShortcut(nn.Module):
    """A ResNet block's ``downsample`` that makes its shortcut zero (``x += 0``): the branch alone, with the
    shortcut's output shape."""

    def __init__(self, shortcut: nn.Module | None) -> None:
        super().__init__()
        self.shortcut = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x if self.shortcut is None else self.shortcut(x))


@dataclass
class BlockMaps:
    """One feature block taken apart: ``block(x) = g s(x) + f(x)`` and ``branch(x) = f(x)`` (module docstring)."""

    block: nn.Module
    branch: nn.Module
    gain: float
    projection: bool  # s is a learned projection (a ResNet stage's first block), not the identity


def block_maps(block: nn.Module) -> BlockMaps:
    """The two maps of one of ``feature_blocks``' blocks, as copies (``block`` is not modified)."""
    if resnet_blocks(block):
        from timm.models.resnet import Bottleneck

        with_shortcut = copy.deepcopy(block)
        setattr(with_shortcut, "act3" if isinstance(block, Bottleneck) else "act2", nn.Identity())
        branch = copy.deepcopy(with_shortcut)
        branch.downsample = _NoShortcut(branch.downsample)
        projection = block.downsample is not None and not isinstance(block.downsample, ShortcutGain)
        return BlockMaps(with_shortcut, branch, shortcut_gain(block), projection)
    first = block[0] if isinstance(block, nn.Sequential) and len(block) else None
    if first is not None and hasattr(first, "fn"):  # timm's Residual, or the suite's WithoutSkip (its fn alone)
        return BlockMaps(copy.deepcopy(first), copy.deepcopy(first.fn), shortcut_gain(block), False)
    raise JacobianArgumentError(f"a {type(block).__name__} is neither a ResNet block nor a ConvMixer layer; the "
                                "conditioning of CNN blocks reads those two")


def block_inputs(model: nn.Module, image: torch.Tensor, blocks: Iterable[int]) -> dict[int, torch.Tensor]:
    """The input of each of ``blocks`` (indices into ``feature_blocks(model)``) in one forward of ``image``."""
    found = feature_blocks(model)
    wanted = sorted(set(int(b) for b in blocks))
    if not wanted or wanted[0] < 0 or wanted[-1] >= len(found):
        raise JacobianArgumentError(f"blocks must be indices in 0..{len(found) - 1}, got {wanted}")
    inputs: dict[int, torch.Tensor] = {}
    hooks = [found[i].register_forward_pre_hook(lambda module, args, i=i: inputs.__setitem__(i, args[0].detach()))
             for i in wanted]
    try:
        with torch.no_grad():
            model(image)
    finally:
        for hook in hooks:
            hook.remove()
    return inputs


@dataclass
class ConvBlockCondition:
    """One block's two condition numbers (``MAPS``), its shortcut gain and the size of its input."""

    gain: float
    projection: bool
    input_shape: tuple[int, ...]
    branch: Condition
    block: Condition

    def to_json(self) -> dict:
        return {"gain": self.gain, "projection": self.projection, "input_shape": list(self.input_shape),
                "branch": self.branch.to_json(), "block": self.block.to_json()}


def _one_image(image: torch.Tensor) -> torch.Tensor:
    image = image.unsqueeze(0) if image.ndim == 3 else image
    if image.ndim != 4 or image.shape[0] != 1:
        raise JacobianArgumentError(f"expected one image of shape (1, C, H, W), got {tuple(image.shape)}")
    return image


def _prepared(model: nn.Module, image: torch.Tensor, blocks: Iterable[int], dtype: torch.dtype):
    net = float_copy(model, dtype)
    image = _one_image(image).to(next(net.parameters()).device, dtype)
    return net, block_inputs(net, image, blocks)


def conv_block_conditions(
    model: nn.Module,
    image: torch.Tensor,
    blocks: Iterable[int],
    solver: Solver = Solver(),
    *,
    watches: Callable[[str], Watch | None] | None = None,
) -> dict[int, ConvBlockCondition]:
    """``{block: ConvBlockCondition}`` for one image: both maps of every wanted block (module docstring).

    ``watches`` gives each solve its Lanczos ``watch`` from its name (``kappa_branch/block3``: ``solve_budget.py``).
    """
    net, inputs = _prepared(model, image, blocks, solver.dtype)
    result: dict[int, ConvBlockCondition] = {}
    finite = has_finite_weights(net)
    found = feature_blocks(net)
    for i, x in inputs.items():
        maps = block_maps(found[i])
        conditions: dict[str, Condition] = {}
        for name in MAPS:
            f = getattr(maps, name)
            if not finite:
                conditions[name] = infinite_condition(DIVERGED, x.numel())
                continue
            with torch.no_grad():
                out = f(x)
            if not (bool(torch.isfinite(x).all()) and bool(torch.isfinite(out).all())):
                conditions[name] = infinite_condition(OVERFLOW, out.numel())
                continue
            matvec, dim = gram_matvec(f, x)
            conditions[name] = operator_condition(
                matvec, dim, solver, device=x.device,
                watch=None if watches is None else watches(f"kappa_{name}/block{i}"))
        result[i] = ConvBlockCondition(maps.gain, maps.projection, tuple(x.shape[1:]), **conditions)
    return result


def conv_block_jacobian_dense(model: nn.Module, image: torch.Tensor, block: int, which: str = "block", *,
                              max_entries: float = 20_000_000, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The dense ``A`` (``which="block"``) or ``K`` (``"branch"``) of one block at ``image``, outputs x inputs."""
    if which not in MAPS:
        raise JacobianArgumentError(f"which must be one of {', '.join(MAPS)}, got {which!r}")
    net, inputs = _prepared(model, image, [block], dtype)
    x = inputs[int(block)]
    f = getattr(block_maps(feature_blocks(net)[int(block)]), which)
    with torch.no_grad():
        rows = f(x).numel()
    check_dense_size(rows, x.numel(), max_entries, "the image size")
    return jacrev(f)(x).reshape(rows, x.numel())

