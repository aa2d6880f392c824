"""Model FLOPs of a training step and the GPU's peak, for ``make bench``'s TFLOP/s and model FLOP utilisation and
``make paper``'s GPU-hour estimates (``paper/gpu_hours.py``): in the package, at its top (it builds every method's
module to count it), where both tools may import it.

What is counted. ``torch.utils.flop_counter.FlopCounterMode`` counts the matrix products and
convolutions (2 FLOPs per multiply-add) of one forward pass, in eval mode, on the CPU. Attention
runs on the explicit path (``use_explicit_attention``): the counter has no formula for the fused
CPU SDPA kernel, so with it the ``Q K^T`` and ``A V`` products were missing (ViT-S at the paper's
DINO sizes: 115.6 against 122.1 GFLOP per image). Heads count (DINO's projection head on every
crop, the supervised classifier); element-wise work (norms, softmax, GELU, the loss) does not, as in
the usual MFU convention (Chowdhery et al., PaLM, Appendix B).

Training is counted as 3 x forward: the backward pass is taken as twice the forward (one product
for the input gradient, one for the weight gradient, per forward product). DINO's teacher runs
forward only, on the two global crops. The step's FLOPs per image are therefore

    DINO:        3 * student(2 globals + n locals, heads included) + teacher(2 globals, head included)
    supervised:  3 * (backbone + linear head)
    MAE:         3 * (encoder on CLS + the K = int(N (1 - mask_ratio)) visible patches
                      + decoder on CLS + all N patches + the U-Net skips)
    LM:          3 * the causal LM on one window of ``context`` tokens, per sequence (``lm_step_flops``)

The language model (seed 000's App. A.8) is counted per sequence, on the meta device (shapes only, no weights
drawn): per block ``2 T (4 d^2 + 3 d h)`` for the attention's four and SwiGLU's three matrices, ``2 x 2 T^2 d``
for ``Q K^T`` and ``A V`` over the whole ``T x T`` square (what the explicit path multiplies; a causal flash
kernel skips about half of it), and ``2 T d V`` for the tied head; the embedding lookup is no product.

MAE's count is its one forward pass as ``MaskedAutoencoder`` runs it: the patch embedding sees all N
patches (masking follows it, as in MAE), the encoder blocks CLS and the K visible tokens; the decoder's
embedding the same 1 + K tokens, its blocks and pixel head CLS and all N positions (mask tokens
included); each skip's projection the tapped 1 + K tokens and its fusion all 1 + N. The decoder's
blocks are timm's own ``Attention``, counted on its explicit path too (``explicit_attention``).

Peaks. MFU divides the achieved rate by the dense bf16 tensor-core peak of the GPU, chosen by its
name (``torch.cuda.get_device_name``); an unknown name gives no MFU, and the bench prints the name.
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from typing import Iterator

import torch
from omegaconf import DictConfig
from torch import nn
from timm.models.vision_transformer import Attention
from torch.utils.flop_counter import FlopCounterMode

from skipless.models.attention import use_explicit_attention
from skipless.models.causal_lm import create_causal_lm
from skipless.pretrain import backbone_factory
from skipless.ssl import METHODS
from skipless.ssl.dino.module import DINO
from skipless.supervised.classifier import Supervised

# Dense bf16 tensor-core peaks in TFLOP/s, half the "with sparsity" figure of the vendor datasheets:
# NVIDIA H100 Tensor Core GPU datasheet: BF16 1,979 (H100 SXM), 1,671 (H100 NVL), 1,513 (H100 PCIe);
# NVIDIA H200 Tensor Core GPU datasheet: 1,979 (H200 SXM), 1,671 (H200 NVL); NVIDIA GH200 Grace
# Hopper Superchip datasheet: 1,979; NVIDIA A100 Tensor Core GPU datasheet: BF16 312 dense (every
# A100, PCIe and SXM). The first pattern found in the device name (case ignored) wins, so the
# specific names come before the general ones: the H100 SXM reports itself as "NVIDIA H100 80GB HBM3".
PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 NVL", 835.5),
    ("H100 PCIe", 756.5),
    ("H100 SXM", 989.5),
    ("H100 80GB HBM3", 989.5),
    ("GH200", 989.5),
    ("H200 NVL", 835.5),
    ("H200", 989.5),
    ("A100", 312.0),
)


def peak_bf16_tflops(name: str) -> float | None:
    """The dense bf16 peak of the GPU called ``name`` (``PEAK_BF16_TFLOPS``), None when not known."""
    lowered = name.lower()
    return next((peak for pattern, peak in PEAK_BF16_TFLOPS if pattern.lower() in lowered), None)


def gpu_peak() -> tuple[str | None, float | None]:
    """(this machine's GPU name, its dense bf16 peak); (None, None) without a GPU."""
    if not torch.cuda.is_available():
        return None, None
    name = torch.cuda.get_device_name(0)
    return name, peak_bf16_tflops(name)


def mfu_note() -> str:
    """One line saying what the ``mfu`` column is divided by, or why it is empty."""
    name, peak = gpu_peak()
    if name is None:
        return "mfu: none on a CPU (no peak to divide by)."
    if peak is None:
        return (f"mfu: none, the bf16 peak of {name!r} is not known (skipless/flops.py PEAK_BF16_TFLOPS lists "
                "the GPUs it knows).")
    return f"mfu: against {peak:g} TFLOP/s, the dense bf16 peak of {name!r} (vendor datasheet, skipless/flops.py)."


def utilisation(flops_per_image: int, batch: int, step_s: float) -> dict:
    """A bench row's ``gflop_per_image``, ``model_tflops_per_s``, ``peak_tflops`` and ``mfu`` (None
    where the peak is not known: ``mfu_note`` says why)."""
    tflops = flops_per_image * batch / step_s / 1e12
    peak = gpu_peak()[1]
    return {"gflop_per_image": flops_per_image / 1e9, "model_tflops_per_s": tflops, "peak_tflops": peak,
            "mfu": tflops / peak if peak else None}


@contextmanager
def explicit_attention(module: nn.Module) -> Iterator[nn.Module]:
    """Every attention of ``module`` on its explicit path, restored after: the suite's own
    (``use_explicit_attention``) and timm's plain ``Attention`` (``fused_attn`` off; MAE's decoder
    blocks), whose fused SDPA kernel the counter cannot see on a CPU either."""
    timm_attention = [m for m in module.modules() if isinstance(m, Attention)]
    before = [m.fused_attn for m in timm_attention]
    for m in timm_attention:
        m.fused_attn = False
    try:
        with use_explicit_attention(module):
            yield module
    finally:
        for m, fused in zip(timm_attention, before):
            m.fused_attn = fused


def forward_flops(module: nn.Module, *inputs) -> int:
    """Matrix-product FLOPs of ``module(*inputs)`` in eval mode with explicit attention, no gradients;
    the module's mode, attention path and trainable parameters are restored."""
    was_training = module.training
    module.eval()
    # Frozen while counting: the counter's module tracker hooks the gradients of every module input that requires
    # them, and a parameter handed to a submodule as an input (CaiT's class token, expanded under no_grad: a
    # tensor that requires grad without a grad_fn) made it fail.
    trainable = [p for p in module.parameters() if p.requires_grad]
    try:
        for p in trainable:
            p.requires_grad_(False)
        with explicit_attention(module), torch.no_grad(), FlopCounterMode(display=False) as counter:
            module(*inputs)
    finally:
        module.train(was_training)
        for p in trainable:
            p.requires_grad_(True)
    return counter.get_total_flops()


def dino_step_flops(cfg: DictConfig) -> int:
    """Training FLOPs per image of a DINO step of ``cfg`` (see the module docstring), heads included."""
    d = cfg.dino
    module = DINO(cfg, partial(backbone_factory, cfg))
    g, loc = int(d.global_crop_size), int(d.local_crop_size)
    crops = [torch.zeros(1, 3, g, g) for _ in range(2)] + [torch.zeros(1, 3, loc, loc)
                                                          for _ in range(int(d.local_crops_number))]
    return 3 * forward_flops(module.student, crops) + forward_flops(module.teacher, crops[:2])


def supervised_step_flops(cfg: DictConfig, num_classes: int) -> int:
    """Training FLOPs per image of a supervised step of ``cfg``: 3 x (backbone + linear head)."""
    size = int(cfg.aug.image_size)
    return 3 * forward_flops(Supervised(cfg, num_classes), torch.zeros(1, 3, size, size))


def mae_step_flops(cfg: DictConfig) -> int:
    """Training FLOPs per image of an MAE step of ``cfg`` (``ssl=mae``): 3 x one forward pass of its
    masked autoencoder on one ``mae.input_size`` image (see the module docstring for what runs on
    which tokens), the encoder, decoder and U-Net skips the config builds."""
    size = int(cfg.mae.input_size)
    module = METHODS["mae"].module(cfg, partial(backbone_factory, cfg))
    return 3 * forward_flops(module.net, torch.zeros(1, 3, size, size))


def lm_step_flops(args: dict, context: int) -> int:
    """Training FLOPs per sequence of ``context`` tokens of a causal LM built from ``args``
    (``create_causal_lm``'s keyword arguments, ``arch`` included): 3 x one forward pass, counted on the meta
    device (the module docstring)."""
    build = {**args, "init": "fla"}  # the sizes only: the paper's init needs real tensors
    with torch.device("meta"):
        model = create_causal_lm(**build)
        tokens = torch.zeros(1, int(context), dtype=torch.long)
    return 3 * forward_flops(model, tokens)
