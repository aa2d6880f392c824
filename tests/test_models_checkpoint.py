"""Backbone files: round trip, plain timm state dicts, and the errors a user meets."""
import pytest
import timm
import torch

from skipless.models import BackboneLoadError, create_vit, load_backbone, save_backbone


def test_round_trip_rebuilds_the_exact_model(tmp_path):
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="decayed", alpha_min=0.7, depth=3, patch_size=8).eval()
    with torch.no_grad():
        for blk in model.blocks:  # decayed starts with zero outputs; make them matter
            blk.attn.proj.weight.normal_(0, 0.02)
    path = save_backbone(tmp_path / "backbone.pt", model, extra={"epoch": 3})
    loaded = load_backbone(path).eval()
    assert loaded.skipless_args == model.skipless_args
    x = torch.randn(2, 3, 32, 40)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x))
    saved = torch.load(path, weights_only=True)
    assert not any(k.startswith(("module.", "backbone.")) for k in saved["state_dict"])
    assert saved["extra"] == {"epoch": 3}


def test_plain_timm_state_dict_needs_arch_then_loads_as_skip(tmp_path):
    ref = timm.create_model("vit_tiny_patch16_224", num_classes=0, pretrained=False).eval()
    path = tmp_path / "timm.pth"
    torch.save({"module." + k: v for k, v in ref.state_dict().items()}, path)
    with pytest.raises(BackboneLoadError, match="pass arch="):
        load_backbone(path)
    model = load_backbone(path, arch="vit_tiny").eval()
    assert model.residual == "skip"
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref(x))


def test_checkpoint_of_another_architecture_is_refused(tmp_path):
    model = create_vit("vit_tiny", depth=2)
    path = save_backbone(tmp_path / "b.pt", model)
    payload = torch.load(path, weights_only=True)
    payload["args"]["arch"] = "vit_small"
    torch.save(payload, path)
    with pytest.raises(BackboneLoadError, match="does not match the architecture vit_small"):
        load_backbone(path)


def test_corrupt_and_missing_files_give_one_clear_error(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(BackboneLoadError, match="not a readable backbone file") as err:
        load_backbone(bad)
    assert len(str(err.value).splitlines()) == 1 and "expected a file written by save_backbone" in str(err.value)
    with pytest.raises(FileNotFoundError, match="no backbone file"):
        load_backbone(tmp_path / "absent.pt")


def test_atomic_save_leaves_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    model = create_vit("vit_tiny", depth=1)
    path = save_backbone(tmp_path / "b.pt", model)
    before = path.read_bytes()

    def broken_save(obj, f):
        with open(f, "wb") as fh:
            fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError):
        save_backbone(path, model)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["b.pt"]


def test_backbone_file_without_pos_embed_interp_loads_as_timm(tmp_path):
    """Files written before the argument existed were trained with timm's resample; the format stays /1."""
    model = create_vit("vit_tiny", depth=1, pos_embed_interp="timm").eval()
    path = save_backbone(tmp_path / "old.pt", model)
    payload = torch.load(path, weights_only=True)
    assert payload["format"] == "skipless-backbone/1"
    del payload["args"]["pos_embed_interp"]
    torch.save(payload, path)
    loaded = load_backbone(path).eval()
    assert loaded.pos_embed_interp == "timm" and loaded.skipless_args["pos_embed_interp"] == "timm"
    x = torch.randn(1, 3, 48, 80)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


def test_plain_state_dict_records_patch_grid_and_dino_resample(tmp_path):
    ref = timm.create_model("vit_tiny_patch16_224", num_classes=0, pretrained=False, patch_size=8, img_size=64)
    path = tmp_path / "p8.pth"
    torch.save(ref.state_dict(), path)
    model = load_backbone(path, arch="vit_tiny")
    assert model.skipless_args == {**model.skipless_args, "residual": "skip", "patch_size": 8, "img_size": 64,
                                   "pos_embed_interp": "dino"}
    assert model.patch_embed.grid_size == (8, 8)
