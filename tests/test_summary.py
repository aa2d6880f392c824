"""The header an entry point prints: the values a user wants to see, the peak lr worked out."""
import math

import pytest
import torch

from skipless.config import load_config
from skipless.ssl import method_of
from skipless.reports.summary import describe_model, lr_key, peak_lr
from skipless.reports.summary import pretrain_header as shared_header


def pretrain_header(cfg, run_dir=None):
    """The header make pretrain prints: the shared lines and the method's (pretrain.main)."""
    return shared_header(cfg, run_dir, method_lines=method_of(cfg).header(cfg))


def test_demo_header_shows_its_recipe():
    text = pretrain_header(load_config("pretrain"), "runs/skipless-adamw-default")
    for part in ("ssl=dino model=skipless optim=adamw data=default recipe=demo -> runs/skipless-adamw-default",
                 "vit_tiny/16", "residual skipless", "init cutskip (alpha 1.8, beta 1, c 3, center_mlp true, qk head)",
                 "pooling avg", "drop-path 0", "2 x 96 px + 4 x 48 px", "1024 prototypes", "teacher temp 0.02",
                 "4 epochs", "global batch 32 = 32/device x 1 device, no accumulation", "adamw",
                 "peak lr 0.0003 = model.lr.adamw 0.0005 x optim.lr_scale 4.8 x 32/256", "epochs: none"):
        assert part in text, part


def test_paper_header_scales_the_lr_with_the_global_batch():
    cfg = load_config("pretrain", ["data=imagenet", "model=skip", "optim=soap", "recipe=paper300",
                                   "train.devices=8", "train.num_nodes=2"])
    text = pretrain_header(cfg)
    for part in ("vit_small/16", "residual skip", "init timm,", "pooling token", "2 x 224 px + 8 x 96 px",
                 "65536 prototypes", "norm_last_layer false", "teacher temp 0.04 -> 0.07 over 30 epochs",
                 "300 epochs", "global batch 1024 = 64/device x 16 devices, no accumulation", "soap",
                 "peak lr 0.002 = model.lr.soap",
                 "epochs: 200, 300"):
        assert part in text, part


@pytest.mark.parametrize("devices,nodes,gpus,world", [(1, 1, 0, 1), (4, 2, 0, 8), ("auto", 1, 0, 1), ("auto", 2, 3, 6)])
def test_peak_lr_is_lr_times_scale_times_global_batch_over_256(monkeypatch, devices, nodes, gpus, world):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)  # devices=auto: every GPU seen, else 1
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    cfg = load_config("pretrain", [f"train.devices={devices}", f"train.num_nodes={nodes}", "optim.lr_scale=2"])
    expected = 5e-4 * 2 * 32 * world / 256
    assert math.isclose(peak_lr(cfg), expected)
    assert math.isclose(peak_lr(cfg, world=3), 5e-4 * 2 * 32 * 3 / 256)
    devices = f"{world} device" + ("s" if world > 1 else "")
    assert f"global batch {32 * world} = 32/device x {devices}, no accumulation" in pretrain_header(cfg)


@pytest.mark.parametrize("devices,nodes,steps", [(8, 1, 2), (4, 1, 4), (1, 1, 16), (8, 2, 1)])
def test_the_paper_header_states_the_accumulation_of_its_global_batch(devices, nodes, steps):
    """DINO's 1024 images per step (recipe/dino-paper.yaml) on any number of devices: the lr stays that of 1024."""
    cfg = load_config("pretrain", ["data=imagenet", "train.accelerator=cpu", f"train.devices={devices}",
                                   f"train.num_nodes={nodes}"])
    world = devices * nodes
    text = pretrain_header(cfg)
    made = f"64/device x {world} device{'s' if world > 1 else ''}" + (
        f" x {steps} accumulation steps" if steps > 1 else ", no accumulation")
    assert f"global batch 1024 = {made}" in text
    assert "peak lr 0.002 = model.lr.adamw 0.0005 x optim.lr_scale 1 x 1024/256" in text


def test_lr_key_names_the_key_that_set_the_lr():
    assert lr_key(load_config("pretrain", ["optim=soap", "model.lr.soap=1e-4"])) == "model.lr.soap"
    assert lr_key(load_config("pretrain", ["optim.lr=2e-4"])) == "optim.lr"


def test_describe_model_reads_a_backbone_files_arguments():
    args = {"arch": "vit_base", "residual": "decayed", "init": "timm", "alpha_min": 0.5, "patch_size": 8,
            "depth": 6, "global_pool": "token", "drop_path_rate": 0.1}
    assert describe_model(args) == ("vit_base/8, 6 blocks, residual decayed, init timm, alpha_min 0.5, "
                                    "pooling token, drop-path 0.1")
