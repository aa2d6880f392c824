"""model.family=timm (models/timm_family.py): seeds/003 Table 4's Swin, CaiT and PVTv2 from timm, with DCT token
graying on the grid of model.patch_size before their stem, trained by make train; the readers of ViT tokens
refuse their backbones in one sentence (the pooled readers: test_timm_family_readers.py)."""
import json

import pytest
import timm
import torch

from skipless.config import ConfigError, load_config
from skipless.models.backbone_items import resolve_backbones
from skipless.models.checkpoint import BackboneLoadError, load_backbone
from skipless.models.timm_family import TimmFamilyError, create_timm_backbone
from skipless.models.token_graying import gray_images
from skipless.train import check_config, train
from tiny_runs import Losses

# Two-stage, one-block versions of each family at 32 px (the grid's patch, the constructor's arguments).
TINY = {"swin-s": ("swin_small_patch4_window7_224", 4, {"embed_dim": 12, "depths": [1, 1], "num_heads": [1, 2],
                                                        "window_size": 4}),
        "cait-s": ("cait_s24_224", 16, {"embed_dim": 24, "depth": 1, "num_heads": 2, "depth_token_only": 1}),
        "pvt-v2-b3": ("pvt_v2_b3", 4, {"embed_dims": [8, 16, 16, 16], "depths": [1, 1, 1, 1],
                                       "num_heads": [1, 1, 1, 1], "mlp_ratios": [2, 2, 2, 2]})}


def _timm_args_override(args: dict) -> str:
    return "model.timm_args={" + ", ".join(f"{k}: {v}" for k, v in args.items()) + "}"


@pytest.mark.parametrize("model", sorted(TINY))
@pytest.mark.parametrize("method,eps", [("dct", 0.9), ("svd", 0.7)])
def test_graying_feeds_the_stem_the_grayed_image_and_keeps_timms_weights(model, method, eps):
    name, patch, args = TINY[model]
    torch.manual_seed(0)
    grayed = create_timm_backbone(name, 32, patch, {"method": method, "eps": eps}, 0.0, args)
    plain = timm.create_model(name, pretrained=False, num_classes=0,
                              **({} if model == "pvt-v2-b3" else {"img_size": 32}),
                              **{k: tuple(v) if isinstance(v, list) else v for k, v in args.items()})
    plain.load_state_dict(grayed.state_dict(), strict=True)  # timm's own names: a timm state dict loads as it is
    plain.eval(), grayed.eval()
    x = torch.rand(2, 3, 32, 32)
    reference = gray_images(x, patch, method, eps)
    assert (reference - x).abs().max() > 1e-3  # the graying changes the image
    with torch.no_grad():
        torch.testing.assert_close(grayed(x), plain(reference), rtol=1e-5, atol=1e-6)
        # the stem sees another input (CaiT's LayerScale at 1e-5 hides it from the pooled output at init)
        torch.testing.assert_close(grayed.patch_embed(x), plain.patch_embed(reference), rtol=1e-5, atol=1e-6)
        assert (grayed.patch_embed(x) - plain.patch_embed(x)).abs().max() > 1e-3
    assert grayed.skipless_args["family"] == "timm" and grayed.skipless_args["timm_args"] == {
        k: tuple(v) if isinstance(v, list) else v for k, v in args.items()}


def test_no_graying_is_timms_model_unchanged():
    name, patch, args = TINY["cait-s"]
    model = create_timm_backbone(name, 32, patch, {"method": "none", "eps": None}, 0.0, args)
    assert not model.patch_embed._forward_pre_hooks


@pytest.mark.parametrize("args,message", [
    (["model.residual=skipless"], "swin_small_patch4_window7_224 has no skip the suite can remove (its skips are "
                                  "inside its blocks' forward); expected model.residual=skip, or a ConvMixer"),
    (["model.residual=decayed"], "swin_small_patch4_window7_224 has no ResNet blocks whose shortcuts the suite can "
                                 "decay; expected model.residual=skip, or a timm ResNet"),
    (["model.residual=osa"], "model.residual=osa does not apply to a timm model; expected skip, skipless"),
    (["model.init=cutskip"], "model.init=cutskip does not apply to model.family=timm"),
    (["optim.layer_decay=0.75"], "optim.layer_decay=0.75 does not apply to model.family=timm"),
    (["diagnostics.every_n_epochs=1"], "diagnostics.every_n_epochs=1 does not apply to model.family=timm"),
    (["model.timm_name=swin_nonsense"], "model.family=timm needs model.timm_name to be a timm model, got 'swin_nonsense'"),
    (["model.timm_args={nope: 1}"], "timm cannot build swin_small_patch4_window7_224 at 96 px with nope=1 ("),
])
def test_what_timm_cannot_take_is_one_sentence_before_the_run_folder(tmp_path, args, message):
    with pytest.raises(ConfigError, match=f"^{message.replace('(', '[(]').replace(')', '[)]')}"):
        check_config(load_config("train", ["model=swin-s", f"run.root={tmp_path}", *args]))
    assert not any(tmp_path.iterdir())


def test_the_vit_family_refuses_timm_keys_and_pretraining_refuses_the_family():
    with pytest.raises(ConfigError, match="^model.timm_name and model.timm_args apply to model.family=timm"):
        check_config(load_config("train", ["model.timm_name=pvt_v2_b3"]))
    from skipless.pretrain import check_keys
    with pytest.raises(ConfigError, match="^model.family must be vit: pretraining builds the suite's ViT"):
        check_keys(load_config("pretrain", ["model=swin-s"]))


def test_a_tiny_swin_with_dct_graying_trains_and_its_backbone_is_refused_by_the_readers(tmp_path):
    name, patch, args = TINY["swin-s"]
    rec = Losses()
    cfg = load_config("train", ["model=swin-s", _timm_args_override(args), "model.token_graying.method=dct",
                                "aug.image_size=32", "data.n_train=8", "data.n_val=4", "train.batch_size_per_device=4",
                                "train.num_workers=0", "train.epochs=1", "optim.warmup_epochs=0",
                                "train.precision=32-true", f"data.root={tmp_path / 'data'}", f"run.root={tmp_path}",
                                "run.name=swin"])
    trainer, module = train(cfg, extra_callbacks=[rec])
    assert len(rec.values) == 2 and all(torch.isfinite(torch.tensor(rec.values)))
    assert module.head.in_features == module.backbone.num_features == 24  # the pooled feature of the last stage
    assert module.backbone.patch_embed._forward_pre_hooks  # the graying hook is on the stem
    summary = json.loads((tmp_path / "swin" / "summary.json").read_text())
    assert summary["status"] == "finished" and "val" in summary
    saved = (tmp_path / "swin" / "config.yaml").read_text()
    assert "family: timm" in saved and "window_size: 4" in saved
    loaded = load_backbone(tmp_path / "swin" / "backbone.pt").eval()  # strictly, grayed as trained
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(loaded(x), module.backbone.eval()(x))
    with pytest.raises(BackboneLoadError, match=r"^swin is a swin_small_patch4_window7_224 \(model.family=timm\), "
                                                r"and this command reads ViT backbones only"):
        resolve_backbones(str(tmp_path / "swin"), tmp_path)


def test_init_items_offer_only_the_vit_presets():
    from skipless.models.backbone_items import BackboneNotFoundError, init_args_of, _init_overrides
    with pytest.raises(BackboneNotFoundError, match="names no model preset") as err:
        _init_overrides("init:swin-s")
    assert "model among attn-skip, decayed, mlp-skip, osa, skip, skipless," in str(err.value)  # no swin-s, cait-s
    assert init_args_of(_init_overrides("init:skip")[1])["residual"] == "skip"


def test_a_constructor_that_rejects_the_arguments_says_so():
    with pytest.raises(TimmFamilyError, match="^timm cannot build cait_s24_224 at 32 px with depth=1, nope=2"):
        create_timm_backbone("cait_s24_224", 32, 16, None, 0.0, {"depth": 1, "nope": 2})


CONVMIXER = {"dim": 16, "depth": 2, "kernel_size": 3, "patch_size": 4}


def test_convmixer_without_skips_has_no_identity_path_and_keeps_the_parameter_names():
    """seeds/003 App. B: with each depthwise convolution zeroed, the ConvMixer with skips still carries the image
    through its blocks (X' = BN(act(0)) + X), the one without carries nothing (its output is the same for every
    image); both hold the same parameters under the same names, so each loads the other's weights."""
    torch.manual_seed(0)
    skip = create_timm_backbone("convmixer", 32, 4, None, 0.0, CONVMIXER, "skip").eval()
    skipless = create_timm_backbone("convmixer", 32, 4, None, 0.0, CONVMIXER, "skipless").eval()
    skipless.load_state_dict(skip.state_dict(), strict=True)
    from skipless.models.timm_family import WithoutSkip
    assert sum(isinstance(m, WithoutSkip) for m in skipless.modules()) == 2
    with torch.no_grad():
        for model in (skip, skipless):
            for block in model.blocks:
                block[0].fn[0].weight.zero_()
                block[0].fn[0].bias.zero_()
        x = torch.rand(2, 3, 32, 32)
        out_skip, out_skipless = skip(x), skipless(x)
    assert (out_skip[0] - out_skip[1]).abs().max() > 1e-3  # the identity carries each image's own features
    torch.testing.assert_close(out_skipless[0], out_skipless[1], rtol=0, atol=1e-6)  # nothing reaches the output
    assert skipless.skipless_args["residual"] == "skipless"


def test_the_convmixer_presets_train_with_and_without_skips(tmp_path):
    for model in ("convmixer", "convmixer-skipless"):
        rec = Losses()
        cfg = load_config("train", [f"model={model}", _timm_args_override(CONVMIXER), "aug.image_size=32",
                                    "data.n_train=8", "data.n_val=4", "train.batch_size_per_device=4",
                                    "train.num_workers=0", "train.epochs=1", "optim.warmup_epochs=0",
                                    "train.precision=32-true", f"data.root={tmp_path / 'data'}",
                                    f"run.root={tmp_path}", f"run.name={model}"])
        _, module = train(cfg, extra_callbacks=[rec])
        assert len(rec.values) == 2 and all(torch.isfinite(torch.tensor(rec.values)))
        assert module.backbone.skipless_args["residual"] == ("skipless" if model.endswith("skipless") else "skip")


def test_resnet_decay_follows_eq5_in_both_readings():
    from skipless.models.decay import block_gains

    eq5 = [1 - l * (1 - 0.7) / 8 for l in range(8)]  # seeds/002 Eq. 5 as written
    torch.testing.assert_close(block_gains(8, 0.7, "layer"), torch.tensor(eq5))
    endpoint = block_gains(8, 0.7)
    assert endpoint[0] == 1.0 and endpoint[-1] == pytest.approx(0.7) and torch.all(endpoint[1:] < endpoint[:-1])


def _branch(block, x):
    return block.bn2(block.conv2(block.act1(block.bn1(block.conv1(x)))))


@pytest.mark.parametrize("layers,blocks", [([2, 2, 2, 2], 8), ([2, 2, 5, 2], 11), ([2, 2, 10, 2], 16)])
def test_a_decayed_resnet_block_is_act_of_its_gain_times_the_shortcut_plus_its_branch(layers, blocks):
    from skipless.models.decay import block_gains

    torch.manual_seed(0)
    model = create_timm_backbone("resnet18", 32, 4, None, 0.0, {"layers": layers}, "decayed", 0.6).eval()
    plain = timm.create_model("resnet18", pretrained=False, num_classes=0, layers=tuple(layers))
    plain.load_state_dict(model.state_dict(), strict=True)  # timm's names, nothing added to the state dict
    stack = [b for stage in (model.layer1, model.layer2, model.layer3, model.layer4) for b in stage]
    assert len(stack) == blocks
    gains = block_gains(blocks, 0.6)
    with torch.no_grad():
        assert all(float(b.bn2.weight.abs().max()) == 0 for b in stack)  # zero-initialised branch outputs (Sec. 3.2)
        x = torch.randn(2, 64, 8, 8)
        assert torch.allclose(stack[1](x), torch.relu(gains[1] * x))  # at init: the decayed shortcut alone
        for b in stack:
            b.bn2.weight.normal_()
        assert torch.allclose(stack[1](x), torch.relu(gains[1] * x + _branch(stack[1], x)), atol=1e-6)
        j = len(model.layer1)  # the first block of stage 2: a projection shortcut, scaled too
        proj = stack[j]
        projected = proj.downsample[1](proj.downsample[0](x))  # the projection itself, without the block's gain
        assert torch.allclose(proj(x), torch.relu(gains[j] * projected + _branch(proj, x)), atol=1e-6)


def test_the_resnet_presets_train_and_what_cannot_decay_is_refused(tmp_path):
    for model in ("resnet", "resnet-decayed"):
        cfg = load_config("train", [f"model={model}", "aug.image_size=32", "data.n_train=8", "data.n_val=4",
                                    "train.batch_size_per_device=4", "train.num_workers=0", "train.epochs=1",
                                    "optim.warmup_epochs=0", "train.precision=32-true", f"data.root={tmp_path / 'data'}",
                                    f"run.root={tmp_path}", f"run.name={model}", "diagnostics.rank_images=4"])
        _, module = train(cfg)
        assert module.backbone.skipless_args["residual"] == ("decayed" if model.endswith("decayed") else "skip")
        line = json.loads((tmp_path / model / "rank.jsonl").read_text())  # seeds/002 Fig. 4b, at the last epoch
        assert line["epoch"] == 1 and line["images"] == 4 and len(line["blocks"]) == 8  # ResNet-18's 8 blocks
        assert 0 < line["erank"] <= 4
        assert json.loads((tmp_path / model / "summary.json").read_text())["rank"] == line  # Fig. 4a's number
    with pytest.raises(ConfigError, match="^convmixer has no ResNet blocks whose shortcuts the suite can decay"):
        check_config(load_config("train", ["model=convmixer", "model.residual=decayed", f"run.root={tmp_path}/x"]))
