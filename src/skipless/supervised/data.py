"""The labelled splits and loaders of a supervised run, by ``cfg.data.name`` (``data/classification/``).

The default is generated on first use, as for pretraining. The training loader is the pretraining's
(one full batch per device checked before anything is written, ``SkipTally`` counting unreadable
images over worker processes, fresh workers each epoch for exact resume); the validation loader keeps
every image in order.
"""
from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader

from ..data.classification.registry import LabelledImages, classification_split
from ..data.generator.synthetic import ensure_default
from ..training.data import check_one_batch, limit_reads, training_loader
from .augment import eval_transform, train_transform


def labelled_splits(cfg: DictConfig) -> tuple[LabelledImages, LabelledImages]:
    """(train split with the training transform, val split with the validation transform), each read under
    ``data.max_image_pixels`` and ``data.min_image_side`` (``training/data.py limit_reads``)."""
    d = cfg.data
    root = Path(d.root)
    if d.name == "default":
        root = ensure_default(root, n_train=d.n_train, n_val=d.n_val, seed=d.seed)
    train = classification_split(d.name, root, "train", transform=train_transform(cfg.aug))
    val = classification_split(d.name, root, "val", transform=eval_transform(cfg.aug))
    return limit_reads(cfg, train), limit_reads(cfg, val)


def _workers(cfg: DictConfig) -> dict:
    return dict(num_workers=cfg.train.num_workers, pin_memory=torch.cuda.is_available(), persistent_workers=False)


def train_loader(cfg: DictConfig, dataset: LabelledImages) -> DataLoader:
    """Shuffled full batches of ``dataset`` (in a ``SkipTally``), each the images of one optimizer step per
    device (``training/data.py``); refuses a dataset with no full batch."""
    check_one_batch(cfg, len(dataset))
    return training_loader(cfg, dataset)


def val_loader(cfg: DictConfig, dataset: LabelledImages) -> DataLoader:
    """Every image of ``dataset`` in order (Lightning shards it over ranks under DDP)."""
    return DataLoader(dataset, batch_size=cfg.train.batch_size_per_device, shuffle=False, drop_last=False,
                      **_workers(cfg))
