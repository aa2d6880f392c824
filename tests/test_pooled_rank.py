"""The effective rank of a CNN's pooled features and of each block's (analysis/pooled_rank.py, seeds/002 Fig. 4),
against numpy's covariance and the blocks run by hand."""
import math

import numpy as np
import pytest
import torch

from skipless.analysis.pooled_rank import pooled_feature_rank
from skipless.models.timm_family import TimmFamilyError, create_timm_backbone
from skipless.training.rank_monitor import feature_rank, scalars


def numpy_rank(features: np.ndarray) -> tuple[float, float]:
    """rho (Eq. 6) of numpy's covariance of the samples (rows), and exp(rho), in float64."""
    eig = np.clip(np.linalg.eigvalsh(np.cov(features.astype(np.float64))), 0, None)
    eig = eig[eig > eig.max() * 1e-12]
    p = eig / eig.sum()
    rho = float(-(p * np.log(p)).sum())
    return rho, math.exp(rho)


def _decayed_resnet():
    torch.manual_seed(0)
    model = create_timm_backbone("resnet18", 32, 16, residual="decayed", alpha_min=0.5,
                                 timm_args={"layers": [1, 1, 1, 1], "channels": [8, 8, 16, 16], "stem_width": 8})
    with torch.no_grad():  # the branches off their zero init, so each block changes what passes
        for name, p in model.named_parameters():
            if name.endswith("bn2.weight"):
                p.normal_()
    return model.train()  # measured in eval mode, its mode given back


def test_the_rank_is_that_of_the_pooled_feature_and_of_each_block_run_by_hand():
    model = _decayed_resnet()
    images = torch.randn(12, 3, 32, 32)
    rank = pooled_feature_rank(model, images, batch_size=5)  # three batches, one of 2
    assert model.training and rank["images"] == 12
    model.eval()
    with torch.no_grad():
        pooled = model(images).numpy()
        h = model.maxpool(model.act1(model.bn1(model.conv1(images))))
        by_hand = []
        for stage in (model.layer1, model.layer2, model.layer3, model.layer4):
            for block in stage:
                h = block(h)
                by_hand.append(h.mean(dim=(2, 3)).numpy())
    assert rank["rho"] == pytest.approx(numpy_rank(pooled)[0], rel=1e-6)
    assert rank["erank"] == pytest.approx(numpy_rank(pooled)[1], rel=1e-6)
    assert len(rank["blocks"]) == 4
    for i, features in enumerate(by_hand):
        assert rank["blocks"][str(i)]["rho"] == pytest.approx(numpy_rank(features)[0], rel=1e-6)
    assert len({round(b["rho"], 6) for b in rank["blocks"].values()}) == 4  # the blocks differ: no block read twice


def test_a_convmixer_reads_its_mixer_layers_and_a_swin_is_refused():
    torch.manual_seed(0)
    mixer = create_timm_backbone("convmixer", 32, 4, timm_args={"dim": 8, "depth": 3, "kernel_size": 3, "patch_size": 4})
    rank = feature_rank(mixer, torch.randn(6, 3, 32, 32))
    assert len(rank["blocks"]) == 3 and 0 < rank["erank"] <= 6
    assert set(scalars(rank)) == {"watch/rank/rho", "watch/rank/erank",
                                  *(f"watch/rank/blocks/{i}/{k}" for i in range(3) for k in ("rho", "erank"))}
    swin = create_timm_backbone("swin_small_patch4_window7_224", 32, 4,
                                timm_args={"embed_dim": 8, "depths": [1, 1], "num_heads": [1, 1], "window_size": 4})
    with pytest.raises(TimmFamilyError, match="^swin_small_patch4_window7_224 has no flat sequence of blocks"):
        feature_rank(swin, torch.randn(2, 3, 32, 32))


def test_one_image_four_times_has_rank_one():
    """The covariance is between the images (effective_rank.py): identical features give rank one, rho 0."""
    torch.manual_seed(0)
    mixer = create_timm_backbone("convmixer", 32, 4, timm_args={"dim": 8, "depth": 2, "kernel_size": 3, "patch_size": 4})
    rank = pooled_feature_rank(mixer, torch.randn(1, 3, 32, 32).expand(4, -1, -1, -1))
    assert rank["rho"] == pytest.approx(0, abs=1e-9) and rank["erank"] == pytest.approx(1)
    assert all(b["erank"] == pytest.approx(1) for b in rank["blocks"].values())
