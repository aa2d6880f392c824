"""Bodies of the device tests, written once for any device.

``test_device_checks.py`` runs them on the CPU and on CUDA (the ``gpu`` cases skip without a CUDA
device), so a machine without a GPU still proves they work and fail when they should.
"""
from __future__ import annotations

from functools import partial

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader

from skipless.data.batched_augment import ColourDraw, ColourRecipe, apply_colour, draw_colour
from skipless.eval.tokencut.ncut import UNIQUE_GAP, affinity, lapack_spectrum, ncut_spectrum
from skipless.config import load_config
from skipless.models import create_vit, use_explicit_attention
from skipless.pretrain import backbone_factory
from skipless.ssl.dino.module import DINO
from skipless.ssl.dino.self_distillation import collate_multicrop

TINY = ["model.arch=vit_tiny", "model.depth=2", "dino.out_dim=32", "dino.hidden_dim=32",
        "dino.bottleneck_dim=16", "dino.global_crop_size=32", "dino.local_crop_size=16",
        "dino.local_crops_number=2", "train.batch_size_per_device=4", "optim.warmup_epochs=0"]


class _Crops(torch.utils.data.Dataset):
    """4 images of two 32-px global and two 16-px local crops, random pixels."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return [torch.randn(3, 32, 32, generator=g) for _ in range(2)] + \
               [torch.randn(3, 16, 16, generator=g) for _ in range(2)]


def dino_step_moves_weights(accelerator: str, precision: str = "bf16-mixed") -> None:
    """One DINO training step under ``precision``: finite loss, student moved, teacher moved by the EMA."""
    torch.manual_seed(0)
    cfg = load_config("pretrain", TINY)  # no warm-up: the first step has the peak lr, not 0
    module = DINO(cfg, partial(backbone_factory, cfg))
    student0 = {k: v.detach().clone() for k, v in module.student.backbone.state_dict().items()}
    teacher0 = {k: v.detach().clone() for k, v in module.teacher.backbone.state_dict().items()}
    trainer = pl.Trainer(accelerator=accelerator, devices=1, precision=precision, max_steps=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, DataLoader(_Crops(), batch_size=4, collate_fn=collate_multicrop))
    loss = trainer.callback_metrics["train/loss"]
    assert torch.isfinite(loss), f"loss {loss} after one {precision} step on {accelerator}"
    for name, net, before in (("student", module.student, student0), ("teacher", module.teacher, teacher0)):
        after = {k: v.detach().cpu() for k, v in net.backbone.state_dict().items()}
        assert all(torch.isfinite(v).all() for v in after.values()), f"non-finite {name} weights"
        moved = [k for k in before if not torch.equal(before[k].cpu(), after[k])]
        assert "blocks.0.attn.qkv.weight" in moved and len(moved) > len(before) // 2, f"{name} moved: {moved}"


def supervised_step_moves_weights(accelerator: str, precision: str = "bf16-mixed") -> None:
    """One supervised step with mixup/cutmix under ``precision``: finite loss, backbone and head moved."""
    from skipless.supervised.classifier import Supervised

    torch.manual_seed(0)
    cfg = load_config("train", ["model.arch=vit_tiny", "model.depth=2", "aug.image_size=32", "aug.mixup=0.8",
                                "aug.cutmix=1.0", "optim.warmup_epochs=0", "train.batch_size_per_device=4"])
    module = Supervised(cfg, num_classes=10)
    before = {k: v.detach().clone() for k, v in module.state_dict().items()}
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    data = torch.utils.data.TensorDataset(images, torch.tensor([0, 3, 3, 9]))
    trainer = pl.Trainer(accelerator=accelerator, devices=1, precision=precision, max_steps=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, DataLoader(data, batch_size=4))
    loss = trainer.callback_metrics["train/loss"]
    assert torch.isfinite(loss), f"loss {loss} after one {precision} supervised step on {accelerator}"
    after = {k: v.detach().cpu() for k, v in module.state_dict().items()}
    assert all(torch.isfinite(v).all() for v in after.values()), "non-finite weights"
    for key in ("backbone.blocks.0.attn.qkv.weight", "head.weight"):
        assert not torch.equal(before[key].cpu(), after[key]), f"{key} did not move"


def fused_attention_equals_explicit(device: str, dtype: torch.dtype) -> None:
    """SDPA and the explicit softmax path on ``device`` under ``dtype`` autocast (float32: none), same weights.

    A skipless cutskip model, so that attention is all there is between the blocks. Errors are
    relative, ``||a - b|| / ||b||`` over all tokens: float32 paths agree to 1e-5; in bfloat16 each
    path is compared with the float32 explicit result too, since both round (8 mantissa bits, 3 blocks;
    ~1e-2 measured on the CPU), and a wrong path (scale, head split) is off by O(1).
    """
    torch.manual_seed(0)
    model = create_vit("vit_small", residual="skipless", init="cutskip", depth=3).eval().to(device)
    x = torch.randn(4, 3, 96, 128, device=device)

    def run(explicit: bool, dt: torch.dtype) -> torch.Tensor:
        with torch.no_grad(), use_explicit_attention(model, explicit), torch.autocast(
                device_type=torch.device(device).type, dtype=dt, enabled=dt != torch.float32):
            return model.forward_features(x).float()

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return ((a - b).norm() / b.norm()).item()

    reference = run(True, torch.float32)
    fused, explicit = run(False, dtype), run(True, dtype)
    assert torch.isfinite(fused).all() and torch.isfinite(explicit).all()
    if dtype == torch.float32:
        assert rel(fused, explicit) < 1e-5, f"{device}: fused vs explicit {rel(fused, explicit):.2g}"
    else:
        errors = {"fused vs explicit": rel(fused, explicit), "fused vs float32": rel(fused, reference),
                  "explicit vs float32": rel(explicit, reference)}
        assert max(errors.values()) < 5e-2, f"{device} {dtype}: {errors}"


def _object_features(n_images: int, grid: int = 14, dim: int = 64, seed: int = 0) -> torch.Tensor:
    """(n, grid * grid, dim) patch features with a rectangular 'object' unlike its background, plus noise."""
    g = torch.Generator().manual_seed(seed)
    feats = []
    for _ in range(n_images):
        fg, bg = torch.randn(2, dim, generator=g)
        r0, c0 = torch.randint(0, grid // 2, (2,), generator=g).tolist()
        mask = torch.zeros(grid, grid, dtype=torch.bool)
        mask[r0:r0 + grid // 2, c0:c0 + grid // 3] = True
        base = torch.where(mask.reshape(-1, 1), fg, bg)
        feats.append(base + 0.8 * torch.randn(grid * grid, dim, generator=g))
    return torch.stack(feats)


def ncut_matches_lapack(device: str, dtype: torch.dtype = torch.float64) -> int:
    """TokenCut's batched torch eigensolver on ``device`` gives LAPACK's Ncut vectors, up to sign.

    Returns:
        how many of the graphs had a unique Ncut vector (and were compared).
    """
    feats = _object_features(6)
    adjacency = affinity(feats.to(device))
    x, gap = ncut_spectrum(adjacency, dtype)
    assert x.device.type == torch.device(device).type
    compared = 0
    for i in range(len(feats)):
        ref, ref_gap = lapack_spectrum(adjacency[i].double().cpu().numpy())
        if ref_gap < UNIQUE_GAP:
            continue
        ours = x[i].double().cpu().numpy()
        ours = ours * np.sign(ours @ ref)  # eigenvectors have an arbitrary sign
        tol = 1e-8 if dtype == torch.float64 else 2e-3
        assert np.abs(ours - ref).max() <= tol * np.abs(ref).max(), f"graph {i} on {device} ({dtype})"
        assert abs(gap[i].item() - ref_gap) <= tol * 10
        compared += 1
    assert compared >= 4, "too few graphs with a unique Ncut vector to compare"
    return compared


def batched_colour_matches_the_cpu(device: str) -> float:
    """DINO's batched colour ops (``data.augment_on=device``) on ``device`` against the CPU's with the same
    draws, every op drawn half the time: the largest difference, asserted below 2e-5 (the CPU's own agrees with
    torchvision's to that, ``tests/test_batched_augment.py``). On a GPU a difference near 5e-4 would be TF32 in
    the blur's convolution (cuDNN's ``allow_tf32``), which then needs switching off around it."""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(64, 3, 40, 40, generator=g)
    half = ColourRecipe(jitter_p=0.5, grayscale_p=0.5, blur_p=0.5, solarize_p=0.5)
    draw = draw_colour([half], 64, "cpu", g)
    on_device = ColourDraw(**{k: getattr(draw, k).to(device) for k in ColourDraw.__dataclass_fields__})
    gap = float((apply_colour(x.to(device), on_device).cpu() - apply_colour(x, draw)).abs().max())
    assert gap < 2e-5, f"the batched colour ops on {device} differ from the CPU's by {gap:.2e}"
    return gap
