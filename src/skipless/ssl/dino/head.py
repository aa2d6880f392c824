"""The DINO projection head (Caron et al. 2021, Section 3 and Appendix): an MLP to a bottleneck,
L2 normalisation, then a weight-normalised, bias-free linear layer to ``out_dim`` prototypes.

ViT-S/16 recipe: 384 -> 2048 -> 2048 -> 256, GELU, last layer 256 -> 65536. With
``norm_last_layer`` the weight-norm gain ``weight_g`` is fixed at 1 (DINO's default, which it notes
stabilises training; its README's 300-epoch ViT-S run turns it off).

Inits as in DINO's ``vision_transformer.py``: the MLP's linears truncated normal (std 0.02), biases 0;
the last layer is built after that init runs, so it keeps ``nn.Linear``'s default.

Under mixed precision the MLP runs under autocast and the L2 normalisation and last layer in fp32: the
teacher's targets are then not rounded to bf16 before the sharpened softmax of the loss.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ...full_precision import full_precision


class WeightNormLinear(nn.Module):
    """``y = x (g * v / ||v||)^T``, one gain per output row, no bias.

    Written out instead of ``torch.nn.utils.weight_norm`` (deprecated) or its parametrization (which
    renames the parameters): ``weight_g`` / ``weight_v`` are the names in DINO's released checkpoints.
    """

    def __init__(self, in_features: int, out_features: int, fix_gain: bool) -> None:
        super().__init__()
        self.weight_v = nn.Parameter(torch.empty(out_features, in_features))
        # nn.Linear's default (reset_parameters): kaiming_uniform_ with a = sqrt(5), i.e.
        # U(-1/sqrt(in), 1/sqrt(in)), rows of expected squared norm 1/3 whatever in_features is.
        # The norm of v sets the size of the steps on the direction v/||v||, so it matters even
        # with the gain fixed at 1.
        nn.init.kaiming_uniform_(self.weight_v, a=math.sqrt(5))
        self.weight_g = nn.Parameter(torch.ones(out_features, 1), requires_grad=not fix_gain)

    def weight(self) -> torch.Tensor:
        return self.weight_g * self.weight_v / self.weight_v.norm(dim=1, keepdim=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight())


class DINOHead(nn.Module):
    """MLP (``n_layers`` linear layers, GELU) -> L2-normalise -> ``WeightNormLinear``."""

    def __init__(self, in_dim: int, out_dim: int = 65536, hidden_dim: int = 2048, bottleneck_dim: int = 256,
                 n_layers: int = 3, use_bn: bool = False, norm_last_layer: bool = True) -> None:
        super().__init__()
        dims = [in_dim] + [hidden_dim] * (n_layers - 1) + [bottleneck_dim]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
            layers.append(nn.Linear(a, b))
            if i < n_layers - 1:
                if use_bn:
                    layers.append(nn.BatchNorm1d(b))
                layers.append(nn.GELU())
        self.mlp = nn.Sequential(*layers)
        for m in self.mlp.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
        self.last_layer = WeightNormLinear(bottleneck_dim, out_dim, fix_gain=norm_last_layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mlp(x)
        # The normalisation and the prototypes' logits in fp32 under any autocast: the loss divides the
        # logits by T_t = 0.04 (0.02 in the CPU demo) before its softmax, so a logit rounded to bf16
        # (error ~2e-3 at init) moves single teacher probabilities by several percent (LOGIT_PRECISION in
        # tests/test_ssl_head.py measures it). 256 x 65536 weights: a small part of a step's work.
        with full_precision():
            return self.last_layer(F.normalize(x.float(), dim=-1, p=2))
