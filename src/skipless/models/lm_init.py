"""Initialisations of the causal language model (``causal_lm.py``): its anchor's default and the paper's.

- ``fla``: flash-linear-attention's ``TransformerPreTrainedModel._init_weights`` (the LM's anchor, seeds/000
  App. A.8 names the codebase): every Linear weight and the (tied) token embedding drawn from ``N(0, 0.02^2)``
  (``initializer_range`` 0.02, its ``TransformerConfig`` default), the RMSNorm weights 1, no biases to set;
  its optional GPT-2 rescaling of the output projections (``rescale_prenorm_residual``) is off by default
  there and not done here. Draws from torch's global generator, as that code does. With
  ``residual=skipless`` this is the "standard skipless Transformer" the seed says "diverges immediately".
- ``cutskip``: the paper's Section 5 on every block, after ``fla`` (the ViT's ``cutskip`` after timm's, the
  same order of draws per block):

  * values / output (Sec. 5.1) then queries / keys (Eq. 11), both by ``init.cutskip_attention_``: ``W^V = c U``,
    ``W^O = c V^T``, so ``W^V W^O`` has all singular values ``c^2``; Eq. 11 read as ``qk`` says (``layer``, the
    LM's default: the whole layer's ``W^Q W^K^T = alpha Z + beta I``, its heads the column blocks, mutually
    orthogonal at alpha 0; ``head``: the ViT's per-head best rank-d_h factors, refused at alpha 0);
  * SwiGLU: SUO (``init.suo_``, Martens et al. 2021) on each of its three matrices, gate ``fc1_g`` and up
    ``fc1_x`` (``hidden x d``: ``W^T W = (hidden / d) I``) and down ``fc2`` (``d x hidden``: ``W W^T = I``).
    The seed says SUO for its ViT MLPs (Sec. 6.1); on SwiGLU's three matrices is issue 49's reading.

  The embedding keeps ``fla``'s draw: the seed says nothing of it. The attention layout is timm's (fused
  ``qkv`` with rows ``[Q; K; V]`` head-major, ``proj``), so ``init.py``'s functions and its mapping from the
  paper's matrices to the rows (``init.paper_matrices``) apply unchanged. RoPE rotates queries and keys after
  ``W^Q``, ``W^K``, by the same angle at the same position, so a token's score with itself is still
  ``x W^Q W^K^T x^T``: the diagonal dominance Eq. 11 aims at survives the rotation.

``LM_CUTSKIP_DEFAULTS`` states the LM's values once, each with its source: alpha 0 and beta 0.5 (the seed,
App. A.8), c 3 (ours, after issue 49: the value of both of the seed's ViT experiments; A.8 gives none).
"""
from __future__ import annotations

import torch
from torch import nn

from ..errors import ModelArgumentError
from .init import QK_READINGS, cutskip_attention_, suo_, zero_output_projections_

LM_INITS = ("fla", "cutskip")
FLA_INIT_STD = 0.02  # flash-linear-attention's initializer_range (TransformerConfig default)
# The readings of Eq. 11 (models/init.py): ``head``, per head the best rank-d_h factors of its own alpha Z_h +
# beta I (the ViT experiments' reading); ``layer``, the whole d x d layer's W^Q W^K^T = alpha Z + beta I.
LM_QK_READINGS = QK_READINGS
# The LM's cutskip arguments: alpha 0, beta 0.5 the seed's (App. A.8); c 3 ours (its ViT experiments' value);
# qk ``layer``: at alpha 0 the ``head`` reading would give every head the same W^Q_h = W^K_h =
# sqrt(beta) [e_1 .. e_dh] (issue 49, "a trap in today's init") and is refused; ``layer`` gives orthogonal heads.
LM_CUTSKIP_DEFAULTS: dict[str, float | str] = {"alpha": 0.0, "beta": 0.5, "c": 3.0, "qk": "layer"}


@torch.no_grad()
def fla_init_(model: nn.Module, std: float = FLA_INIT_STD) -> None:
    """flash-linear-attention's default init of a ``CausalLM`` (module docstring): the embedding and every
    Linear ``N(0, std^2)``, biases (none in the LM) zero, every RMSNorm weight 1."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.RMSNorm):
            module.reset_parameters()


def lm_cutskip_init_(model: nn.Module, alpha: float = LM_CUTSKIP_DEFAULTS["alpha"],
                     beta: float = LM_CUTSKIP_DEFAULTS["beta"], c: float = LM_CUTSKIP_DEFAULTS["c"],
                     qk: str = LM_CUTSKIP_DEFAULTS["qk"], seed: int | None = None) -> None:
    """The paper's initialisation of every block of a ``CausalLM`` (module docstring), after ``fla_init_``.

    Args:
        alpha, beta: Eq. 11's ``W^Q W^K^T = alpha Z + beta I``, ``Z_ij ~ N(0, 1/d)`` (seed A.8: 0 and 0.5).
        c: Sec. 5.1's scale, ``W^V W^O = c^2 U V^T`` (3, ours after the seed's ViT experiments).
        qk: the reading of Eq. 11 (``LM_QK_READINGS``), passed to ``init.cutskip_attention_``.
        seed: the generator's seed; None draws it from torch's global generator (as ``init.cutskip_init_``).
    """
    if qk not in LM_QK_READINGS:
        raise ModelArgumentError(f"unknown query/key reading qk={qk!r}; expected one of: {', '.join(LM_QK_READINGS)}")
    gen = torch.Generator().manual_seed(seed if seed is not None else int(torch.randint(2**62, ()).item()))
    for block in model.blocks:
        cutskip_attention_(block.attn, alpha, beta, c, gen, qk)
        for linear in (block.mlp.fc1_g, block.mlp.fc1_x, block.mlp.fc2):
            suo_(linear, gen)


def lm_init_args(given: dict | None) -> dict[str, float | str]:
    """``LM_CUTSKIP_DEFAULTS`` overridden by the non-None entries of ``given``; an unknown key is refused."""
    given = {k: v for k, v in (given or {}).items() if v is not None}
    unknown = sorted(set(given) - set(LM_CUTSKIP_DEFAULTS))
    if unknown:
        raise ModelArgumentError(f"unknown init_args {unknown} for the language model; expected "
                                 f"{', '.join(LM_CUTSKIP_DEFAULTS)}")
    args = {**LM_CUTSKIP_DEFAULTS, **given}
    if args["qk"] not in LM_QK_READINGS:
        raise ModelArgumentError(f"unknown query/key reading qk={args['qk']!r}; expected one of: "
                                 f"{', '.join(LM_QK_READINGS)}")
    return args


def apply_lm_init_(model: nn.Module, init: str, init_args: dict, residual: str, zero_init: bool = True) -> None:
    """The initialisation ``create_causal_lm`` names: ``fla``, or ``fla`` then ``cutskip`` with ``init_args``
    (``lm_init_args``); the decayed mode then zeroes the output projections of attention and SwiGLU
    (``init.zero_output_projections_``, seeds/002 Sec. 3.2) unless ``zero_init`` is False, as the ViT's."""
    if init not in LM_INITS:
        raise ModelArgumentError(f"unknown init {init!r} for the language model; expected one of: "
                                 f"{', '.join(LM_INITS)}")
    fla_init_(model)
    if init == "cutskip":
        lm_cutskip_init_(model, **init_args)
    if residual == "decayed" and zero_init:
        zero_output_projections_(model)


__all__ = ["FLA_INIT_STD", "LM_CUTSKIP_DEFAULTS", "LM_INITS", "LM_QK_READINGS", "apply_lm_init_", "fla_init_",
           "lm_cutskip_init_", "lm_init_args"]
