"""MaskedAutoencoder around a tiny suite ViT (32 px, patch 8: 16 patches; width 32, 4 blocks):
what the encoder sees, the loss it returns, the decoder's wiring and the skips' gradient path."""
import pytest
import torch

from skipless.errors import ModelArgumentError
from skipless.models.sincos import sincos_2d
from skipless.models.vit import create_vit
from skipless.ssl.mae.autoencoder import masked_mse
from skipless.ssl.mae.autoencoder import MaskedAutoencoder
from skipless.ssl.mae.decoder import mirror_skip_pairs

DEPTH, DEC_DEPTH = 4, 2


def _encoder(residual="skip", **kw):
    torch.manual_seed(0)
    return create_vit("vit_micro", residual=residual, img_size=32, patch_size=8, embed_dim=32, depth=DEPTH,
                      num_heads=4, **kw)


def _mae(encoder=None, skips=True, **kw):
    torch.manual_seed(1)
    return MaskedAutoencoder(encoder or _encoder(), decoder_dim=32, decoder_depth=DEC_DEPTH, decoder_heads=4,
                             skip_pairs=mirror_skip_pairs(DEPTH, DEC_DEPTH) if skips else None, **kw)


def _images(B=2, H=32, W=32):
    return torch.randn(B, 3, H, W, generator=torch.Generator().manual_seed(7))


def _gen(seed=3):
    return torch.Generator().manual_seed(seed)


def test_encoder_blocks_see_only_cls_and_the_visible_patches():
    mae = _mae(_encoder("decayed"))
    lengths = []
    hooks = [b.register_forward_hook(lambda m, i, o: lengths.append((i[0].shape[1], o.shape[1])))
             for b in mae.encoder.blocks]
    loss, pred, mask = mae(_images(), generator=_gen())
    for h in hooks:
        h.remove()
    assert lengths == [(1 + 4, 1 + 4)] * DEPTH  # int(16 * 0.25) = 4 visible patches
    assert pred.shape == (2, 16, 8 * 8 * 3) and mask.sum(1).tolist() == [12.0, 12.0]
    seen = []
    h = mae.encoder.blocks[0].register_forward_hook(lambda m, i, o: seen.append(i[0].shape[1]))
    mae(_images(), mask_ratio=0.5, generator=_gen())
    h.remove()
    assert seen == [1 + 8]


def test_positions_are_added_before_masking_and_the_visible_rows_are_the_kept_ones():
    enc = _encoder()
    with torch.no_grad():
        enc.pos_embed.copy_(sincos_2d(32, 4, 4, cls_token=True))
    mae = _mae(enc)
    images = _images()
    inputs = []
    h = mae.encoder.blocks[0].register_forward_hook(lambda m, i, o: inputs.append(i[0]))
    out = mae.forward_encoder(images, generator=_gen())
    h.remove()
    full = enc.pos_embed + torch.cat([enc.cls_token.expand(2, -1, -1),
                                      enc.patch_embed(images).flatten(1, 2)], dim=1)
    x = inputs[0]
    torch.testing.assert_close(x[:, 0], full[:, 0])
    for b in range(2):
        for n in range(16):
            if out.mask[b, n] == 0:
                torch.testing.assert_close(x[b, 1 + out.ids_restore[b, n]], full[b, 1 + n])
    assert out.grid == (4, 4) and sorted(out.taps) == [1, 3]


def test_forward_loss_is_the_masked_mse_against_the_normalised_target():
    mae = _mae()
    images = _images()
    loss, pred, mask = mae(images, generator=_gen())
    target = mae.target(images)
    torch.testing.assert_close(target.mean(-1), torch.zeros(2, 16), atol=1e-5, rtol=0)
    torch.testing.assert_close(loss, masked_mse(pred, target, mask))
    plain = _mae(norm_pix_loss=False)
    torch.testing.assert_close(plain.target(images).flatten(), images.permute(0, 2, 3, 1).reshape(2, 4, 8, 4, 8, 3)
                               .permute(0, 1, 3, 2, 4, 5).flatten())


def test_decoder_position_table_is_fixed_sincos_and_mae_initialisation():
    mae = _mae()
    dec = mae.decoder
    assert not dec.decoder_pos_embed.requires_grad
    torch.testing.assert_close(dec.decoder_pos_embed, sincos_2d(32, 4, 4, cls_token=True))
    linears = [m for m in dec.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 1 + DEC_DEPTH * 4 + 1 + 2 * 2  # embed, 4 per block, pred, 2 per skip
    for m in linears:
        assert (m.bias == 0).all()
        bound = (6 / (m.in_features + m.out_features)) ** 0.5  # xavier-uniform
        assert m.weight.abs().max() <= bound and m.weight.abs().max() > 0.8 * bound
    for m in dec.modules():
        if isinstance(m, torch.nn.LayerNorm):
            assert (m.weight == 1).all() and (m.bias == 0).all()


def test_the_encoder_keeps_its_own_initialisation():
    enc = _encoder("decayed")
    before = {k: v.clone() for k, v in enc.state_dict().items()}
    mae = _mae(enc)
    assert all(torch.equal(before[k], v) for k, v in mae.encoder.state_dict().items())


def test_each_skip_carries_its_tapped_block_into_its_decoder_block():
    mae = _mae()
    assert mae.decoder.skip_pairs == [(1, 1), (3, 0)]
    seen = {}
    hooks = [mae.encoder.blocks[e].register_forward_hook(lambda m, i, o, e=e: seen.__setitem__(f"enc{e}", o))
             for e in (1, 3)]
    hooks += [mae.decoder.skips[str(d)].register_forward_hook(
        lambda m, i, o, d=d: seen.update({f"tap{d}": i[1], f"fused{d}": o})) for d in (0, 1)]
    hooks += [mae.decoder.decoder_blocks[d].register_forward_hook(
        lambda m, i, o, d=d: seen.__setitem__(f"dec{d}", i[0])) for d in (0, 1)]
    mae(_images(), generator=_gen())
    for h in hooks:
        h.remove()
    assert seen["tap1"] is seen["enc1"] and seen["tap0"] is seen["enc3"]
    assert seen["dec0"] is seen["fused0"] and seen["dec1"] is seen["fused1"]


def _encoder_grads(mae, cut_latent):
    """Per encoder block, whether every parameter got a non-zero gradient, with or without the
    latent's path (the encoder's final output) cut, so only the skips can carry the gradient."""
    mae.zero_grad(set_to_none=True)
    images = _images()
    out = mae.forward_encoder(images, generator=_gen())
    latent = out.latent.detach() if cut_latent else out.latent
    pred = mae.forward_decoder(latent, out.ids_restore, out.taps, out.grid)
    mae.forward_loss(images, pred, out.mask).backward()
    return [all(p.grad is not None and p.grad.abs().sum() > 0 for p in block.parameters())
            for block in mae.encoder.blocks]


def test_skips_carry_gradient_to_every_encoder_block_without_the_latent():
    # residual="skip" with timm's init: no zero-initialised branch layer stops a gradient by itself.
    assert _encoder_grads(_mae(skips=True), cut_latent=True) == [True] * DEPTH
    assert _encoder_grads(_mae(skips=False), cut_latent=True) == [False] * DEPTH  # the cut is real
    assert _encoder_grads(_mae(skips=False), cut_latent=False) == [True] * DEPTH


def test_skips_change_the_output_and_are_the_only_difference():
    with_skips = _mae()
    plain = _mae(with_skips.encoder, skips=False)
    result = plain.decoder.load_state_dict(with_skips.decoder.state_dict(), strict=False)
    assert not result.missing_keys and all(k.startswith("skips.") for k in result.unexpected_keys)
    images = _images()
    a = with_skips(images, generator=_gen()).pred
    b = plain(images, generator=_gen()).pred
    assert (a - b).abs().max() > 1e-2
    with torch.no_grad():  # a fuse that passes the stream through unchanged turns the skips off
        for skip in with_skips.decoder.skips.values():
            skip.fuse.weight.copy_(torch.cat([torch.eye(32), torch.zeros(32, 32)], dim=1))
            skip.fuse.bias.zero_()
    torch.testing.assert_close(with_skips(images, generator=_gen()).pred, b)


def test_another_image_size_gets_its_own_grid_and_sincos_table():
    mae = _mae()
    images = _images(H=48, W=32)
    out = mae.forward_encoder(images, generator=_gen())
    assert out.grid == (6, 4) and out.mask.shape == (2, 24)
    loss, pred, _ = mae(images, generator=_gen())
    assert pred.shape == (2, 24, 192) and torch.isfinite(loss)
    torch.testing.assert_close(mae.decoder.pos_embed((6, 4)), sincos_2d(32, 6, 4, cls_token=True))


def test_construction_refusals():
    with pytest.raises(ModelArgumentError, match="class token"):
        _mae(_encoder(class_token=False, global_pool="avg"), skips=False)
    with pytest.raises(ModelArgumentError, match="strictly between 0 and 1"):
        _mae(mask_ratio=1.0)
    with pytest.raises(ModelArgumentError, match="does not exist"):
        MaskedAutoencoder(_encoder(), decoder_dim=32, decoder_depth=2, decoder_heads=4, skip_pairs=[(4, 0)])
    with pytest.raises(ModelArgumentError, match="multiple of 4"):
        MaskedAutoencoder(_encoder(), decoder_dim=30, decoder_depth=2, decoder_heads=5)


def test_decoder_input_is_embedded_visible_tokens_in_place_mask_tokens_elsewhere_plus_sincos():
    mae = _mae(skips=False)
    images = _images()
    out = mae.forward_encoder(images, generator=_gen())
    inputs, normed = [], []
    hooks = [mae.decoder.decoder_blocks[0].register_forward_hook(lambda m, i, o: inputs.append(i[0])),
             mae.decoder.decoder_norm.register_forward_hook(lambda m, i, o: normed.append(o))]
    pred = mae.forward_decoder(out.latent, out.ids_restore, out.taps, out.grid)
    for h in hooks:
        h.remove()
    dec = mae.decoder
    embedded = dec.decoder_embed(out.latent)
    pos = sincos_2d(32, 4, 4, cls_token=True)[0]
    x = inputs[0]
    torch.testing.assert_close(x[:, 0], embedded[:, 0] + pos[0])  # CLS, zero position row
    for b in range(2):
        for n in range(16):
            token = dec.mask_token[0, 0] if out.mask[b, n] else embedded[b, 1 + out.ids_restore[b, n]]
            torch.testing.assert_close(x[b, 1 + n], token + pos[1 + n])
    # CLS carried to the end and dropped after the head: pred is the head's output on the patch rows.
    assert normed[0].shape == (2, 1 + 16, 32)
    torch.testing.assert_close(pred, dec.decoder_pred(normed[0])[:, 1:])
