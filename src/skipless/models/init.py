"""Initialisations of the skipless ViT (Ji et al., "Cutting the Skip", Section 5; seeds/004 Appendix C for OSA).

The papers write a self-attention head with right-multiplied matrices,
``SA(X) = softmax(X W^Q (X W^K)^T / sqrt(d_h)) X W^V W^O`` (OSA: ``exp(S) X W^V_h W^O_h``, summed over
heads). timm stores ``y = x W^T`` Linear layers and one fused ``qkv`` Linear whose weight rows are
``[Q; K; V]``, each head-major, and ``proj`` reads the heads' outputs concatenated. Hence

    W^Q   = qkv.weight[0:d].T          W^Q_h = qkv.weight[h*d_h:(h+1)*d_h].T
    W^K   = qkv.weight[d:2d].T         W^K_h = qkv.weight[d+h*d_h : d+(h+1)*d_h].T
    W^V   = qkv.weight[2d:3d].T        W^V_h = qkv.weight[2d+h*d_h : 2d+(h+1)*d_h].T
    W^O   = proj.weight.T              W^O_h = proj.weight[:, h*d_h:(h+1)*d_h].T     (d_h x d)

``paper_matrices`` and ``head_matrices`` return these views so that tests (and readers) check the
mapping once; ``set_query_key_`` writes ``W^Q``, ``W^K`` by it.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import ModelArgumentError

INITS = ("timm", "cutskip", "xavier", "osa", "mae")


def paper_matrices(attn: nn.Module) -> dict[str, torch.Tensor]:
    """The paper's W^Q, W^K, W^V, W^O (each d x d) of a timm attention module, as new tensors."""
    d = attn.proj.weight.shape[0]
    w = attn.qkv.weight.detach()
    return {"Q": w[:d].T.clone(), "K": w[d : 2 * d].T.clone(), "V": w[2 * d :].T.clone(),
            "O": attn.proj.weight.detach().T.clone()}


def head_matrices(attn: nn.Module, h: int) -> dict[str, torch.Tensor]:
    """Head ``h``'s W^Q_h, W^K_h, W^V_h (each d x d_h) and W^O_h (d_h x d), as new tensors."""
    dh = attn.head_dim
    cols = slice(h * dh, (h + 1) * dh)
    m = paper_matrices(attn)
    return {"Q": m["Q"][:, cols], "K": m["K"][:, cols], "V": m["V"][:, cols], "O": m["O"][cols]}


@torch.no_grad()
def _scaled_orthogonal_value_output_(attn: nn.Module, c: float, gen: torch.Generator) -> None:
    """Section 5.1: Q ~ N(0,1)^{d x d}, Q = U S V^T, W^V = c U, W^O = c V^T; biases zero.

    Then W^V W^O = c^2 U V^T has all singular values equal to c^2 (condition number 1).
    """
    d = attn.proj.weight.shape[0]
    q = torch.randn(d, d, generator=gen, dtype=torch.float64)
    u, _, vt = torch.linalg.svd(q)
    dtype = attn.qkv.weight.dtype
    attn.qkv.weight[2 * d :] = (c * u).T.to(dtype)  # W^V = qkv.weight[2d:].T
    attn.proj.weight.copy_((c * vt).T.to(dtype))  # W^O = proj.weight.T
    if attn.qkv.bias is not None:
        attn.qkv.bias[2 * d :] = 0.0
    if attn.proj.bias is not None:
        attn.proj.bias.zero_()


QK_READINGS = ("head", "layer")


def qk_reading_problem(qk: str, alpha: float | None = None, prefix: str = "") -> str | None:
    """Why cutskip cannot take the reading ``qk`` of Eq. 11 (with ``alpha``), in one sentence, or None.

    ``qk`` must be one of ``QK_READINGS``; ``head`` with ``alpha == 0`` is refused: every head's
    ``M_h = beta I``, whose best rank-d_h factors are the first d_h coordinates, so every head would get
    the same ``W^Q_h = W^K_h`` and all heads one attention map. ``alpha=None`` checks ``qk`` alone;
    ``prefix`` is put before the key names (``model.init_args.``), so a config rule and ``create_vit``
    say it the same way.
    """
    if qk not in QK_READINGS:
        return f"{prefix}qk={qk!r} is not a reading of Eq. 11; expected one of {', '.join(QK_READINGS)}"
    if qk == "head" and alpha is not None and alpha == 0:
        return (f"{prefix}qk=head with {prefix}alpha=0 gives every head the same W^Q_h = W^K_h (sqrt(beta) "
                f"times the first d_h coordinates, the best rank-d_h factors of beta I), so all heads would share "
                f"one attention map; expected {prefix}qk=layer (Eq. 11 on the whole layer, whose heads are "
                f"mutually orthogonal at alpha 0, the setting of seed 000's language model) or {prefix}alpha != 0")
    return None


def query_key_matrices(d: int, heads: int, alpha: float, beta: float, gen: torch.Generator,
                       qk: str = "head") -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's ``W^Q`` and ``W^K`` (each ``d x d``, float64; head h is columns ``h d_h:(h+1) d_h``,
    ``d_h = d / heads``) of one layer under Eq. 11, ``W^Q W^K^T = alpha Z + beta I`` with
    ``Z_ij ~ N(0, 1/d)`` (Ji et al., seed 000, Sec. 5.2): the identity term makes the logits diagonally
    dominant, so the softmax is near the identity and well conditioned (Proposition 1). In one of two
    readings:

    ``head`` (the suite's reading since the first wave; the ViT default): per head an own
    ``M_h = alpha Z_h + beta I = U S V^T`` and ``W^Q_h = U[:, :d_h] S^1/2``, ``W^K_h = V[:, :d_h] S^1/2``:
    each head's ``W^Q_h W^K_h^T`` is the best rank-d_h approximation of its ``M_h`` (Eckart-Young), and the
    layer's ``sum_h W^Q_h W^K_h^T`` is not ``alpha Z + beta I``. Draws ``Z_h`` for h = 0, 1, ... At
    ``alpha = 0`` every ``M_h`` is ``beta I`` and every head gets ``sqrt(beta) [e_1 ... e_d_h]``: refused
    (``qk_reading_problem``).

    ``layer``: Eq. 11 as the paper writes it, for the layer's ``d x d`` matrices, whose column blocks
    are the heads, so ``W^Q W^K^T = sum_h W^Q_h W^K_h^T``. One ``M = alpha Z + beta I = U S V^T`` and
    ``R`` Haar-random orthogonal (``stiefel(d, d)``):

        W^Q = U S^1/2 R,   W^K = V S^1/2 R,   so   W^Q W^K^T = U S^1/2 R R^T S^1/2 V^T = U S V^T = M

    exactly: the layer's sum over heads is ``alpha Z + beta I``. ``R`` costs nothing in that product (any
    orthogonal ``R`` gives it) and decides how ``M`` is split over the heads: head h gets
    ``W^Q_h W^K_h^T = U S^1/2 P_h S^1/2 V^T``, ``P_h = R_h R_h^T`` a random rank-d_h projection
    (``R_h`` the columns of head h, ``sum_h P_h = I``). Without ``R`` (``R = I``) head 0 would take the
    d_h largest singular values of ``M`` and, at alpha 0, head h the coordinates ``h d_h:(h+1) d_h``. At
    ``alpha = 0``, ``beta > 0``: ``M = beta I``, ``W^Q = W^K = sqrt(beta) U R`` (``sqrt(beta)`` times a
    Haar-random orthogonal matrix), so ``W^Q_h^T W^Q_g = beta I`` for ``h = g`` and ``0`` otherwise:
    mutually orthogonal, distinct heads, each ``W^Q_h W^K_h^T = beta P_h``, a rotation of what the ``head``
    reading gives every head (``beta`` times a rank-d_h projection: the same logit scale), and their sum
    ``beta I``. Seed 000's language model (App. A.8) uses alpha 0, beta 0.5. Draws ``Z`` (also at
    alpha 0, so the draws do not depend on alpha), then ``R``.

    Raises ``ModelArgumentError`` (before drawing anything) for an unknown ``qk``, ``head`` with
    ``alpha == 0`` or ``d`` not a multiple of ``heads``.
    """
    problem = qk_reading_problem(qk, alpha)
    if problem is None and (heads < 1 or d % heads):
        problem = f"query_key_matrices splits d={d} into {heads} heads; expected heads >= 1 dividing d"
    if problem:
        raise ModelArgumentError(problem)
    dh = d // heads
    eye = torch.eye(d, dtype=torch.float64)
    if qk == "layer":
        z = torch.randn(d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        u, s, vt = torch.linalg.svd(alpha * z + beta * eye)
        r = stiefel(d, d, gen)
        root = s.sqrt()
        return (u * root) @ r, (vt.T * root) @ r
    wq = torch.empty(d, d, dtype=torch.float64)
    wk = torch.empty(d, d, dtype=torch.float64)
    for h in range(heads):
        z = torch.randn(d, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        u, s, vt = torch.linalg.svd(alpha * z + beta * eye)
        root = s[:dh].sqrt()
        wq[:, h * dh : (h + 1) * dh] = u[:, :dh] * root
        wk[:, h * dh : (h + 1) * dh] = vt[:dh].T * root
    return wq, wk


@torch.no_grad()
def set_query_key_(attn: nn.Module, wq: torch.Tensor, wk: torch.Tensor) -> None:
    """Write the paper's ``W^Q``, ``W^K`` (each ``d x d``, heads as column blocks) into the fused ``qkv``
    Linear of ``attn`` (timm's layout, the module docstring: ``qkv.weight[0:d] = W^Q^T``,
    ``qkv.weight[d:2d] = W^K^T``), cast to its dtype; the query and key biases, if any, zero. Any
    attention with ``qkv``, ``proj``, ``num_heads`` and ``head_dim`` in that layout takes it."""
    d = attn.proj.weight.shape[0]
    if tuple(wq.shape) != (d, d) or tuple(wk.shape) != (d, d):
        raise ModelArgumentError(f"set_query_key_ writes d x d matrices into a width-{d} attention; "
                                 f"got W^Q {tuple(wq.shape)} and W^K {tuple(wk.shape)}")
    dtype = attn.qkv.weight.dtype
    attn.qkv.weight[:d] = wq.T.to(dtype)
    attn.qkv.weight[d : 2 * d] = wk.T.to(dtype)
    if attn.qkv.bias is not None:
        attn.qkv.bias[: 2 * d] = 0.0


def _width_and_heads(attn: nn.Module) -> tuple[int, int]:
    """``(d, num_heads)`` of an attention whose heads are ``num_heads`` column blocks of ``head_dim``."""
    d = attn.proj.weight.shape[0]
    if attn.num_heads * attn.head_dim != d:
        raise ModelArgumentError(f"Eq. 11 splits W^Q, W^K into heads as column blocks, which needs "
                                 f"num_heads x head_dim = width; got {attn.num_heads} x {attn.head_dim} != {d}")
    return d, attn.num_heads


def mimetic_query_key_(attn: nn.Module, alpha: float, beta: float, gen: torch.Generator,
                       qk: str = "head") -> None:
    """Section 5.2, Eq. 11 on one attention module: ``query_key_matrices`` in the reading ``qk``, written
    by ``set_query_key_``. The heads are ``attn.num_heads`` blocks of ``attn.head_dim`` columns."""
    d, heads = _width_and_heads(attn)
    set_query_key_(attn, *query_key_matrices(d, heads, alpha, beta, gen, qk))


def cutskip_attention_(attn: nn.Module, alpha: float, beta: float, c: float, gen: torch.Generator,
                       qk: str = "head") -> None:
    """The paper's initialisation of one attention module (Section 5): ``W^V``, ``W^O`` (5.1) then
    ``W^Q``, ``W^K`` (5.2, reading ``qk``), drawing from ``gen`` in that order; biases zero. A model of
    other blocks (a language model whose attention has timm's ``qkv`` / ``proj`` / ``num_heads`` /
    ``head_dim`` layout) calls it per block and initialises its MLP itself (``suo_``)."""
    problem = qk_reading_problem(qk, alpha)
    if problem:  # before W^V, W^O are written
        raise ModelArgumentError(problem)
    _width_and_heads(attn)
    _scaled_orthogonal_value_output_(attn, c, gen)
    mimetic_query_key_(attn, alpha, beta, gen, qk)


def stiefel(n: int, m: int, gen: torch.Generator) -> torch.Tensor:
    """A float64 ``n x m`` matrix uniform on the Stiefel manifold ``{W : W^T W = I_m}`` (``n >= m``):
    the reduced QR of a Gaussian matrix with each column of ``Q`` multiplied by the sign of ``R``'s
    diagonal entry (seeds/004 Algorithm 1, after Mezzadri 2006; without the sign fix ``Q`` is not
    uniform)."""
    z = torch.randn(n, m, generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(z)
    return q * torch.sign(torch.diagonal(r))


@torch.no_grad()
def suo_(linear: nn.Linear, gen: torch.Generator) -> None:
    """Scaled uniform orthogonal (Martens et al. 2021): a Haar-random (semi-)orthogonal matrix
    times ``max(1, sqrt(fan_out / fan_in))``; bias zero.

    For ``W`` of shape (out, in): if out >= in, ``W^T W = s^2 I``; otherwise ``W W^T = s^2 I``.
    """
    out_f, in_f = linear.weight.shape
    q = stiefel(max(out_f, in_f), min(out_f, in_f), gen)
    w = q if out_f >= in_f else q.T
    scale = max(1.0, math.sqrt(out_f / in_f))
    linear.weight.copy_((scale * w).to(linear.weight.dtype))
    if linear.bias is not None:
        linear.bias.zero_()


def gelu_mean(sigma: torch.Tensor) -> torch.Tensor:
    """E[GELU(sigma z)] for z ~ N(0, 1), in closed form: by Stein's lemma
    E[sigma z Phi(sigma z)] = sigma^2 E[phi(sigma z)] = sigma^2 / sqrt(2 pi (1 + sigma^2))."""
    return sigma ** 2 / torch.sqrt(2 * math.pi * (1 + sigma ** 2))


@torch.no_grad()
def center_mlp_(mlp: nn.Module) -> None:
    """Set ``fc2``'s bias so that the MLP's output has mean zero over Gaussian inputs.

    GELU's output has a positive mean, which ``fc2`` turns into one vector added to every token.
    Without skips nothing else carries the tokens' differences, so this shared vector grows
    block after block and the tokens of an image collapse onto one direction at initialisation
    (measured on a 12-block skipless ViT-Ti on Gaussian noise: mean patch cosine 0.17 after block 0,
    1.0 from block 7 on; 0.01 at every block with the correction). The paper uses "scale-corrected"
    orthogonal MLP weights after Martens et al. (2021), whose activations are transformed to remove
    this mean; folding the correction into the bias keeps timm's MLP and its state dict unchanged.
    Pre-activations are taken as N(0, ||w_j||^2): the LayerNorm before ``fc1`` gives each token
    unit variance per channel.
    """
    if not isinstance(mlp.act, nn.GELU):
        raise TypeError(f"center_mlp_ knows GELU only, got {type(mlp.act).__name__}")
    sigma = mlp.fc1.weight.double().norm(dim=1)
    shift = gelu_mean(sigma)
    if mlp.fc1.bias is not None:
        mlp.fc1.bias.zero_()
    mlp.fc2.bias.copy_((-mlp.fc2.weight.double() @ shift).to(mlp.fc2.bias.dtype))


# The one statement of cutskip's default arguments: the paper's DINO ViT-S values (Ji et al.,
# Section 6.2: alpha 1.8, beta 1, c 3); its supervised ViT-B used alpha 2, beta 0.6, c 3 (Section 6.1).
# center_mlp is ours, off as the paper states the init. qk: the reading of Eq. 11 (query_key_matrices),
# head the suite's since the first wave, which every ViT result used; seed 000's language model (alpha 0,
# App. A.8) needs layer. Configs leave these null to mean "this value".
CUTSKIP_DEFAULTS: dict[str, float | bool | str] = {"alpha": 1.8, "beta": 1.0, "c": 3.0, "center_mlp": False,
                                                   "qk": "head"}


def cutskip_init_(model: nn.Module, alpha: float = CUTSKIP_DEFAULTS["alpha"], beta: float = CUTSKIP_DEFAULTS["beta"],
                  c: float = CUTSKIP_DEFAULTS["c"], seed: int | None = None,
                  center_mlp: bool = CUTSKIP_DEFAULTS["center_mlp"], qk: str = CUTSKIP_DEFAULTS["qk"]) -> None:
    """The paper's initialisation of every block, applied after timm's own init.

    Defaults are ``CUTSKIP_DEFAULTS``, the paper's DINO ViT-S values; the paper reports little
    sensitivity to them.
    Draws from torch's global generator unless ``seed`` is given. ``center_mlp`` also applies
    ``center_mlp_`` to every MLP (our reading of the paper's "scale-corrected" MLP init). ``qk`` is the
    reading of Eq. 11, ``head`` or ``layer`` (``query_key_matrices``); ``head`` with ``alpha = 0`` is
    refused (``ModelArgumentError``) before any weight is written.
    """
    problem = qk_reading_problem(qk, alpha)
    if problem:
        raise ModelArgumentError(problem)
    gen = torch.Generator().manual_seed(seed if seed is not None else int(torch.randint(2**62, ()).item()))
    for block in model.blocks:
        cutskip_attention_(block.attn, alpha, beta, c, gen, qk)
        suo_(block.mlp.fc1, gen)
        suo_(block.mlp.fc2, gen)
        if center_mlp:
            center_mlp_(block.mlp)


@torch.no_grad()
def zero_output_projections_(model: nn.Module) -> None:
    """Decayed shortcuts (Zhang et al., "Residual Connections Harm Self-Supervised Abstract Feature Learning"): zero the output projections of attention and MLP, so every
    block starts as its scaled shortcut (seeds/002 Sec. 3.2: "initialize the weights of the final output
    layer in each f to zero" instead of Xavier, against the feature-norm growth of alpha_min <= 0.7). One
    rule for the decayed mode whatever its alpha_min (1.0 included), indexing and branches, unless
    ``decay_zero_init=False`` (the ablation of Sec. 3.2); the other modes, Table 3b's fixed-scale ones
    included, keep their init."""
    for block in model.blocks:
        for lin in (block.attn.proj, block.mlp.fc2):
            lin.weight.zero_()
            if lin.bias is not None:
                lin.bias.zero_()


@torch.no_grad()
def seed004_embeddings_(model: nn.Module) -> None:
    """The OSA paper's learnable embeddings (seeds/004, Appendix E): the class token and the learned
    position table drawn from ``N(0, sigma^2)`` truncated to ``[-2 sigma, 2 sigma]``, sigma = 0.02 (timm
    keeps the class token at ``N(0, 1e-6)`` and cuts its position table at +-2 absolute, i.e. not at all).
    A fixed sin-cos table is left alone (it is filled after every init)."""
    sigma = 0.02
    for name in ("cls_token", "pos_embed"):
        param = getattr(model, name, None)
        if param is not None and param.requires_grad:
            nn.init.trunc_normal_(param, std=sigma, a=-2 * sigma, b=2 * sigma)


@torch.no_grad()
def xavier_init_(model: nn.Module) -> None:
    """Xavier-uniform weights and zero biases for every block's attention and MLP, and the class token
    and position table as ``seed004_embeddings_``: the ViT baselines of the OSA paper (seeds/004,
    Appendix E). The fused ``qkv`` weight is three d x d matrices, each drawn with its own bound
    ``sqrt(6 / (d + d))`` (as timm's jax-style init treats it), not one 3d x d matrix (``mae_init_``'s
    reading). Draws from torch's global generator, as timm's own init does."""
    for block in model.blocks:
        for lin in (block.attn.qkv, block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            rows, cols = lin.weight.shape
            parts = 3 if lin is block.attn.qkv else 1
            bound = math.sqrt(6.0 / (rows // parts + cols))
            lin.weight.uniform_(-bound, bound)
            if lin.bias is not None:
                lin.bias.zero_()
    seed004_embeddings_(model)


@torch.no_grad()
def mae_linear_and_norm_init_(model: nn.Module) -> None:
    """MAE's ``_init_weights`` over every submodule (``models_mae.py``, He et al. 2022): each Linear
    ``xavier_uniform_`` with a zero bias, each LayerNorm weight 1 and bias 0. The encoder's ``mae_init_``
    and MAE's decoder both start here."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


def mae_init_(model: nn.Module) -> None:
    """MAE's encoder initialisation (He et al. 2022, ``models_mae.py``: ``initialize_weights`` and
    ``_init_weights``), which Zhang et al. keep (seeds/002 Sec. 3.2: "the original Xavier uniform
    initialization"; their decayed model then zeroes the branch outputs, ``zero_output_projections_``):

    - every Linear of the blocks: ``xavier_uniform_`` on the weight as it is stored, so the fused ``qkv``
      is one ``3d x d`` matrix with bound ``sqrt(6 / (3d + d))`` (not three d x d ones, ``xavier_init_``);
      biases 0;
    - the patch embedding like a Linear: ``xavier_uniform_`` on its weight flattened to ``d x (3 p p)``;
      its bias keeps the convolution's default draw (MAE's ``apply`` touches Linear and LayerNorm only);
    - the class token ``N(0, 0.02^2)`` (MAE: timm's ``trunc_normal_`` at std 0.02 cuts at +-2, so it is a
      plain normal);
    - every LayerNorm weight 1, bias 0.

    A learned position table keeps timm's draw; MAE's is the fixed sin-cos table (``pos_embed=sincos``,
    which the MAE recipes set). Draws from torch's global generator, as MAE does."""
    mae_linear_and_norm_init_(model)
    weight = model.patch_embed.proj.weight
    nn.init.xavier_uniform_(weight.view(weight.shape[0], -1))
    if getattr(model, "cls_token", None) is not None:
        nn.init.normal_(model.cls_token, std=0.02)


@torch.no_grad()
def osa_init_(model: nn.Module, seed: int | None = None) -> None:
    """The OSA-Transformer's initialisation (seeds/004, Appendix C), applied after timm's own.

    Per block and head, independently (Appendix C.1: "U, V i.i.d."; draws in this order):
    ``[W^Q_h, W^K_h] = U`` with ``U`` uniform on the Stiefel manifold ``d x 2 d_v`` (C.2: then
    ``W^Q_h W^K_h^T - W^K_h W^Q_h^T`` has all non-zero singular values 1, Theorem C.2), ``W^V_h`` and
    ``W^O_h^T`` each uniform on the Stiefel manifold ``d x d_v`` (C.1: ``W^V_h W^O_h`` has all non-zero
    singular values 1). Then the MLP weights SUO (C.4, ``suo_``) with zero biases. The attention has
    no biases (``OrthogonalAttention``); alpha keeps its configured value (Appendix E: 0.1).
    Draws from torch's global generator unless ``seed`` is given (as ``cutskip_init_``).

    Only each head is well conditioned: the layer's ``sum_h W^V_h W^O_h`` of independent heads is a
    sum of independent partial isometries, whose smallest singular value is far below 1
    (``tests/test_models_osa.py`` measures the layer's Jacobian).
    """
    gen = torch.Generator().manual_seed(seed if seed is not None else int(torch.randint(2**62, ()).item()))
    for block in model.blocks:
        attn = block.attn
        d, dh, heads = attn.proj.weight.shape[0], attn.head_dim, attn.num_heads
        if 2 * dh > d:
            raise ModelArgumentError(f"init=osa draws [W^Q_h, W^K_h] with orthonormal columns, which needs "
                                     f"2 d_v <= d (at least 2 heads); got {heads} head(s) of {dh} in width {d}")
        dtype = attn.qkv.weight.dtype
        for h in range(heads):
            lo, hi = h * dh, (h + 1) * dh
            qk = stiefel(d, 2 * dh, gen)
            attn.qkv.weight[lo:hi] = qk[:, :dh].T.to(dtype)  # W^Q_h = qkv.weight[h d_h:(h+1) d_h].T
            attn.qkv.weight[d + lo : d + hi] = qk[:, dh:].T.to(dtype)  # W^K_h
            attn.qkv.weight[2 * d + lo : 2 * d + hi] = stiefel(d, dh, gen).T.to(dtype)  # W^V_h
            attn.proj.weight[:, lo:hi] = stiefel(d, dh, gen).to(dtype)  # W^O_h^T = proj.weight[:, h d_h:(h+1) d_h]
        for lin in (attn.qkv, attn.proj):
            if lin.bias is not None:
                lin.bias.zero_()
        suo_(block.mlp.fc1, gen)
        suo_(block.mlp.fc2, gen)


def apply_init_(model: nn.Module, init: str, init_args: dict, residual: str, zero_init: bool = True) -> None:
    """The initialisation ``create_vit`` names, after timm's own: ``timm`` keeps it, ``cutskip``,
    ``xavier`` and ``osa`` overwrite the blocks (``osa`` and ``xavier`` also the class token and position
    table, seeds/004 Appendix E), ``mae`` the blocks, patch embedding and class token (He et al. 2022);
    the decayed mode then zeroes the output projections (Zhang et al. Sec. 3.2) unless ``zero_init`` is
    False. ``init_args`` are cutskip's (the other inits take none)."""
    if init == "cutskip":
        cutskip_init_(model, **init_args)
    elif init == "xavier":
        xavier_init_(model)
    elif init == "osa":
        osa_init_(model)
        seed004_embeddings_(model)
    elif init == "mae":
        mae_init_(model)
    elif init != "timm":
        raise ValueError(f"unknown init {init!r}; expected one of {', '.join(INITS)}")
    if residual == "decayed" and zero_init:
        zero_output_projections_(model)
