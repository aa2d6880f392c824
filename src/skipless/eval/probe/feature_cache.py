"""Frozen patch features, computed once per image and cached: what makes the probe fast.

The backbone is frozen and the probe uses no augmentation, so the features of an image are the
same at every epoch and for every learning rate. ``build_cache`` runs the backbone once over a
split and stores, per image, the patch tokens of the chosen blocks (concatenated along channels,
float16) and the label map resized to the probe's label resolution; the heads then train for 30
epochs x every learning rate on the stored arrays. The cost of a whole sweep is one backbone pass
(``bench/probe_sweep.py`` measures it against running the backbone every epoch and lr).

The cache lives in memory or in ``.npy`` files memory-mapped under the run folder
(``<run>/eval/cache/...``); a folder is complete once its ``meta.json`` is written (last), and is
reused when its key (backbone file, dataset, image ids, layers, resolution, ...) is the same.

Without augmentation the head sees each image at one scale and without flips; with cached
features that is the price of speed, and the usual choice for fast linear probes. Images are
resized to a fixed ``resolution x resolution`` square (aspect ratio not kept), so every image
has the same patch grid and the cache is one dense array.
"""
from __future__ import annotations

import json
import os
import shutil
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm import tqdm

from skipless.atomic import atomic_write
from skipless.data.conventions import IMAGENET_MEAN as MEAN
from skipless.data.conventions import IMAGENET_STD as STD
from skipless.data.errors import CorruptImageWarning
from skipless.data.segmentation.interface import check_pair
from skipless.models import patch_features, patch_grid, resolve_layers

FORMAT = "skipless-probe-cache/1"


def image_tensor(image: Image.Image, resolution: int) -> torch.Tensor:
    """RGB image -> (3, R, R) float tensor, bicubic resize, ImageNet-normalised."""
    image = image.resize((resolution, resolution), Image.BICUBIC)
    x = torch.from_numpy(np.asarray(image, dtype=np.float32).copy()).permute(2, 0, 1) / 255.0
    return (x - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(3, 1, 1)


def label_tensor(mask: np.ndarray, size: int) -> torch.Tensor:
    """Label map -> (size, size) uint8 tensor, nearest-neighbour resize (labels are never blended)."""
    resized = Image.fromarray(mask).resize((size, size), Image.NEAREST)
    return torch.from_numpy(np.asarray(resized, dtype=np.uint8).copy())


class ProbeSamples(Dataset):
    """``(image tensor, label tensor, ok)`` of a segmentation dataset at the probe's sizes.

    An unreadable image is not fatal: it comes back with ``ok=False``, a zero
    image and an all-ignore label, and the caller leaves it out and counts it.
    """

    def __init__(self, dataset: Any, resolution: int, label_size: int) -> None:
        self.dataset, self.resolution, self.label_size = dataset, int(resolution), int(label_size)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
        try:
            image = self.dataset.image(index)
        except (OSError, SyntaxError) as err:
            warnings.warn(f"skipping unreadable image {self.dataset.ids[index]} ({type(err).__name__}: {err})",
                          CorruptImageWarning, stacklevel=2)
            return (torch.zeros(3, self.resolution, self.resolution),
                    torch.full((self.label_size, self.label_size), 255, dtype=torch.uint8), False)
        mask = self.dataset.mask(index)
        check_pair(image, mask, self.dataset.ids[index])
        return image_tensor(image, self.resolution), label_tensor(mask, self.label_size), True


def stacked_patches(model: nn.Module, x: torch.Tensor, layers: Sequence[int], norm: bool) -> torch.Tensor:
    """Patch features of ``layers`` (block outputs) concatenated along channels in ascending block order:
    (B, h, w, blocks x C), the layout of the cache."""
    return torch.cat(list(patch_features(model, x, layers, "out", norm=norm).values()), dim=-1)


@dataclass
class FeatureCache:
    """Cached features and labels of one split.

    Attributes:
        feats: (N, h, w, C) float16, the blocks of ``layers`` concatenated (``dim`` channels each).
        labels: (N, L, L) uint8, train ids with 255 ignored, at the label resolution.
        valid: (N,) bool, False for unreadable images (left out of training and scoring).
        layers: the cached block indices, sorted.
        dim: channels per block.
        folder: the cache folder, or None when held in memory.
        extract_s: seconds the backbone pass took (0 when the cache was reused).
    """

    feats: np.ndarray
    labels: np.ndarray
    valid: np.ndarray
    layers: tuple[int, ...]
    dim: int
    folder: Path | None = None
    extract_s: float = 0.0
    reused: bool = False
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.feats.shape[0])

    @property
    def grid(self) -> tuple[int, int]:
        return int(self.feats.shape[1]), int(self.feats.shape[2])

    def channels(self, layers: Sequence[int]) -> np.ndarray:
        """Channel indices of the given cached blocks, in the order given."""
        missing = [i for i in layers if i not in self.layers]
        if missing:
            raise ValueError(f"blocks {missing} are not in the cache (it holds {list(self.layers)})")
        return np.concatenate([np.arange(self.dim) + self.layers.index(i) * self.dim for i in layers])

    def batch(self, indices: np.ndarray, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
        """Features (B, C, h, w) float32 and labels (B, L, L) int64 of the images ``indices`` on ``device``."""
        order = np.sort(indices)  # memory maps read faster in file order; the batch's order does not matter
        x = torch.from_numpy(np.ascontiguousarray(self.feats[order])).to(device, non_blocking=True)
        y = torch.from_numpy(np.ascontiguousarray(self.labels[order])).to(device, non_blocking=True)
        return x.permute(0, 3, 1, 2).float(), y.long()

    def delete(self) -> None:
        """Remove the cache folder (memory caches have nothing to remove)."""
        if self.folder is not None:
            self.feats = self.labels = np.empty(0)
            shutil.rmtree(self.folder, ignore_errors=True)


def open_cache(folder: str | os.PathLike, key: dict) -> FeatureCache | None:
    """A complete cache in ``folder`` built with the same ``key``, memory-mapped read-only, or None."""
    folder = Path(folder)
    meta_path = folder / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if meta.get("format") != FORMAT or meta.get("key") != json.loads(json.dumps(key)):
        return None
    return FeatureCache(np.load(folder / "feats.npy", mmap_mode="r"), np.load(folder / "labels.npy", mmap_mode="r"),
                        np.load(folder / "valid.npy"), tuple(meta["layers"]), int(meta["dim"]), folder,
                        reused=True, meta=meta)


@torch.inference_mode()
def build_cache(model: nn.Module, dataset: Any, layers: Sequence[int], *, resolution: int, label_size: int,
                norm: bool = True, device: torch.device | str = "cpu", batch_size: int = 32,
                num_workers: int = 0, folder: str | os.PathLike | None = None, key: dict | None = None,
                amp: bool = True, progress: bool = True, desc: str = "features") -> FeatureCache:
    """Run the frozen backbone once over ``dataset`` and store its patch features and labels.

    Args:
        model: the frozen backbone (``eval/backbones.load_spec``), already on ``device``.
        dataset: a segmentation reader (``skipless.data.SEGMENTATION_DATASETS``).
        layers: block indices to store (negative counts from the end).
        resolution: images are resized to ``resolution x resolution`` (a multiple of the patch size).
        label_size: labels are resized (nearest) to ``label_size x label_size``.
        norm: apply the backbone's final LayerNorm to every block's tokens.
        folder: memory-map the arrays into this folder (reused if complete with the same ``key``);
            None keeps them in memory.
        key: what identifies the cache's content (stored in ``meta.json``).
        amp: bfloat16 autocast on CUDA (ignored on the CPU).
    """
    depth = len(model.blocks)
    layers = resolve_layers(layers, depth)
    key = dict(key or {}, layers=layers, resolution=int(resolution), label_size=int(label_size),
               norm=bool(norm), n=len(dataset))
    if folder is not None:
        found = open_cache(folder, key)
        if found is not None:
            return found
    h, w = patch_grid(model, resolution, resolution)
    dim = int(model.embed_dim)
    shape = (len(dataset), h, w, dim * len(layers))
    if folder is not None:
        folder = Path(folder)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        feats = np.lib.format.open_memmap(folder / "feats.npy", mode="w+", dtype=np.float16, shape=shape)
        labels = np.lib.format.open_memmap(folder / "labels.npy", mode="w+", dtype=np.uint8,
                                           shape=(len(dataset), label_size, label_size))
    else:
        feats = np.empty(shape, dtype=np.float16)
        labels = np.empty((len(dataset), label_size, label_size), dtype=np.uint8)
    valid = np.zeros(len(dataset), dtype=bool)
    device = torch.device(device)
    loader = DataLoader(ProbeSamples(dataset, resolution, label_size), batch_size=batch_size, shuffle=False,
                        num_workers=num_workers, pin_memory=device.type == "cuda")
    start, t0 = 0, time.perf_counter()
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp and device.type == "cuda")
    try:
        with tqdm(total=len(dataset), desc=desc, unit="img", disable=not progress, leave=False) as bar:
            for x, y, ok in loader:
                with autocast:
                    f = stacked_patches(model, x.to(device, non_blocking=True), layers, norm)
                end = start + x.shape[0]
                feats[start:end] = f.float().cpu().numpy().astype(np.float16)
                labels[start:end] = y.numpy()
                valid[start:end] = ok.numpy()
                start = end
                bar.update(x.shape[0])
    except BaseException:  # interrupted or failed: leave no half-written cache (gigabytes) behind
        if folder is not None:
            del feats, labels
            shutil.rmtree(folder, ignore_errors=True)
        raise
    extract_s = time.perf_counter() - t0
    meta = {"format": FORMAT, "key": json.loads(json.dumps(key)), "layers": layers, "dim": dim,
            "skipped": int((~valid).sum()), "extract_s": extract_s}
    if folder is not None:
        feats.flush()
        labels.flush()
        np.save(folder / "valid.npy", valid)
        atomic_write(folder / "meta.json", lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=1)))
        feats = np.load(folder / "feats.npy", mmap_mode="r")
        labels = np.load(folder / "labels.npy", mmap_mode="r")
    return FeatureCache(feats, labels, valid, tuple(layers), dim, folder, extract_s, False, meta)
