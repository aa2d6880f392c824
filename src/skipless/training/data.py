"""Datasets and loaders of a pretraining run, chosen by ``cfg.data.name``, for any method.

The method brings the views (``skipless.ssl.Method``: its ``transform``, ``collate`` and ``view_size``);
this module knows none of its keys.

``default``: the embedded generated scenes (VOC layout, generated on first use); pretraining reads
the train split's images, and the k-NN monitor labels train and val images with their dominant
object class. ``imagenet``: the images of an ImageNet-style folder, ``cfg.data.root``'s ``train/`` when it has
one, else the root itself (labels unused).

The loader is checked against the dataset before any trainer or run folder exists: a dataset with
fewer images than one batch per device is refused in one sentence. An item of the loader is what one
device takes in one optimizer step: the ``k`` micro-batches of ``batch_size_per_device`` images of
``train.global_batch``'s accumulation (``world.accumulation_steps``), which its workers collate one
micro-batch at a time and the loader gathers (``loader_state.py``, ``micro_batches.py``), so that
Lightning's steps, ``max_steps``, ``limit_train_batches`` and the per-step schedules count optimizer
steps, a worker never holds a whole step, and the last images of an epoch that fill no whole step are
dropped, as DINO's loader drops the last partial batch. ``loader_memory`` is the host memory such a loader
holds (``devices/host_memory.py``), which the header states and an entry point checks against the machine's
before anything is written. Its dataset is wrapped in a
``SkipTally``, which marks each unreadable image, and each image smaller than ``data.min_image_side``, once,
whichever DataLoader worker met it. The readers refuse images over ``data.max_image_pixels`` pixels
(``data/reads.py``), in every process that decodes.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import DictConfig
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import default_collate
from torchvision import transforms

from ..config import ConfigError
from ..data.image_folder import ImageFolderDataset, VOCImages
from ..data.reads import UNREADABLE_KINDS, unreadable_kind
from ..data.generator.synthetic import ensure_default
from ..data.voc import VOCClassification
from ..data.conventions import IMAGENET_MEAN, IMAGENET_STD
from ..devices.host_memory import LoaderMemory
from ..devices.world import accumulation_steps, batch_per_device_step, devices_of, world_size
from .loader_state import ResumableLoader, Streams

DATASETS = ("default", "imagenet", "imagenet10")  # the ImageNet-style folders are read alike
# The micro-batches each loader worker makes ahead of the step: torch's DataLoader default, written here because
# the header's loader memory counts them (loader_memory).
PREFETCH_FACTOR = 2


def pretrain_dataset(cfg: DictConfig, transform: Callable, split: str = "train") -> Dataset:
    """``transform`` of each pretraining image (a method's views, or a fixed crop); generates the
    default dataset if missing. ``split``: the default data's ``train`` or ``val`` images; an ImageNet-style
    folder has one split, the folder."""
    name = cfg.data.name
    if name not in DATASETS:
        raise ConfigError(f"unknown pretraining data {name!r}; expected one of: {', '.join(DATASETS)}")
    aug = transform
    if name == "default":
        root = ensure_default(Path(cfg.data.root), n_train=cfg.data.n_train, n_val=cfg.data.n_val,
                              seed=cfg.data.seed)
        return limit_reads(cfg, VOCImages(root, split, transform=aug))
    images = limit_reads(cfg, ImageFolderDataset(image_folder_of(cfg.data.root), transform=aug))
    images.check_readable()  # a folder of only unreadable files: one sentence now, not a worker traceback
    return images


def limit_reads(cfg: DictConfig, dataset: Dataset) -> Dataset:
    """``dataset`` reading under ``data.max_image_pixels`` and ``data.min_image_side`` (a reader of files,
    ``data/reads.py``; in-memory datasets are left as they are)."""
    if hasattr(dataset, "limit_reads"):
        dataset.limit_reads(int(cfg.data.max_image_pixels), cfg.data.min_image_side)
    return dataset


def image_folder_of(root: str | os.PathLike) -> Path:
    """The folder of pretraining images under an ImageNet-style ``root``: its ``train/`` when it has one
    (the root supervised training reads, ``configs/data/imagenet.yaml``), else ``root`` itself (a folder
    of images or class folders, or a ``train/`` named directly)."""
    root = Path(root)
    return root / "train" if (root / "train").is_dir() else root


SMALL = 1  # SkipTally's flag of a readable image smaller than data.min_image_side; 2.. are UNREADABLE_KINDS


class SkipTally(Dataset):
    """``dataset`` with the set of its unreadable images, and of its small ones, each once, over worker processes.

    A file is met more than once: every epoch, in whichever worker draws it, and through its
    neighbours (a reader serves the next index in place of an unreadable one, so three bad files
    in a row are read 3 + 2 + 1 times). Counting reads said 6 for 3 files. Here the reader's
    ``on_unreadable`` and ``on_small`` hooks mark the file's index in a flag tensor in shared memory,
    which every worker of every epoch writes (a mark is idempotent: no lock needed), so the flags are the
    set of files, not of reads. A flag says what was met: 0 nothing, ``SMALL`` (read and trained on), or
    2 + the index of the file's kind in ``reads.UNREADABLE_KINDS`` (skipped); a file is always the same
    kind, so the flags of the ranks combine by their maximum. The run's ``RunSummary`` names each file once,
    from rank 0; the reader's own warning stays quiet.
    """

    def __init__(self, dataset: Dataset, num_workers: int = 0) -> None:
        self.dataset = dataset
        self.flags = torch.zeros(len(dataset), dtype=torch.uint8).share_memory_()
        if hasattr(dataset, "on_unreadable"):
            dataset.on_unreadable = self._mark
        if hasattr(dataset, "on_small"):
            dataset.on_small = self._small

    def _mark(self, index: int, path: object, error: Exception) -> None:
        self.flags[index] = 2 + UNREADABLE_KINDS.index(unreadable_kind(path, error))

    def _small(self, index: int, path: object, size: tuple[int, int]) -> None:
        self.flags[index] = SMALL

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int):
        return self.dataset[index]

    def name(self, index: int) -> str:
        """The file of image ``index``."""
        files = getattr(self.dataset, "files", None)
        return str(files[index] if files is not None else self.dataset.items[index])

    def reason(self, flag: int) -> str:
        """What a flag says of its file, in the words of the run's log and ``summary.json``."""
        if flag == SMALL:
            return f"smaller than data.min_image_side={getattr(self.dataset, 'min_side', 0)} px on a side"
        kind = UNREADABLE_KINDS[flag - 2]
        limit = getattr(self.dataset, "max_pixels", None)
        if kind == "over the pixel limit" and limit is not None:
            return f"more than data.max_image_pixels={limit} pixels"
        return kind

    @property
    def total(self) -> int:
        """Unreadable images met so far in this process's workers, each once."""
        return int((self.flags > SMALL).sum())


def check_one_batch(cfg: DictConfig, n_images: int) -> None:
    """Refuse a dataset that cannot fill one optimizer step on every device (0 steps per epoch)."""
    per_device, world, steps_of = int(cfg.train.batch_size_per_device), world_size(cfg), accumulation_steps(cfg)
    batch = batch_per_device_step(cfg)
    limit = cfg.train.limit_train_batches
    steps = n_images // world // batch
    if steps == 0:
        most = n_images // world
        if steps_of > 1:
            raise ConfigError(f"data.root={cfg.data.root} holds {n_images} training images, fewer than one global "
                              f"batch of train.global_batch={cfg.train.global_batch} ({steps_of} micro-batches of "
                              f"{per_device} on each of {world} device(s)); expected at least {batch * world}: "
                              f"set train.global_batch=null, or add images")
        fix = f"set train.batch_size_per_device={most} or less, or " if most else ""
        raise ConfigError(f"data.root={cfg.data.root} holds {n_images} training images, fewer than one batch of "
                          f"train.batch_size_per_device={per_device} on each of {world} device(s); expected at least "
                          f"{batch * world}: {fix}add images")
    if isinstance(limit, float) and int(steps * limit) == 0:
        raise ConfigError(f"train.limit_train_batches={limit:g} of {steps} batches per epoch leaves none; "
                          f"expected at least {1 / steps:.3g} (or 1.0)")


def pretrain_loader(cfg: DictConfig, dataset: Dataset, collate: Callable) -> ResumableLoader:
    """The shuffled loader of ``dataset`` (wrapped in a ``SkipTally``), batched by the method's ``collate``
    in the images of one optimizer step per device (module docstring); refuses one with no full batch."""
    check_one_batch(cfg, len(dataset))
    return training_loader(cfg, dataset, collate)


def training_loader(cfg: DictConfig, dataset: Dataset, collate: Callable | None = None) -> ResumableLoader:
    """The loader every training method trains from: ``dataset`` in a ``SkipTally``, shuffled, one item per
    optimizer step per device (its micro-batches, module docstring), resumable at any step (``loader_state.py``);
    fresh workers each epoch."""
    return ResumableLoader(SkipTally(dataset, cfg.train.num_workers), batch_size=int(cfg.train.batch_size_per_device),
                           seed=int(cfg.run.seed), num_workers=int(cfg.train.num_workers), collate_fn=collate,
                           pin_memory=torch.cuda.is_available(), micro_batches=accumulation_steps(cfg),
                           prefetch_factor=PREFETCH_FACTOR)


SAMPLE_SIDE = 64  # px of the image a sample is measured on: the views' sizes are the method's, whatever this is


def tensors_of(batch: Any) -> list[torch.Tensor]:
    """The tensors of a collated batch (a tensor, or lists, tuples and dicts of them, nested)."""
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, dict):
        batch = list(batch.values())
    if isinstance(batch, (list, tuple)):
        return [t for item in batch for t in tensors_of(item)]
    return []


def loader_memory(cfg: DictConfig, sample: Callable[[Image.Image], Any],
                  collate: Callable | None = None) -> LoaderMemory:
    """The host memory of the training loader ``cfg`` asks for (``devices/host_memory.py``), its micro-batch
    measured: ``sample`` (a method's views of one image; the classifier's ``(image, label)``) made of one generated
    image, collated by ``collate`` (torch's default if None), its tensors' bytes times
    ``train.batch_size_per_device``. The views' sizes and dtype are whatever the method's transform makes
    (float32 crops; a transform that leaves the images uint8 for an augmentation on the device measures
    uint8), so no size or dtype is written twice. A transform that hands the image over whole (DINO's
    ``data.augment_on=device_crops``) names the largest shorter side it keeps, ``measure_side``: it is measured on
    a square image of that side, the largest square it sends (a longer image sends more, to its pixel limit). Every generator it draws from is put back as it was, and so
    is PIL's pixel limit, which an earlier read in this process may have set below a crop of this image
    (``data/reads.py``)."""
    side = max(SAMPLE_SIDE, int(getattr(sample, "measure_side", 0) or 0))
    image = Image.new("RGB", (side, side), (124, 116, 104))
    drawn, limit = Streams.now(), Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = None
    try:
        tensors = tensors_of((collate or default_collate)([sample(image)]))
    finally:
        drawn.restore()
        Image.MAX_IMAGE_PIXELS = limit
    if not tensors:
        raise TypeError("a training sample must hold tensors once collated")
    images = int(cfg.train.batch_size_per_device)
    largest = max(tensors, key=lambda t: t.numel() * t.element_size())
    return LoaderMemory(micro_batch=images * sum(t.numel() * t.element_size() for t in tensors), images=images,
                        dtype=str(largest.dtype).removeprefix("torch."), micro_batches=accumulation_steps(cfg),
                        workers=int(cfg.train.num_workers), prefetch=PREFETCH_FACTOR, processes=devices_of(cfg))


def centre_crop(size: int) -> Callable:
    """Shorter side resized (bicubic), centre square crop, ImageNet normalisation: a fixed view."""
    return transforms.Compose([
        transforms.Resize(size, interpolation=transforms.InterpolationMode.BICUBIC),
        transforms.CenterCrop(size), transforms.ToTensor(), transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD)])


def evenly_spaced(count: int, total: int) -> list[int]:
    """``min(count, total)`` indices spread evenly over ``range(total)``, the first one 0: in an image folder sorted
    by class (ImageNet's), every class gets its share where the first ``count`` images would be one or two classes."""
    count = min(int(count), int(total))
    return [i * total // count for i in range(count)]


def diagnostic_images(cfg: DictConfig, size: int, count: int, split: str = "train", spread: bool = False) -> torch.Tensor:
    """(count, 3, S, S): fixed centre crops of ``size`` px (the method's view size) of the first pretraining images
    (of ``split``: MAE's reconstructions show validation images), or with ``spread`` of ``count`` images evenly
    spaced over the split (``evenly_spaced``: the effective rank, a statistic of the whole distribution), the
    batch the diagnostics callbacks measure the student on at every call. An unreadable one is passed over
    quietly: the training loader meets it too, and names and counts it once."""
    dataset = pretrain_dataset(cfg, transform=centre_crop(int(size)), split=split)
    if hasattr(dataset, "on_unreadable"):
        dataset.on_unreadable = lambda index, path, error: None
    indices = evenly_spaced(count, len(dataset)) if spread else range(min(count, len(dataset)))
    return torch.stack([dataset[i] for i in indices])


def knn_loaders(cfg: DictConfig, size: int) -> tuple[Callable, Callable, int] | None:
    """(train batches, val batches, number of classes) of centre crops of ``size`` px (the method's view
    size) for the k-NN monitor; None without labels."""
    if cfg.data.name != "default":
        return None
    root = Path(cfg.data.root)
    tf = centre_crop(int(size))
    splits = {s: VOCClassification(root, s, transform=tf) for s in ("train", "val")}
    num_classes = splits["train"].num_classes

    def batches(split: str) -> Callable:
        return lambda: DataLoader(splits[split], batch_size=64, num_workers=cfg.train.num_workers)

    return batches("train"), batches("val"), num_classes
