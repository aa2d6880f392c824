"""What the evaluator tests share: a generated default dataset and a tiny seeded backbone run."""
from pathlib import Path

import torch

from skipless.data.generator.synthetic import generate
from skipless.models import create_vit, save_backbone


def tiny_run(root: Path, *, n_train: int, n_val: int, seed: int, img_size: int) -> tuple[Path, Path]:
    """``(data root, run folder)``: the scenes of ``seed`` and a 2-block skipless ViT-Ti (seed 0) in ``runs/tiny``."""
    data = generate(root / "data", n_train=n_train, n_val=n_val, seed=seed, workers=1)
    torch.manual_seed(0)
    run = root / "runs" / "tiny"
    save_backbone(run / "backbone.pt", create_vit("vit_tiny", residual="skipless", depth=2, img_size=img_size))
    return data, run
