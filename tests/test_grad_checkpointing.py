"""Activation checkpointing (``model.grad_checkpointing``): the blocks really run again in the backward pass
(each block's forward is counted: once per pass without, twice with), and the gradients are the same
with and without it, exactly (float32, CPU: the recomputation repeats the same operations on the same
inputs, and torch's checkpoint restores the random state, so drop-path draws the same masks), in every
residual mode of the backbone and for MAE's encoder (visible tokens only) and decoder."""
from __future__ import annotations

import pytest
import torch

from skipless.config import load_config
from skipless.models.block import RESIDUAL_MODES
from skipless.models.vit import create_vit
from skipless.pretrain import backbone_factory
from skipless.ssl.dino.module import DINO
from skipless.ssl.mae.autoencoder import MaskedAutoencoder
from skipless.ssl.mae.module import MAE
from skipless.reports.summary import pretrain_header
from skipless.supervised.classifier import Supervised


def count_calls(blocks) -> list[int]:
    """A counter of forward calls over ``blocks`` (a forward pre-hook on each; recomputation calls them too)."""
    calls = [0]

    def hook(module, args):
        calls[0] += 1

    for block in blocks:
        block.register_forward_pre_hook(hook)
    return calls


def gradients(model, loss_of, checkpointing: bool) -> tuple[dict[str, torch.Tensor], int]:
    """The gradients of ``loss_of(model)`` and the block forward calls it took, with or without checkpointing."""
    model.zero_grad(set_to_none=True)
    model.set_grad_checkpointing(checkpointing)
    blocks = [*model.blocks] if hasattr(model, "blocks") else [*model.encoder.blocks, *model.decoder.decoder_blocks]
    calls = count_calls(blocks)
    torch.manual_seed(1)  # drop-path and MAE's masks draw the same numbers in both passes
    loss_of(model).backward()
    for block in blocks:
        block._forward_pre_hooks.clear()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, calls[0]


@pytest.mark.parametrize("residual", RESIDUAL_MODES)
def test_checkpointing_recomputes_the_blocks_and_gives_the_same_gradients(residual):
    torch.manual_seed(0)
    model = create_vit("vit_micro", depth=2, residual=residual, img_size=32, patch_size=8, drop_path_rate=0.2).train()
    x = torch.randn(3, 3, 32, 32)
    plain, plain_calls = gradients(model, lambda m: m(x).square().sum(), False)
    again, again_calls = gradients(model, lambda m: m(x).square().sum(), True)
    assert (plain_calls, again_calls) == (2, 4)  # 2 blocks: each once, then each again in the backward pass
    assert plain.keys() == again.keys() and len(plain) == len(list(model.parameters()))
    for name, g in plain.items():
        torch.testing.assert_close(again[name], g, rtol=0, atol=0, msg=lambda m: f"{residual} {name}: {m}")


def test_mae_checkpoints_its_encoder_on_the_visible_tokens_and_its_decoder():
    torch.manual_seed(0)
    encoder = create_vit("vit_micro", depth=4, residual="decayed", img_size=32, patch_size=8, pos_embed="sincos")
    mae = MaskedAutoencoder(encoder, decoder_dim=32, decoder_depth=2, decoder_heads=2, skip_pairs=[(1, 1), (3, 0)])
    images = torch.randn(2, 3, 32, 32)
    plain, plain_calls = gradients(mae, lambda m: m(images).loss, False)
    again, again_calls = gradients(mae, lambda m: m(images).loss, True)
    assert (plain_calls, again_calls) == (6, 12)
    assert plain.keys() == again.keys() and any(n.startswith("skips.") or ".skips." in n for n in plain)
    for name, g in plain.items():
        torch.testing.assert_close(again[name], g, rtol=0, atol=0, msg=lambda m: f"{name}: {m}")
    with torch.no_grad():  # nothing to recompute without a backward pass: the blocks run once
        calls = count_calls(mae.encoder.blocks)
        mae(images)
        assert calls[0] == 4


def test_the_key_turns_it_on_for_the_trained_blocks_only():
    """DINO: the student's backbone (the teacher has no backward pass); MAE: encoder and decoder; the
    classifier: its backbone. Off by default, and the header says when it is on."""
    tiny = ["model.arch=vit_micro", "model.depth=1", "dino.out_dim=16", "dino.hidden_dim=16", "dino.bottleneck_dim=8",
            "mae.decoder.dim=16", "mae.decoder.depth=1", "mae.decoder.heads=2"]
    for on in (False, True):
        key = f"model.grad_checkpointing={str(on).lower()}"
        cfg = load_config("pretrain", [*tiny[:5], key])
        dino = DINO(cfg, lambda rate: backbone_factory(cfg, rate))
        assert (dino.student.backbone.grad_checkpointing, dino.teacher.backbone.grad_checkpointing) == (on, False)
        assert ("activation checkpointing" in pretrain_header(cfg)) == on
        cfg = load_config("pretrain", ["ssl=mae", *tiny[:2], *tiny[5:], key])
        mae = MAE(cfg, lambda rate: backbone_factory(cfg, rate))
        assert (mae.net.encoder.grad_checkpointing, mae.net.decoder.grad_checkpointing) == (on, on)
        cfg = load_config("train", [*tiny[:2], key])
        assert Supervised(cfg, 3).backbone.grad_checkpointing == on
