"""Other vision transformers from timm, trained by ``make train`` with their skips and, optionally, token graying.

"Always Skip Attention" (seeds/003, Section 6.1, Table 4) applies DCT token graying to Swin-S (patch 4,
window 7), CaiT-S (24 layers) and PVTv2-b3 trained on ImageNet-1k with timm. Here such a model is
``model.family=timm``: ``timm.create_model(model.timm_name, num_classes=0, **model.timm_args)`` (a mapping), timm's own
init, skips and parameter names (a timm state dict of the same name loads as it is), with graying as a
forward pre-hook on the model's ``patch_embed``: the images are grayed on the grid of ``model.patch_size``
patches just before the stem reads them, as ``token_graying.GrayedPatchEmbed`` does for our ViT. For Swin
and CaiT that grid is the stem's own patches (4 and 16 px); PVTv2's stem is an overlapping 7 x 7
convolution of stride 4, whose tokens are not disjoint patches, and the graying runs on the stride's 4-px
grid, which tiles the image as its tokens do (the seed does not say what it did there).

ConvMixer (Trockman & Kolter 2022; seeds/003 App. B trains it with and without its skips) is one too: timm's
``ConvMixer`` at the sizes of ``model.timm_args``, and ``model.residual=skipless`` replaces each of its
``Residual`` wrappers by ``WithoutSkip`` (same parameter names), the suite's one kind of removable skip in a
timm model.

Only supervised training builds these (``supervised/classifier.py``); the backbone file they export says
``family: timm`` and loads strictly from its arguments (``backbone_from_args``, ``checkpoint.load_backbone``).
k-NN, linear and t-SNE read its pooled feature (``model(x)``, timm's ``num_classes=0`` output), the effective
rank reads its blocks' pooled outputs and the conditioning their Jacobians (``feature_blocks``); the evaluators of
ViT tokens, ``make finetune`` and pretraining refuse it in one sentence (``backbone_items.resolve_backbones``, the
schemas).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import timm
import torch
from timm.models.convmixer import ConvMixer, Residual
from torch import nn

from .decay import DEFAULT_ALPHA_MIN, block_gains
from .token_graying import DEFAULT_EPS, check_graying, gray_images

FAMILIES = ("vit", "timm")
RESIDUALS = ("skip", "skipless", "decayed")  # what model.residual may be for a timm model (create_timm_backbone)
# timm classes built from their constructor's arguments alone (model.timm_args), for a model whose registered
# names fix its sizes (timm's convmixer_768_32 ... refuse another dim or depth)
TIMM_CLASSES: dict[str, Callable[..., nn.Module]] = {"convmixer": ConvMixer}


class TimmFamilyError(ValueError):
    """A timm model name or constructor arguments that cannot be built."""


def timm_kwargs(args: Mapping[str, Any] | None) -> dict[str, Any]:
    """``model.timm_args`` (a mapping, e.g. ``{embed_dim: 48, depths: [1, 1, 1, 1]}``) as keyword arguments of
    timm's constructor; lists become tuples, as timm's signatures write them."""
    return {str(k): tuple(v) if isinstance(v, (list, tuple)) else v for k, v in dict(args or {}).items()}


class WithoutSkip(nn.Module):
    """timm's ``Residual(fn)`` (``fn(x) + x``) without the ``+ x``: the same parameter names (``fn.*``), so the
    skip model's weights load into it and the other way round."""

    def __init__(self, fn: nn.Module) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


def remove_skips(model: nn.Module, timm_name: str) -> int:
    """Replace every timm ``Residual`` wrapper of ``model`` (ConvMixer's skip around its depthwise convolution,
    seeds/003 App. B, Eq. 22) by ``WithoutSkip``; returns how many. A model whose skips are written inside its
    blocks' ``forward`` (Swin, CaiT, PVT, ResNet) has none to replace and is refused in one sentence."""
    found = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if isinstance(child, Residual)]
    if not found:
        raise TimmFamilyError(f"{timm_name} has no skip the suite can remove (its skips are inside its blocks' "
                              "forward); expected model.residual=skip, or a ConvMixer (model=convmixer-skipless)")
    for parent, name, child in found:
        setattr(parent, name, WithoutSkip(child.fn))
    return len(found)


class ShortcutGain(nn.Module):
    """``alpha * x``: an identity block's shortcut made seeds/002's decayed one (Eq. 3), as the block's
    ``downsample`` (which timm's ResNet blocks apply to their shortcut); the gain is a non-persistent buffer,
    rebuilt from ``model.alpha_min``, so the state dict stays timm's."""

    def __init__(self, gain: float) -> None:
        super().__init__()
        self.register_buffer("gain", torch.tensor(float(gain)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain


def resnet_blocks(model: nn.Module) -> list[nn.Module]:
    """A timm ResNet's residual blocks (``BasicBlock``, ``Bottleneck``) in forward order; [] for another model."""
    from timm.models.resnet import BasicBlock, Bottleneck

    return [m for m in model.modules() if isinstance(m, (BasicBlock, Bottleneck))]


def decay_shortcuts(model: nn.Module, timm_name: str, alpha_min: float, indexing: str) -> torch.Tensor:
    """seeds/002 Sec. 5.1: every residual block of a timm ResNet (``BasicBlock``, ``Bottleneck``) takes
    ``x_{l+1} = act(alpha_l s(x_l) + f(x_l))``, ``alpha_l`` from ``decay.block_gains`` over the blocks in forward
    order; ``s`` is the identity, or the stage's projection where the block changes size (its output scaled the
    same way: the seed does not single those out). timm's ``zero_init_last`` already zeroes each branch's last
    norm, the seed's zero-initialised branch outputs (Sec. 3.2). Returns the gains."""
    blocks = resnet_blocks(model)
    if not blocks:
        raise TimmFamilyError(f"{timm_name} has no ResNet blocks whose shortcuts the suite can decay; expected "
                              "model.residual=skip, or a timm ResNet (model=resnet-decayed)")
    gains = block_gains(len(blocks), alpha_min, indexing)
    for block, gain in zip(blocks, gains.tolist()):
        block.shortcut_gain = gain  # read by shortcut_gain (the conditioning's table), not by the forward
        if block.downsample is None:
            block.downsample = ShortcutGain(gain)
        else:
            block.downsample.register_forward_hook(lambda module, args, out, g=gain: out * g)
    return gains


def shortcut_gain(block: nn.Module) -> float:
    """The factor on a feature block's shortcut (``feature_blocks``): a ResNet block's ``alpha_l`` (1 unless
    ``decay_shortcuts`` set it), 1 for a ConvMixer layer with its ``Residual``, 0 without it (``WithoutSkip``)."""
    first = block[0] if isinstance(block, nn.Sequential) and len(block) else None
    if isinstance(first, WithoutSkip):
        return 0.0
    return float(getattr(block, "shortcut_gain", 1.0))


def family_of(args: Mapping[str, Any]) -> str:
    """``vit`` or ``timm``: the family of a backbone's stored arguments (files older than the family are ViTs)."""
    return str(args.get("family", "vit"))


def model_name(args: Mapping[str, Any]) -> str:
    """How results name a backbone's architecture: the ViT's ``arch``, a timm model's ``timm_name``."""
    return str(args.get("timm_name") if family_of(args) == "timm" else args.get("arch"))


def feature_blocks(model: nn.Module) -> list[nn.Module]:
    """The blocks of a timm model in forward order, whose outputs are its features at every depth: a ResNet's
    residual blocks (``BasicBlock``, ``Bottleneck``; seeds/002 Fig. 4 counts them, 8 in a ResNet-18), a model's
    own ``blocks`` sequence otherwise (ConvMixer's mixer layers). Raises ``TimmFamilyError`` for a model with
    neither (Swin, CaiT and PVT nest theirs in stages)."""
    found = resnet_blocks(model)
    if found:
        return found
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.Sequential) and len(blocks):
        return list(blocks)
    name = getattr(model, "skipless_args", {}).get("timm_name", type(model).__name__)
    raise TimmFamilyError(f"{name} has no flat sequence of blocks the suite reads features from; expected a "
                          "ResNet or a ConvMixer")


def _create(timm_name: str, img_size: int, kwargs: dict[str, Any]) -> nn.Module:
    """``timm.create_model`` at ``img_size`` when the constructor takes one, else without it."""
    try:
        return timm.create_model(timm_name, pretrained=False, img_size=int(img_size), **kwargs)
    except TypeError as err:
        if "img_size" not in str(err):
            raise
        return timm.create_model(timm_name, pretrained=False, **kwargs)


def is_timm_model(name: str) -> bool:
    """A registered timm model, or one of ``TIMM_CLASSES``."""
    return name in TIMM_CLASSES or timm.is_model(name)


def backbone_from_args(args: Mapping[str, Any]) -> nn.Module:
    """The (untrained) timm model that stored ``skipless_args`` (``family: timm``) describe, to load weights into
    (``checkpoint.build_backbone``) or to draw a random floor of the same model."""
    return create_timm_backbone(str(args["timm_name"]), int(args["img_size"]), int(args["patch_size"]),
                                token_graying=args.get("token_graying"), timm_args=args.get("timm_args"),
                                residual=str(args.get("residual", "skip")), alpha_min=args.get("alpha_min"),
                                decay_indexing=str(args.get("decay_indexing", "sub_block")))


def _gray_hook(patch: int, method: str, eps: float):
    def hook(module: nn.Module, args: tuple) -> tuple:
        with torch.no_grad():  # a preprocessing of the input: no gradient to the pixels
            return (gray_images(args[0], patch, method, eps), *args[1:])
    return hook


def create_timm_backbone(timm_name: str, img_size: int, patch_size: int, token_graying: Mapping[str, Any] | None = None,
                         drop_path_rate: float = 0.0, timm_args: Mapping[str, Any] | None = None,
                         residual: str = "skip", alpha_min: float | None = None,
                         decay_indexing: str = "sub_block") -> nn.Module:
    """A timm model without its classifier (``num_classes=0``: ``forward`` gives the pooled feature of
    ``num_features``), at ``img_size`` when its constructor takes one (Swin and CaiT fix it; PVTv2 does not),
    with token graying on its ``patch_embed`` input when ``token_graying['method']`` is not ``none``, without
    its removable skips when ``residual`` is ``skipless`` (``remove_skips``: ConvMixer's), with decayed shortcuts
    when it is ``decayed`` (``decay_shortcuts``: a ResNet's; ``alpha_min`` null is seeds/002's 0.6).

    ``skipless_args`` holds what rebuilds it (``family: timm``), so ``save_backbone`` exports it as it does a ViT.

    Raises:
        TimmFamilyError: an unknown name, or arguments timm's constructor refuses (one sentence).
    """
    if not is_timm_model(timm_name):
        raise TimmFamilyError(f"model.timm_name={timm_name!r} is not a timm model; expected a name of "
                              f"timm.list_models() or {', '.join(TIMM_CLASSES)}, e.g. swin_small_patch4_window7_224")
    # drop-path only when asked for: a model without it (ConvMixer) refuses the argument
    kwargs = {"num_classes": 0, **({"drop_path_rate": float(drop_path_rate)} if drop_path_rate else {}),
              **timm_kwargs(timm_args)}
    if residual not in RESIDUALS:
        raise TimmFamilyError(f"model.residual={residual} does not apply to a timm model; expected skip, skipless "
                              "for one whose skips the suite can remove (a ConvMixer) or decayed for a ResNet")
    try:
        if timm_name in TIMM_CLASSES:
            model = TIMM_CLASSES[timm_name](**kwargs)
        else:
            model = _create(timm_name, img_size, kwargs)
    except (TypeError, ValueError, AssertionError, RuntimeError) as err:
        given = ", ".join(f"{k}={v}" for k, v in timm_kwargs(timm_args).items()) or "no model.timm_args"
        raise TimmFamilyError(f"timm cannot build {timm_name} at {img_size} px with {given} ({err}); expected "
                              f"arguments of its constructor that fit each other") from None
    if residual == "skipless":
        remove_skips(model, timm_name)
    alpha = DEFAULT_ALPHA_MIN if alpha_min is None else float(alpha_min)
    if residual == "decayed":
        decay_shortcuts(model, timm_name, alpha, decay_indexing)
    graying = dict(token_graying or {})
    method = graying.get("method") or "none"
    eps = DEFAULT_EPS if graying.get("eps") is None else float(graying["eps"])
    check_graying(method, eps)
    if method != "none":
        if not isinstance(getattr(model, "patch_embed", None), nn.Module):
            raise TimmFamilyError(f"token graying needs the model's patch embedding, and {timm_name} has no "
                                  "patch_embed module; expected a Swin, CaiT, PVT or ViT-like timm model")
        model.patch_embed.register_forward_pre_hook(_gray_hook(int(patch_size), method, eps))
    model.skipless_args = {"family": "timm", "timm_name": timm_name, "timm_args": timm_kwargs(timm_args), "residual": residual,
                           **({"alpha_min": alpha, "decay_indexing": decay_indexing} if residual == "decayed" else {}),
                           "img_size": int(img_size), "patch_size": int(patch_size),
                           "token_graying": {"method": method, "eps": graying.get("eps")}}
    return model
