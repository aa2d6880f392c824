"""Datasets and loaders of a pretraining run, chosen by ``cfg.data.name``.

``default``: the embedded generated scenes (VOC layout, generated on first use); pretraining reads
the train split's images, and the k-NN monitor labels train and val images with their dominant
object class. ``imagenet``: an ImageNet-style folder at ``cfg.data.root`` (labels unused).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch
from omegaconf import DictConfig
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

from ..config import ConfigError
from ..data.image_folder import ImageFolderDataset, VOCImages
from ..data.synthetic import ensure_default
from ..data.voc import VOCClassification
from ..data.conventions import IMAGENET_MEAN, IMAGENET_STD
from ..ssl.multicrop import MultiCropAugmentation, collate_multicrop

DATASETS = ("default", "imagenet")


def multicrop_from_config(cfg: DictConfig) -> MultiCropAugmentation:
    d = cfg.dino
    return MultiCropAugmentation(
        global_crops_scale=tuple(d.global_crops_scale), local_crops_scale=tuple(d.local_crops_scale),
        local_crops_number=d.local_crops_number, global_size=d.global_crop_size, local_size=d.local_crop_size)


def pretrain_dataset(cfg: DictConfig) -> Dataset:
    """Multi-crop views of the pretraining images; generates the default dataset if missing."""
    name = cfg.data.name
    if name not in DATASETS:
        raise ConfigError(f"unknown pretraining data {name!r}; expected one of: {', '.join(DATASETS)}")
    aug = multicrop_from_config(cfg)
    if name == "default":
        root = ensure_default(Path(cfg.data.root), n_train=cfg.data.n_train, n_val=cfg.data.n_val,
                              seed=cfg.data.seed)
        return VOCImages(root, "train", transform=aug)
    return ImageFolderDataset(cfg.data.root, transform=aug)


def pretrain_loader(cfg: DictConfig, dataset: Dataset) -> DataLoader:
    return DataLoader(dataset, batch_size=cfg.train.batch_size_per_device, shuffle=True, drop_last=True,
                      num_workers=cfg.train.num_workers, collate_fn=collate_multicrop,
                      pin_memory=torch.cuda.is_available(),
                      # fresh workers each epoch, seeded from the (checkpointed) RNG: exact resume
                      persistent_workers=False)


def knn_loaders(cfg: DictConfig) -> tuple[Callable, Callable, int] | None:
    """(train batches, val batches, number of classes) for the k-NN monitor; None without labels."""
    if cfg.data.name != "default":
        return None
    root = Path(cfg.data.root)
    size = cfg.dino.global_crop_size
    tf = transforms.Compose([
        transforms.Resize(size, interpolation=transforms.InterpolationMode.BICUBIC),
        transforms.CenterCrop(size), transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    splits = {s: VOCClassification(root, s, transform=tf) for s in ("train", "val")}
    num_classes = splits["train"].num_classes

    def batches(split: str) -> Callable:
        return lambda: DataLoader(splits[split], batch_size=64, num_workers=cfg.train.num_workers)

    return batches("train"), batches("val"), num_classes
