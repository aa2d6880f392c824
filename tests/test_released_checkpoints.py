"""Released checkpoints as CKPT items: DINO's state dicts (plain, wrapped, prefixed) and timm's cached
weights, checked against an independent re-implementation of DINO's forward (``dino_reference``).

No file is downloaded: the "released" files are random weights under DINO's key names, and the timm
cache is a fixture laid out as ``huggingface_hub`` lays it out, with the network blocked.
"""
import argparse
import socket

import pytest
import torch
from safetensors.torch import save_file

from dino_reference import dino_tokens, released_state_dict
from skipless.eval.shared.backbones import BackboneNotFoundError, load_spec, resolve_backbones
from skipless.models import extract_features
from skipless.models.checkpoint import BackboneLoadError, load_backbone, plain_state_dict, read_backbone_args
from skipless.models.timm_weights import TimmWeightsNotCachedError, timm_backbone_args

HEADS = {384: 6, 192: 3}


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """DINO's ``dino_deitsmall16_pretrain.pth`` layout: a top-level ViT-S/16 state dict, no head."""
    sd = released_state_dict()
    path = tmp_path_factory.mktemp("released") / "dino_deitsmall16_pretrain.pth"
    torch.save(sd, path)
    return path, sd


def _assert_dino_outputs(model, sd, size, heads):
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = dino_tokens(sd, x, heads)
        cls = model(x)
        last = extract_features(model, x, layers=(-1,), norm=True)[("out", len(model.blocks) - 1)]
    torch.testing.assert_close(cls, ref[:, 0], rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(last[:, 1:], ref[:, 1:], rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("size", [(224, 224), (96, 96), (160, 224)])
def test_released_dino_state_dict_gives_dinos_own_outputs(released, tmp_path, size):
    path, sd = released
    (spec,) = resolve_backbones(f"{path}:vit_small", runs_root=tmp_path / "runs")
    assert spec.kind == "state_dict" and spec.args["pos_embed_interp"] == "dino"
    _assert_dino_outputs(load_spec(spec), sd, size, heads=6)


def test_timm_resample_would_not_give_dinos_outputs_off_the_native_grid(released):
    """The test above can fail: with timm's resample the 96-px features are far from DINO's."""
    path, sd = released
    model = load_backbone(path, arch="vit_small").eval()
    model.pos_embed_interp = "timm"
    x = torch.randn(1, 3, 96, 96)
    with torch.no_grad():
        assert (model(x) - dino_tokens(sd, x, 6)[:, 0]).abs().max() > 0.1


def test_state_dict_item_is_named_by_its_file_and_writes_under_runs(released, tmp_path):
    path, _ = released
    runs = tmp_path / "runs"
    spec, floor = resolve_backbones(f"{path}:vit_small random", runs_root=runs)
    assert spec.name == "dino_deitsmall16_pretrain" and spec.out_dir == runs / "dino_deitsmall16_pretrain" / "eval"
    assert spec.args == dict(arch="vit_small", residual="skip", init="timm", patch_size=16, img_size=224,
                             pos_embed_interp="dino")
    assert floor.is_random and floor.args == spec.args and floor.out_dir == runs / "random-vit_small-skip-timm" / "eval"


def test_plain_state_dict_without_arch_says_how_to_write_the_item(released, tmp_path):
    path, _ = released
    with pytest.raises(BackboneLoadError) as err:
        resolve_backbones(str(path), runs_root=tmp_path)
    assert f'CKPT="{path}:vit_small"' in str(err.value)
    assert "vit_tiny, vit_small, vit_base" in str(err.value)


@pytest.mark.parametrize("item, message", [
    ("{path}:vit_huge", "unknown architecture 'vit_huge'.*vit_tiny, vit_small, vit_base"),
    ("{missing}:vit_small", "no state dict at"),
])
def test_bad_state_dict_items_give_one_clear_error(released, tmp_path, item, message):
    path, _ = released
    with pytest.raises(BackboneNotFoundError, match=message):
        resolve_backbones(item.format(path=path, missing=tmp_path / "absent.pth"), runs_root=tmp_path)


def _dino_head(embed_dim=192, hidden=32, bottleneck=16, out=64):
    """DINOHead(nlayers=3) keys as a MultiCropWrapper stores them, old weight_norm names."""
    return {"head.mlp.0.weight": torch.randn(hidden, embed_dim), "head.mlp.0.bias": torch.randn(hidden),
            "head.mlp.2.weight": torch.randn(hidden, hidden), "head.mlp.2.bias": torch.randn(hidden),
            "head.mlp.4.weight": torch.randn(bottleneck, hidden), "head.mlp.4.bias": torch.randn(bottleneck),
            "head.last_layer.weight_g": torch.ones(out, 1), "head.last_layer.weight_v": torch.randn(out, bottleneck)}


DINO_HEAD_KEYS = ("head.last_layer.weight_g", "head.last_layer.weight_v", "head.mlp.0.bias", "head.mlp.0.weight",
                  "head.mlp.2.bias", "head.mlp.2.weight", "head.mlp.4.bias", "head.mlp.4.weight")


def test_dino_full_training_checkpoint_loads_its_teacher_and_drops_exactly_the_head(tmp_path):
    """DINO's ``checkpoint.pth``: student under ``module.``, teacher and student each backbone + head."""
    teacher, student = released_state_dict(192, seed=1), released_state_dict(192, seed=2)
    payload = {
        "student": {f"module.backbone.{k}": v for k, v in student.items()}
        | {f"module.{k}": v for k, v in _dino_head().items()},
        "teacher": {f"backbone.{k}": v for k, v in teacher.items()} | _dino_head(),
        "optimizer": {"state": {}, "param_groups": []}, "epoch": 100,
        "args": argparse.Namespace(arch="vit_tiny", patch_size=16), "dino_loss": {"center": torch.zeros(1, 64)},
    }
    path = tmp_path / "checkpoint.pth"
    torch.save(payload, path)
    plain = plain_state_dict(torch.load(path, weights_only=False), "checkpoint.pth")
    assert plain.wrapper == "teacher" and plain.dropped == DINO_HEAD_KEYS
    assert set(plain.state) == set(teacher)
    (spec,) = resolve_backbones(f"{path}:vit_tiny", runs_root=tmp_path / "runs")
    assert spec.name == "checkpoint"
    _assert_dino_outputs(load_spec(spec), teacher, (96, 128), heads=3)


@pytest.mark.parametrize("wrapper, prefix", [("state_dict", "module."), ("model", "backbone."), (None, "module.backbone.")])
def test_other_wrappers_and_prefixes_load(tmp_path, wrapper, prefix):
    sd = released_state_dict(192, seed=3)
    inner = {prefix + k: v for k, v in sd.items()}
    path = tmp_path / "w.pth"
    torch.save({wrapper: inner, "epoch": 3} if wrapper else inner, path)
    _assert_dino_outputs(load_backbone(path, arch="vit_tiny").eval(), sd, (64, 64), heads=3)


def test_head_keys_that_are_not_dinos_projection_head_are_refused(tmp_path):
    sd = released_state_dict(192) | {"head.weight": torch.randn(1000, 192), "head.bias": torch.randn(1000)}
    path = tmp_path / "supervised.pth"
    torch.save(sd, path)
    assert plain_state_dict(sd).dropped == ()
    with pytest.raises(BackboneLoadError, match=r"2 unexpected keys \(head.bias, head.weight\)"):
        load_backbone(path, arch="vit_tiny")


def test_wrapper_without_a_state_dict_lists_what_it_found(tmp_path):
    path = tmp_path / "odd.pth"
    torch.save({"epoch": 1, "weights": {"a": 1}}, path)
    with pytest.raises(BackboneLoadError, match="teacher, state_dict, model, student.*found: epoch, weights"):
        load_backbone(path, arch="vit_small")


def test_patch14_checkpoint_takes_patch_and_grid_from_the_weights(tmp_path):
    sd = released_state_dict(384, patch=14, grid=16, seed=4)
    path = tmp_path / "dino_vits14.pth"
    torch.save(sd, path)
    assert read_backbone_args(path, "vit_small")["patch_size"] == 14
    model = load_backbone(path, arch="vit_small").eval()
    assert model.patch_embed.patch_size == (14, 14) and model.patch_embed.grid_size == (16, 16)
    for size in [(224, 224), (98, 126)]:
        _assert_dino_outputs(model, sd, size, heads=6)


# --- timm weights from the local Hugging Face cache -------------------------------------------------

SHA = "0123456789abcdef0123456789abcdef01234567"


def _hub_cache(root, repo, state):
    """One cached file as huggingface_hub stores it: refs/main -> snapshots/<sha>/model.safetensors."""
    folder = root / ("models--" + repo.replace("/", "--"))
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(SHA)
    (folder / "snapshots" / SHA).mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in state.items()}, folder / "snapshots" / SHA / "model.safetensors")
    return folder / "snapshots" / SHA / "model.safetensors"


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty hub cache under tmp_path, offline mode on, and any network connection an error."""
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    def no_network(*args, **kwargs):
        raise AssertionError("a test tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    return cache


def test_timm_name_loads_from_the_local_cache_with_dinos_outputs(offline_hub, tmp_path):
    sd = released_state_dict(seed=5)  # timm's vit_small_patch16_224.dino holds DINO's keys unchanged
    file = _hub_cache(offline_hub, "timm/vit_small_patch16_224.dino", sd)
    runs = tmp_path / "runs"
    (spec,) = resolve_backbones("timm:vit_small_patch16_224.dino", runs_root=runs)
    assert spec.kind == "timm" and spec.path == file
    assert spec.name == "timm-vit_small_patch16_224.dino" and spec.out_dir == runs / spec.name / "eval"
    assert spec.args["arch"] == "vit_small" and spec.args["pos_embed_interp"] == "dino"
    model = load_spec(spec)
    for size in [(224, 224), (96, 96)]:
        _assert_dino_outputs(model, sd, size, heads=6)


def test_timm_classifier_weights_lose_their_head_through_timm(offline_hub):
    """A supervised timm checkpoint: timm itself drops ``head.*`` when asked for num_classes=0."""
    import timm
    ref = timm.create_model("deit_tiny_patch16_224", num_classes=1000).eval()
    _hub_cache(offline_hub, "timm/deit_tiny_patch16_224.fb_in1k", ref.state_dict())
    (spec,) = resolve_backbones("timm:deit_tiny_patch16_224.fb_in1k", runs_root=offline_hub)
    model = load_spec(spec)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref.forward_head(ref.forward_features(x), pre_logits=True))


@pytest.mark.parametrize("item, error, message", [
    ("timm:vit_small_patch16_224.dino", TimmWeightsNotCachedError, "not in the local Hugging Face cache"),
    ("timm:vit_small_patch16_224.nope", BackboneLoadError, "not a timm model with pretrained weights"),
    ("timm:", BackboneNotFoundError, "names no model"),
])
def test_missing_or_unknown_timm_weights_give_one_clear_error(offline_hub, item, error, message):
    with pytest.raises(error, match=message):
        resolve_backbones(item, runs_root=offline_hub)


def test_timm_vit_of_another_shape_is_refused():
    with pytest.raises(BackboneLoadError, match=r"\(512, 12, 8\); skipless builds vit_tiny \(192, 12, 3\)"):
        timm_backbone_args("vit_medium_patch16_gap_256.sw_in12k_ft_in1k")
