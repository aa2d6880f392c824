"""An independent, minimal re-implementation of DINO's ViT forward, to test our loader against.

Written from a reading of facebookresearch/dino ``vision_transformer.py`` (``VisionTransformer``,
``Block``, ``Attention``, ``interpolate_pos_encoding``, ``get_intermediate_layers``), as plain
functions of a state dict in DINO's released key format, with no timm and no skipless code:

- tokens: ``proj`` conv of stride ``p``, flattened row-major, CLS prepended, position embedding added;
- position embedding for a ``w x h`` image (DINO names the height ``w``: ``B, nc, w, h = x.shape``):
  unchanged when the patch count is native and ``w == h``; else the patch part is resized by
  ``F.interpolate(scale_factor=((w // p + 0.1) / sqrt(N), (h // p + 0.1) / sqrt(N)), mode="bicubic")``;
- block: ``x = x + attn(norm1(x)); x = x + mlp(norm2(x))``, attention with the explicit
  ``softmax(q k^T * d_h^-0.5)``, MLP ``fc2(gelu(fc1(.)))``, LayerNorm eps 1e-6 everywhere;
- output: the final ``norm`` of all tokens (``get_intermediate_layers(x, n=1)[0]``), CLS first.

``released_state_dict`` makes random weights with exactly the keys and shapes of DINO's released
``dino_deitsmall16_pretrain.pth`` (for the default arguments).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

EPS = 1e-6  # DINO builds its ViTs with partial(nn.LayerNorm, eps=1e-6)


def released_state_dict(embed_dim: int = 384, depth: int = 12, patch: int = 16, grid: int = 14,
                        pos_scale: float = 1.0, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random weights under DINO's backbone key names (a ViT without head: DINO's ``head`` is Identity).

    ``pos_scale`` sets the position embedding's std: at DINO's init std (0.02) it barely changes the
    output, so tests raise it to make any mistake in its interpolation visible.
    """
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int, std: float = 0.02) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * std

    d, hidden = embed_dim, 4 * embed_dim
    sd = {"cls_token": rand(1, 1, d, std=1.0), "pos_embed": rand(1, 1 + grid * grid, d, std=pos_scale),
          "patch_embed.proj.weight": rand(d, 3, patch, patch, std=0.05), "patch_embed.proj.bias": rand(d)}
    for i in range(depth):
        b = f"blocks.{i}."
        sd.update({
            b + "norm1.weight": 1 + rand(d, std=0.1), b + "norm1.bias": rand(d, std=0.1),
            b + "attn.qkv.weight": rand(3 * d, d, std=0.06), b + "attn.qkv.bias": rand(3 * d),
            b + "attn.proj.weight": rand(d, d, std=0.05), b + "attn.proj.bias": rand(d),
            b + "norm2.weight": 1 + rand(d, std=0.1), b + "norm2.bias": rand(d, std=0.1),
            b + "mlp.fc1.weight": rand(hidden, d, std=0.05), b + "mlp.fc1.bias": rand(hidden),
            b + "mlp.fc2.weight": rand(d, hidden, std=0.03), b + "mlp.fc2.bias": rand(d),
        })
    sd.update({"norm.weight": 1 + rand(d, std=0.1), "norm.bias": rand(d, std=0.1)})
    return sd


def _layer_norm(x: torch.Tensor, sd: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], sd[name + ".weight"], sd[name + ".bias"], EPS)


def _linear(x: torch.Tensor, sd: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    return x @ sd[name + ".weight"].T + sd[name + ".bias"]


def interpolate_pos_encoding(sd: dict[str, torch.Tensor], npatch: int, w: int, h: int, patch: int) -> torch.Tensor:
    """DINO's rule; ``w`` is the image height and ``h`` its width, in pixels, as DINO names them."""
    pos = sd["pos_embed"]
    n = pos.shape[1] - 1
    if npatch == n and w == h:
        return pos
    side = int(math.sqrt(n))
    w0, h0 = w // patch + 0.1, h // patch + 0.1
    grid = pos[:, 1:].reshape(1, side, side, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, scale_factor=(w0 / math.sqrt(n), h0 / math.sqrt(n)), mode="bicubic")
    assert grid.shape[-2:] == (int(w0), int(h0))
    return torch.cat([pos[:, :1], grid.permute(0, 2, 3, 1).reshape(1, -1, pos.shape[-1])], dim=1)


def _attention(x: torch.Tensor, sd: dict[str, torch.Tensor], name: str, heads: int) -> torch.Tensor:
    B, N, C = x.shape
    qkv = _linear(x, sd, name + ".qkv").reshape(B, N, 3, heads, C // heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    attn = ((q @ k.transpose(-2, -1)) * (C // heads) ** -0.5).softmax(dim=-1)
    return _linear((attn @ v).transpose(1, 2).reshape(B, N, C), sd, name + ".proj")


def dino_tokens(sd: dict[str, torch.Tensor], x: torch.Tensor, heads: int) -> torch.Tensor:
    """DINO's last-block tokens after the final norm, (B, 1 + N, C): CLS first, then patches row-major."""
    B, _, w, h = x.shape
    weight = sd["patch_embed.proj.weight"]
    patch = weight.shape[-1]
    t = F.conv2d(x, weight, sd["patch_embed.proj.bias"], stride=patch).flatten(2).transpose(1, 2)
    t = torch.cat([sd["cls_token"].expand(B, -1, -1), t], dim=1)
    t = t + interpolate_pos_encoding(sd, t.shape[1] - 1, w, h, patch)
    depth = len({k.split(".")[1] for k in sd if k.startswith("blocks.")})
    for i in range(depth):
        b = f"blocks.{i}"
        t = t + _attention(_layer_norm(t, sd, b + ".norm1"), sd, b + ".attn", heads)
        hidden = F.gelu(_linear(_layer_norm(t, sd, b + ".norm2"), sd, b + ".mlp.fc1"))
        t = t + _linear(hidden, sd, b + ".mlp.fc2")
    return _layer_norm(t, sd, "norm")
