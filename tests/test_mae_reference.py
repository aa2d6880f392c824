"""The original MAE (He et al. 2022; seed 002's baseline: ``model=skip mae.unet_skips=false``) written out
here in plain tensor operations, from the paper's description and the ViT's equations, on the module's own
weights and the same masking noise: the loss and the gradient of every parameter must agree.

What the reference does, step by step: the patch embedding as a linear map of each flattened patch plus the
position table; per sample the ``int(N (1 - r))`` patches of lowest noise kept; the class token (plus its
position) prepended; pre-LN blocks ``x + Attn(LN(x))``, ``x + MLP(LN(x))``; the final LayerNorm; the decoder's
linear embedding, the mask token at every masked position, the visible tokens back in place, its position
table, its blocks, LayerNorm and linear prediction; the loss: per patch the mean squared error against the
patch's pixels normalised by its own mean and unbiased variance (``(var + 1e-6) ** .5``), averaged over the
masked patches only."""
import math

import pytest
import torch
import torch.nn.functional as F

from skipless.models import create_vit
from skipless.ssl.mae.autoencoder import MaskedAutoencoder

P, SIZE, RATIO = 8, 32, 0.75


def layer_norm(x, norm):
    return F.layer_norm(x, (x.shape[-1],), norm.weight, norm.bias, norm.eps)


def linear(x, lin):
    return x @ lin.weight.T + (lin.bias if lin.bias is not None else 0)


def pre_ln_block(x, block):
    """``x + Attn(LN1 x)`` then ``x + MLP(LN2 x)``, multi-head softmax attention with the fused qkv rows [Q; K; V]."""
    attn, (B, N, D) = block.attn, x.shape
    heads = attn.num_heads
    qkv = linear(layer_norm(x, block.norm1), attn.qkv).reshape(B, N, 3, heads, D // heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    weights = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // heads), dim=-1)
    x = x + linear((weights @ v).transpose(1, 2).reshape(B, N, D), attn.proj)
    hidden = F.gelu(linear(layer_norm(x, block.norm2), block.mlp.fc1))
    return x + linear(hidden, block.mlp.fc2)


def reference_loss(net: MaskedAutoencoder, images: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    enc, dec = net.encoder, net.decoder
    B, C, H, W = images.shape
    h, w = H // P, W // P
    N, keep = h * w, int(h * w * (1 - RATIO))
    # the convolution of stride = kernel = P is a linear map of each patch flattened as (channel, row, col)
    flat = images.reshape(B, C, h, P, w, P).permute(0, 2, 4, 1, 3, 5).reshape(B, N, C * P * P)
    x = flat @ enc.patch_embed.proj.weight.reshape(enc.embed_dim, -1).T + enc.patch_embed.proj.bias
    x = x + enc.pos_embed[:, 1:]
    kept = noise.argsort(dim=1)[:, :keep]
    x = torch.stack([x[b, kept[b]] for b in range(B)])
    x = torch.cat([(enc.cls_token + enc.pos_embed[:, :1]).expand(B, -1, -1), x], dim=1)
    for block in enc.blocks:
        x = pre_ln_block(x, block)
    latent = layer_norm(x, enc.norm)

    y = linear(latent, dec.decoder_embed)
    full = dec.mask_token.expand(B, N, -1).clone()
    for b in range(B):
        full[b, kept[b]] = y[b, 1:]
    y = torch.cat([y[:, :1], full], dim=1) + dec.decoder_pos_embed
    for block in dec.decoder_blocks:
        y = pre_ln_block(y, block)
    pred = linear(layer_norm(y, dec.decoder_norm), dec.decoder_pred)[:, 1:]

    # the target: each patch's pixels as (row, col, channel), normalised per patch
    target = images.reshape(B, C, h, P, w, P).permute(0, 2, 4, 3, 5, 1).reshape(B, N, P * P * C)
    target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6) ** 0.5
    mask = torch.ones(B, N)
    for b in range(B):
        mask[b, kept[b]] = 0
    per_patch = ((pred - target) ** 2).mean(-1)
    return (per_patch * mask).sum() / mask.sum()


def test_the_module_is_the_original_mae_loss_and_gradients_included():
    torch.manual_seed(0)
    encoder = create_vit("vit_tiny", depth=2, residual="skip", init="mae", pos_embed="sincos", patch_size=P,
                         img_size=SIZE)
    net = MaskedAutoencoder(encoder, decoder_dim=32, decoder_depth=2, decoder_heads=2, mask_ratio=RATIO,
                            norm_pix_loss=True, skip_pairs=None).double()
    images = torch.randn(3, 3, SIZE, SIZE, dtype=torch.float64)
    params = [p for p in net.parameters() if p.requires_grad]

    loss, _, mask = net(images, generator=torch.Generator().manual_seed(5))
    ours = torch.autograd.grad(loss, params)
    noise = torch.rand(3, (SIZE // P) ** 2, generator=torch.Generator().manual_seed(5))  # the module's draw
    expected = reference_loss(net, images, noise.double())
    theirs = torch.autograd.grad(expected, params)

    assert mask.sum().item() == 3 * 12  # 16 patches, int(16 x 0.25) = 4 visible each
    # the module scores in float32 (its target is float32, as under autocast); the network ran in float64
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    names = [n for n, p in net.named_parameters() if p.requires_grad]
    for name, a, b in zip(names, ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7, msg=name)
    assert all(torch.count_nonzero(g) > 0 for g in ours)  # every parameter takes part
