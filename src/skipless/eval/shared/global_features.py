"""Global (one vector per image) features of a frozen backbone, extracted once per split and cached:
what ``make knn`` and ``make linear`` read.

Per image, DINO's two global features (Caron et al. 2021; facebookresearch/dino ``eval_knn.py`` and
``eval_linear.py``):

- ``cls``: the CLS token of each of the last ``n_last_blocks`` blocks, each through the backbone's
  final LayerNorm. DINO's ``get_intermediate_layers(x, n)`` applies ``self.norm`` to the output of
  every block it returns, and ``eval_linear.py`` concatenates their ``[:, 0]`` (``--n_last_blocks 4``
  for ViT-S). The last of them is what DINO's ``model(x)`` returns, the CLS token after the final
  norm: the k-NN feature of ``eval_knn.py``, and the class token that seed 002's and MAE's linear
  probes read (``last_cls``, ``make linear PRESET=zhang|mae``) and ``make tsne`` embeds.
- ``avgpool``: the mean of the last block's patch tokens after the final norm
  (``eval_linear.py --avgpool_patchtokens``, which averages ``get_intermediate_layers(x, n)[-1][:, 1:]``).
- ``pooled``: the backbone's own global feature, ``model(x)`` (its ``global_pool``): the k-NN feature.
  For a backbone of the timm family (``make train MODEL=resnet``, ``convmixer``: ``skipless.models.timm_family``)
  it is the only feature: timm's pooled output before the classifier (a ResNet's global average of its last
  stage, seeds/002 Sec. 5.1's "bottleneck features"); such a backbone has no CLS token (``cls`` holds none
  of them, ``n_last_blocks`` does not apply) and ``avgpool`` is the same pooled feature.
  For a CLS-pooled backbone (DINO's, every released one) it is the last ``cls`` entry, DINO's k-NN
  feature exactly; for a mean-token backbone (``model.global_pool=avg``, the CPU demo's DINO) it is
  the feature DINO trained, the final norm of the mean patch token, where the CLS token was never
  trained (measured on that demo's teacher, 96 px, k = 20: 24.1 with the last CLS token, 34.8 with
  this feature, against 26.6 for its random init).

Images go through DINO's evaluation transform (``eval_transform``): shorter side resized (bicubic)
to ``resize``, the centre ``crop`` x ``crop`` square, ImageNet normalisation. By default there is no
augmentation: every image has one feature, so the backbone runs once per image for every k and every
learning rate (DINO's linear training uses random resized crops and flips; see ``eval/linear/run.py``).
A ``RandomView`` is the other transform, for the random-augmentation feature sets of ``make linear
views=`` (seed 002, App. 8.1): MAE's linear-probe train transform, ``RandomResizedCrop(crop)`` (scale
0.08-1, ratio 3/4-4/3, bicubic) and a horizontal flip, drawn from a generator seeded by (seed, view,
image), so a view's features do not depend on the loader's workers or batch; each view is a cache of
its own, keyed by its index, the number of views and the seed.

The cache is small (``(n_last_blocks + 1) x width`` float32 per image: 7.7 kB for ViT-S, 4 blocks),
so it is kept: ``.npy`` files under ``<run>/eval/cache/global-<dataset>-<split>-<digest>/``, complete
once ``meta.json`` is written (last), reused when its key (backbone file, dataset, images, sizes,
blocks) is the same; ``make knn`` then ``make linear`` run the backbone once. Unreadable images are
left out (``valid`` False) and counted, with one warning per split.
"""
from __future__ import annotations

import json
import shutil
import time
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms
from torchvision.transforms import functional as TF
from tqdm import tqdm

from skipless.atomic import atomic_write
from skipless.data.image_folder import READ_ERRORS
from skipless.data.errors import MalformedDatasetError
from skipless.models import extract_features, resolve_layers
from skipless.models.features import final_layer_norm
from skipless.models.timm_family import family_of

from .images import normalized

FORMAT = "skipless-global-features/2"
ARRAYS = ("cls", "avgpool", "pooled", "labels", "valid")


def eval_transform(resize: int, crop: int) -> Callable[[Image.Image], torch.Tensor]:
    """DINO's evaluation transform: ``Resize(resize, bicubic)``, ``CenterCrop(crop)``, ImageNet ``Normalize``."""
    def transform(image: Image.Image) -> torch.Tensor:
        image = TF.resize(image.convert("RGB"), resize, interpolation=TF.InterpolationMode.BICUBIC)
        return normalized(TF.center_crop(image, crop))

    return transform


# A random view's augmentation: the train transform of MAE's linear probe (facebookresearch/mae main_linprobe.py:
# RandomResizedCrop(224, interpolation=3) with torchvision's default scale and ratio, RandomHorizontalFlip), which
# the cached views of seed 002's ImageNet-1k probe stand in for (App. 8.1: MAE's time went to "on-the-fly random
# data augmentation at each epoch"). Part of every random view's cache key.
VIEW_SCALE = (0.08, 1.0)
VIEW_RATIO = (3.0 / 4.0, 4.0 / 3.0)
VIEW_AUGMENTATION = "RandomResizedCrop(crop, scale 0.08-1, ratio 3/4-4/3, bicubic) + horizontal flip p=0.5"
_VIEW_STREAM = zlib.crc32(b"skipless random view")


@dataclass(frozen=True)
class RandomView:
    """The transform of random-augmentation view ``index`` (1 ... ``views`` - 1; 0 is the centre crop) of
    ``views`` feature sets: ``VIEW_AUGMENTATION`` to ``crop`` x ``crop`` px, then ImageNet normalisation.
    Image ``sample``'s crop box and flip come from a generator seeded by ``(seed, index, sample)`` alone."""

    index: int
    views: int
    seed: int
    crop: int

    def key(self) -> dict[str, Any]:
        """What identifies this view's features besides the images and the backbone: a cache of one view count
        is never read for another."""
        return {"view": int(self.index), "views": int(self.views), "view_seed": int(self.seed),
                "augmentation": VIEW_AUGMENTATION}

    def sample_seed(self, sample: int) -> int:
        words = np.random.SeedSequence([int(self.seed), _VIEW_STREAM, int(self.index), int(sample)])
        return int(words.generate_state(1, np.uint64)[0] >> np.uint64(1))

    def __call__(self, image: Image.Image, sample: int) -> torch.Tensor:
        image = image.convert("RGB")
        with torch.random.fork_rng(devices=[]):  # torchvision's own draw, on a generator of this image alone
            torch.manual_seed(self.sample_seed(sample))
            top, left, h, w = transforms.RandomResizedCrop.get_params(image, list(VIEW_SCALE), list(VIEW_RATIO))
            flip = bool(torch.rand(1) < 0.5)  # RandomHorizontalFlip's draw
        image = TF.resized_crop(image, top, left, h, w, [self.crop, self.crop],
                                interpolation=TF.InterpolationMode.BICUBIC)
        return normalized(TF.hflip(image) if flip else image)


def last_blocks(depth: int, n_last: int) -> list[int]:
    """The indices of the last ``n_last`` blocks (``FeatureRequestError`` when the backbone has fewer)."""
    return resolve_layers(list(range(-int(n_last), 0)), depth)


def is_pooled_only(model: nn.Module) -> bool:
    """A backbone of the timm family: its pooled feature is the only one (module docstring)."""
    return family_of(getattr(model, "skipless_args", {})) != "vit"


def global_tokens(model: nn.Module, x: torch.Tensor, n_last: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(cls (B, n_last, D), avgpool (B, D), pooled (B, D))`` of images ``x`` from one forward pass
    (module docstring; a timm-family backbone: ``(B, 0, D)`` CLS tokens and its pooled feature twice)."""
    if is_pooled_only(model):
        pooled = model(x.to(next(model.parameters()).dtype))
        return pooled.new_zeros(pooled.shape[0], 0, pooled.shape[1]), pooled, pooled
    blocks = last_blocks(len(model.blocks), n_last)
    raw = extract_features(model, x, blocks, ("out",), norm=False)
    final_norm = final_layer_norm(model)
    normed = {i: final_norm(raw[("out", i)]) for i in blocks}
    prefix = int(getattr(model, "num_prefix_tokens", 1))
    cls = torch.stack([normed[i][:, 0] for i in blocks], dim=1)
    pooled = model.forward_head(model.norm(raw[("out", blocks[-1])]), pre_logits=True)
    return cls, normed[blocks[-1]][:, prefix:].mean(dim=1), pooled


def describe(dataset: Any, index: int) -> str:
    """A sample as a message names it: its file when it has one, else its index."""
    items = getattr(dataset, "items", None)
    item = items[index] if items is not None else None
    return str(item) if isinstance(item, (str, Path)) else f"{getattr(dataset, 'name', 'sample')} #{index}"


class _Samples(Dataset):
    """``(image tensor, label, ok, why)``; an unreadable image gives ``ok=False`` and a zero image.
    ``transform`` takes the image, or with ``indexed`` the image and its index (a ``RandomView``)."""

    def __init__(self, dataset: Any, transform: Callable, crop: int, indexed: bool = False) -> None:
        self.dataset, self.transform, self.crop, self.indexed = dataset, transform, int(crop), indexed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, bool, str]:
        try:
            image, label = self.dataset.read(index)  # strict: raises instead of serving the next image
        except READ_ERRORS as err:
            why = f"{describe(self.dataset, index)} ({type(err).__name__}: {err})"
            return torch.zeros(3, self.crop, self.crop), -1, False, why
        x = self.transform(image, index) if self.indexed else self.transform(image)
        return x, int(label), True, ""


@dataclass
class GlobalFeatures:
    """The cached features of one split.

    Attributes:
        cls: (N, n_last_blocks, D) float32, normed CLS tokens of the last blocks, deepest last.
        avgpool: (N, D) float32, mean normed patch token of the last block.
        pooled: (N, D) float32, the backbone's own global feature (k-NN's).
        labels: (N,) int64 (-1 for unreadable images).
        valid: (N,) bool, False for images that could not be read (left out everywhere).
        skipped: what was unreadable, one ``"<file> (<error>)"`` each.
        folder: the cache folder, or None in memory.
        extract_s: seconds of the backbone pass (0 when reused).
    """

    cls: np.ndarray
    avgpool: np.ndarray
    pooled: np.ndarray
    labels: np.ndarray
    valid: np.ndarray
    skipped: list[str] = field(default_factory=list)
    folder: Path | None = None
    extract_s: float = 0.0
    reused: bool = False
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def n_valid(self) -> int:
        return int(self.valid.sum())

    def knn(self) -> torch.Tensor:
        """k-NN's feature of the readable images: the backbone's own global feature, (n_valid, D)."""
        return torch.from_numpy(np.ascontiguousarray(self.pooled[self.valid]))

    def cls_concat(self) -> torch.Tensor:
        """The normed CLS tokens of the last blocks concatenated, (n_valid, n_last * D) (``eval_linear.py``)."""
        cls = self.cls[self.valid]
        return torch.from_numpy(np.ascontiguousarray(cls.reshape(cls.shape[0], -1)))

    def last_cls(self) -> torch.Tensor:
        """The normed CLS token of the last block alone, (n_valid, D): the class token after the final
        norm that seed 002's and MAE's linear probes read (sliced from the cache, whatever ``n_last_blocks``;
        the block first, so a memory-mapped cache reads that block alone)."""
        return torch.from_numpy(np.ascontiguousarray(self.cls[:, -1][self.valid]))

    def cls_avgpool(self) -> torch.Tensor:
        """``cls_concat`` followed by the avgpooled patch tokens, (n_valid, (n_last + 1) * D)."""
        return torch.cat([self.cls_concat(), torch.from_numpy(np.ascontiguousarray(self.avgpool[self.valid]))], 1)

    def valid_labels(self) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(self.labels[self.valid]))


def cache_key(key: dict | None, *, n_last: int, resize: int, crop: int, n: int) -> dict:
    """The full key of a cache: what identifies the backbone and images (``key``), the sizes, the blocks."""
    return dict(key or {}, n_last=int(n_last), resize=int(resize), crop=int(crop), n=int(n))


def open_features(folder: Path, key: dict, mmap: bool = False) -> GlobalFeatures | None:
    """The complete cache in ``folder`` built with the same ``key``, or None; with ``mmap`` its arrays are
    read-only memory maps (read when sliced: what the random views of ImageNet need, ~12 GB each for ViT-B)."""
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if meta.get("format") != FORMAT or meta.get("key") != json.loads(json.dumps(key)):
        return None
    try:
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r" if mmap else None) for name in ARRAYS}
    except (OSError, ValueError):
        return None
    return GlobalFeatures(**arrays, skipped=list(meta.get("skipped", [])), folder=folder, reused=True, meta=meta)


@torch.inference_mode()
def build_global_features(model: nn.Module, dataset: Any, *, n_last: int, resize: int, crop: int,
                          device: torch.device | str = "cpu", batch_size: int = 32, num_workers: int = 0,
                          folder: str | Path | None = None, key: dict | None = None, amp: bool = True,
                          progress: bool = True, desc: str = "features", view: RandomView | None = None,
                          mmap: bool = False) -> GlobalFeatures:
    """Run the frozen backbone once over ``dataset`` (a ``LabelledImages``: ``read``, ``labels``), or
    reuse the cache in ``folder`` when its key matches.

    Args:
        model: the frozen backbone (``eval/backbones.load_spec``), on ``device``.
        n_last: how many of the last blocks give a CLS token.
        resize, crop: the evaluation transform (``eval_transform``).
        folder: where the cache is kept (None: in memory only).
        key: what identifies the content besides the sizes (backbone, dataset, images).
        amp: bfloat16 autocast on CUDA (ignored on the CPU).
        view: a random-augmentation view instead of the centre crop (``RandomView``; its ``key()`` joins the key).
        mmap: with ``folder``, return the cache memory-mapped (``open_features``), not held in memory.

    Raises:
        MalformedDatasetError: no image of the split could be read.
    """
    key = cache_key(key, n_last=n_last, resize=resize, crop=crop, n=len(dataset))
    if view is not None:
        key.update(view.key())
    folder = Path(folder) if folder is not None else None
    if folder is not None:
        found = open_features(folder, key, mmap)
        if found is not None:
            return found
    device = torch.device(device)
    n, dim = len(dataset), int(model.num_features)
    cls = np.zeros((n, int(n_last), dim), dtype=np.float32)
    avgpool = np.zeros((n, dim), dtype=np.float32)
    pooled = np.zeros((n, dim), dtype=np.float32)
    labels = np.full(n, -1, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    skipped: list[str] = []
    samples = (_Samples(dataset, eval_transform(resize, crop), crop) if view is None
               else _Samples(dataset, view, crop, indexed=True))
    loader = DataLoader(samples, batch_size=batch_size, shuffle=False, num_workers=num_workers,
                        pin_memory=device.type == "cuda")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp and device.type == "cuda")
    start, t0 = 0, time.perf_counter()
    with tqdm(total=n, desc=desc, unit="img", disable=not progress, leave=False) as bar:
        for x, y, ok, why in loader:
            end = start + x.shape[0]
            if ok.any():
                with autocast:
                    c, a, p = global_tokens(model, x[ok].to(device, non_blocking=True), n_last)
                rows = np.arange(start, end)[ok.numpy()]
                cls[rows], avgpool[rows], pooled[rows] = (t.float().cpu().numpy() for t in (c, a, p))
            labels[start:end], valid[start:end] = y.numpy(), ok.numpy()
            skipped += [w for w in why if w]
            start = end
            bar.update(x.shape[0])
    extract_s = time.perf_counter() - t0
    name = getattr(dataset, "name", "the split")
    if not valid.any():
        raise MalformedDatasetError(f"none of the {n} images of {name} could be read, e.g. {skipped[0]}")
    if skipped:
        print(f"warning: {len(skipped)} unreadable images of {name} left out (of {n}), e.g. {skipped[0]}", flush=True)
    meta = {"format": FORMAT, "key": json.loads(json.dumps(key)), "skipped": skipped, "extract_s": extract_s}
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for array_name, array in zip(ARRAYS, (cls, avgpool, pooled, labels, valid)):
            np.save(folder / f"{array_name}.npy", array)
        atomic_write(folder / "meta.json", lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=1)))
        if mmap:
            del cls, avgpool, pooled
            return replace(open_features(folder, key, mmap=True), extract_s=extract_s, reused=False)
    return GlobalFeatures(cls, avgpool, pooled, labels, valid, skipped, folder, extract_s, False, meta)
