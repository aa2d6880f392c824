"""What the k-NN and linear evaluator tests share: a tiny in-memory labelled dataset and a tiny backbone."""
from pathlib import Path

import numpy as np
import torch

from skipless.data.classification.registry import LabelledImages
from skipless.models import create_vit, save_backbone

CLASSES = ("red", "green", "blue", "yellow", "cyan", "magenta")
COLOURS = np.array([[220, 30, 30], [30, 200, 40], [40, 50, 220], [230, 220, 30], [30, 220, 220], [210, 40, 210]])
SMALL = ["features.resize=32", "features.crop=32", "features.n_last_blocks=2", "features.num_workers=0",
         "progress=false"]


def colour_images(split: str, per_class: int, size: int = 32) -> LabelledImages:
    """``per_class`` noisy images of each colour (a different seed per split): linearly separable classes."""
    rng = np.random.default_rng(0 if split == "train" else 1)
    items, labels = [], []
    for c, colour in enumerate(COLOURS):
        for _ in range(per_class):
            noise = rng.normal(0, 25, (size, size, 3))
            items.append(np.clip(colour + noise, 0, 255).astype(np.uint8))
            labels.append(c)
    return LabelledImages(f"colours {split}", items, labels, CLASSES)


def register_colours(monkeypatch, per_class: dict | None = None) -> None:
    """Add ``colours`` (train 4, val 2 images per class) to the classification registry for one test."""
    from skipless.data.classification import registry as classification

    per_class = per_class or {"train": 4, "val": 2}
    monkeypatch.setitem(classification.READERS, "colours",
                        lambda root, split, transform: colour_images(split, per_class[split]))


def tiny_backbone(folder: Path) -> Path:
    """A 2-block skipless ViT-Ti (seed 0) saved as ``<folder>/backbone.pt``; returns the run folder."""
    torch.manual_seed(0)
    save_backbone(folder / "backbone.pt", create_vit("vit_tiny", residual="skipless", depth=2, img_size=32))
    return folder
