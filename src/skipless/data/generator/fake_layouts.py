"""Tiny datasets in the layouts of the real ones, for the full-size pre-flight (``make paper SCALE=full
PREFLIGHT=1``, ``paper/preflight.py``).

Why: before any cluster hour, every job of a paper table should have run once at the paper's sizes
through the very readers, transforms and evaluators that will read ImageNet, VOC, ADE20K, COCO-Stuff
and COCO20k; none of those datasets is on the machines this suite is built on. So this module writes a
few generated scenes (``scene_render.render``, upscaled ``scale`` times: 320-448 px at 2, about the
size of VOC's and ImageNet's photographs) into each real layout of ``data/README.md``, one folder per
dataset, in the arrangement the configs' default roots name (``data/imagenet``, ``data/voc`` ...):

    imagenet/, imagenet100/, imagenet10/   train/<wnid>/<wnid>_<k>.JPEG, val/<wnid>/ILSVRC2012_val_<8 digits>.JPEG,
                             LOC_synset_mapping.txt (val as class folders, the valprep.sh form)
    voc/VOCdevkit/VOC2007/, VOC2012/   JPEGImages, SegmentationClass, SegmentationObject (palette PNGs),
                             Annotations/*.xml, ImageSets/{Segmentation,Main}/{train,val,trainval}.txt
    ade20k/ADEChallengeData2016/   images/{training,validation}/ADE_*.jpg, annotations/.../ADE_*.png (0-150)
    cocostuff/               images/{train2017,val2017}/<12 digits>.jpg, annotations/... raw ids 0-181
    coco/                    images/train2014/COCO_train2014_<12 digits>.jpg, annotations/
                             instances_train2014.json (one crowd box, which readers drop), coco_20k_filenames.txt
    tiny-imagenet/tiny-imagenet-200/   wnids.txt, words.txt, train/<wnid>/images/*.JPEG (64 px),
                             val/images/*.JPEG, val/val_annotations.txt
    mnist/MNIST/raw/         {train,t10k}-{images-idx3,labels-idx1}-ubyte: the scenes grey at 28 px (torchvision's)
    cifar10/cifar-10-batches-py/, cifar100/cifar-100-python/   the official pickles (bytes keys, R, G, B planes
                             per row) of the scenes at 32 px: five train batches and a test batch / train, test

Each split has ``classes x train_per_class`` and ``classes x val_per_class`` images; the labelled
layouts deal the scenes to their classes in turn, the dense ones map the scenes' 10 shape classes onto
ids of the real label spaces (VOC's 1-10, ADE20K's and COCO-Stuff's raw ids). What is proven by a run
on them: the layouts, readers, transforms and code paths at the real image and model sizes; not
accuracy, and not a real file's oddities (a CMYK JPEG, a grey PNG mask) beyond what the readers' own
tests cover. Every folder holds ``.skipless_fake``; a folder without it is never written into.

The readers' own tests take smaller stand-ins from the end of this module: ``write_fake_mnist`` (random
IDX digits, gzipped or not) and ``write_fake_imagenet`` (flat-colour JPEGs under any wnids, e.g. CMC's).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from PIL import Image

from ...config import ConfigError
from ..classification.idx import write_idx
from ..classification.mnist import FILES as MNIST_FILES
from ..errors import MalformedDatasetError
from ..voc import VOC_CLASSES
from .scene_render import CLASSES, render
from .synthetic import JPEG_QUALITY, annotation_xml, palette_png

FAKE_TAG = ".skipless_fake"
# The first ten ImageNet-1k classes (sorted wnids, LOC_synset_mapping.txt): tench ... great grey owl.
WNIDS = ("n01440764", "n01443537", "n01484850", "n01491361", "n01494475", "n01496331", "n01498041",
         "n01514668", "n01514859", "n01518878")
ADE20K_IDS = np.array([1] + [13 * k for k in range(1, 11)], dtype=np.uint8)       # background -> 1 (wall)
COCOSTUFF_IDS = np.array([156] + list(range(10)), dtype=np.uint8)                    # background -> sky-other


@dataclass(frozen=True)
class FakeSizes:
    """How many images each fake dataset holds: ``classes`` (at most 10) x images per class and split."""

    classes: int
    train_per_class: int
    val_per_class: int

    @property
    def train(self) -> int:
        return self.classes * self.train_per_class

    @property
    def val(self) -> int:
        return self.classes * self.val_per_class


@dataclass(frozen=True)
class Scene:
    """One generated scene at its written size: the RGB image, its class map (0 background, 1-10 the
    shapes, 255 void), its instance map and its objects (names, 0-based inclusive boxes)."""

    image: Image.Image
    classes: np.ndarray
    instances: np.ndarray
    objects: list[dict]


def scene(index: int, seed: int, scale: int) -> Scene:
    """Scene ``index`` of ``seed`` upscaled ``scale`` times (bicubic image, nearest-neighbour maps)."""
    image, instance, objects = render(index, seed)
    lookup = np.full(256, 255, dtype=np.uint8)
    lookup[0] = 0
    for k, o in enumerate(objects, start=1):
        lookup[k] = CLASSES.index(o["name"])
    height, width = instance.shape
    size = (width * scale, height * scale)
    nearest = lambda a: np.array(Image.fromarray(a).resize(size, Image.NEAREST))  # noqa: E731
    boxes = [{**o, "box": (o["box"][0] * scale, o["box"][1] * scale, o["box"][2] * scale + scale - 1,
                           o["box"][3] * scale + scale - 1)} for o in objects]
    resized = Image.fromarray(image).resize(size, Image.BICUBIC)
    return Scene(resized, nearest(lookup[instance]), nearest(instance), boxes)


def _save_jpeg(image: Image.Image, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, quality=JPEG_QUALITY)


def _save_index_png(array: np.ndarray, path: Path) -> None:
    """An 8-bit grey PNG of label ids (mode L), as ADE20K and COCO-Stuff ship theirs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)


def _lines(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines))


def _splits(scenes: list[Scene], sizes: FakeSizes) -> dict[str, list[Scene]]:
    return {"train": scenes[:sizes.train], "val": scenes[sizes.train:sizes.train + sizes.val]}


# --------------------------------------------------------------------------- one writer per layout
def write_imagenet(folder: Path, scenes: list[Scene], sizes: FakeSizes) -> None:
    """ImageNet-1k / ImageNet-100: ``train/<wnid>/``, ``val/<wnid>/`` (class folders), the synset mapping."""
    wnids = WNIDS[:sizes.classes]
    number = 0
    for split, part in _splits(scenes, sizes).items():
        for i, s in enumerate(part):
            wnid = wnids[i % sizes.classes]
            number += 1
            name = f"{wnid}_{i}.JPEG" if split == "train" else f"ILSVRC2012_val_{number:08d}.JPEG"
            _save_jpeg(s.image, folder / split / wnid / name)
    _lines(folder / "LOC_synset_mapping.txt", [f"{w} fake class {k}" for k, w in enumerate(wnids)])


def write_voc(folder: Path, scenes: list[Scene], sizes: FakeSizes) -> None:
    """VOC 2007 and 2012, segmentation and detection: the shapes' classes 1-10 are VOC's first ten."""
    for year in ("2007", "2012"):
        voc = folder / "VOCdevkit" / f"VOC{year}"
        for sub in ("JPEGImages", "SegmentationClass", "SegmentationObject", "Annotations"):
            (voc / sub).mkdir(parents=True, exist_ok=True)
        ids: dict[str, list[str]] = {}
        for split, part in _splits(scenes, sizes).items():
            ids[split] = []
            for s in part:
                number = sum(map(len, ids.values()))
                image_id = f"{number:06d}" if year == "2007" else f"2012_{number:06d}"  # VOC's own id forms
                ids[split].append(image_id)
                _save_jpeg(s.image, voc / "JPEGImages" / f"{image_id}.jpg")
                palette_png(s.classes, voc / "SegmentationClass" / f"{image_id}.png")
                palette_png(s.instances, voc / "SegmentationObject" / f"{image_id}.png")
                objects = [{**o, "name": VOC_CLASSES[CLASSES.index(o["name"])]} for o in s.objects]
                xml = annotation_xml(image_id, s.image.size, objects, folder=f"VOC{year}")
                (voc / "Annotations" / f"{image_id}.xml").write_bytes(xml)
        ids["trainval"] = ids["train"] + ids["val"]
        for split, listed in ids.items():
            for kind in ("Segmentation", "Main"):
                _lines(voc / "ImageSets" / kind / f"{split}.txt", listed)


def write_ade20k(folder: Path, scenes: list[Scene], sizes: FakeSizes) -> None:
    """ADE20K: raw labels 0-150 (0 "other", here the void band), the background as 1 (wall)."""
    base = folder / "ADEChallengeData2016"
    lut = np.zeros(256, dtype=np.uint8)
    lut[:len(ADE20K_IDS)] = ADE20K_IDS
    for split, part in _splits(scenes, sizes).items():
        where, prefix = ("training", "ADE_train") if split == "train" else ("validation", "ADE_val")
        for i, s in enumerate(part):
            _save_jpeg(s.image, base / "images" / where / f"{prefix}_{i + 1:08d}.jpg")
            _save_index_png(lut[s.classes], base / "annotations" / where / f"{prefix}_{i + 1:08d}.png")


def write_cocostuff(folder: Path, scenes: list[Scene], sizes: FakeSizes) -> None:
    """COCO-Stuff 164k: raw ids (things 0-9 for the shapes, 156 sky-other for the background, 255 void)."""
    lut = np.full(256, 255, dtype=np.uint8)
    lut[:len(COCOSTUFF_IDS)] = COCOSTUFF_IDS
    for split, part in _splits(scenes, sizes).items():
        where = f"{split}2017"
        for i, s in enumerate(part):
            name = f"{139 + 17 * i:012d}"
            _save_jpeg(s.image, folder / "images" / where / f"{name}.jpg")
            _save_index_png(lut[s.classes], folder / "annotations" / where / f"{name}.png")


def write_coco20k(folder: Path, scenes: list[Scene], sizes: FakeSizes) -> None:
    """COCO20k: every scene is a train2014 image of the list; its objects are the instances, plus one
    crowd box over the first image (dropped by the readers, as COCO's crowds are)."""
    images, annotations, listed = [], [], []
    for i, s in enumerate(scenes[:sizes.train + sizes.val]):
        image_id = 9 + 16 * i
        name = f"COCO_train2014_{image_id:012d}.jpg"
        _save_jpeg(s.image, folder / "images" / "train2014" / name)
        listed.append(f"train2014/{name}")
        width, height = s.image.size
        images.append({"id": image_id, "file_name": name, "width": width, "height": height})
        boxes = [(o["box"], CLASSES.index(o["name"]), 0) for o in s.objects]
        if i == 0:
            boxes.append(((0, 0, width - 1, height - 1), 1, 1))
        for (x0, y0, x1, y1), category, crowd in boxes:
            w, h = x1 + 1 - x0, y1 + 1 - y0
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": category,
                                "bbox": [float(x0), float(y0), float(w), float(h)], "area": float(w * h),
                                "iscrowd": crowd})
    categories = [{"id": k, "name": name} for k, name in enumerate(CLASSES) if k]
    path = folder / "annotations" / "instances_train2014.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    _lines(folder / "coco_20k_filenames.txt", listed)


def write_tiny_imagenet(folder: Path, scenes: list[Scene], sizes: FakeSizes) -> None:
    """Tiny ImageNet: 64 x 64 JPEGs, ``wnids.txt`` order, val labelled by ``val_annotations.txt``."""
    base = folder / "tiny-imagenet-200"
    wnids = WNIDS[:sizes.classes]
    _lines(base / "wnids.txt", list(wnids))
    _lines(base / "words.txt", [f"{w}\tfake class {k}" for k, w in enumerate(wnids)])
    split = _splits(scenes, sizes)
    for i, s in enumerate(split["train"]):
        wnid = wnids[i % sizes.classes]
        _save_jpeg(s.image.resize((64, 64), Image.BICUBIC), base / "train" / wnid / "images" / f"{wnid}_{i}.JPEG")
    rows = []
    for i, s in enumerate(split["val"]):
        _save_jpeg(s.image.resize((64, 64), Image.BICUBIC), base / "val" / "images" / f"val_{i}.JPEG")
        rows.append(f"val_{i}.JPEG\t{wnids[i % sizes.classes]}\t0\t0\t63\t63")
    _lines(base / "val" / "val_annotations.txt", rows)


def write_mnist_layout(folder: Path, scenes: list[Scene], sizes: FakeSizes) -> None:
    """MNIST's four IDX files in torchvision's ``MNIST/raw``: each scene grey at 28 x 28, classes dealt in turn."""
    for split, part in _splits(scenes, sizes).items():
        images = np.stack([np.asarray(s.image.convert("L").resize((MNIST_SIZE, MNIST_SIZE), Image.BICUBIC))
                           for s in part])
        labels = (np.arange(len(part)) % sizes.classes).astype(np.uint8)
        write_mnist(folder / "MNIST" / "raw", split, images, labels)


def _cifar_rows(scenes: list[Scene]) -> np.ndarray:
    """The scenes at 32 x 32 as the official rows: the red, then the green, then the blue plane, row-major."""
    images = [np.asarray(s.image.convert("RGB").resize((32, 32), Image.BICUBIC)) for s in scenes]
    if not images:  # a batch with no scene dealt to it (fewer train scenes than batches)
        return np.zeros((0, 3 * 32 * 32), dtype=np.uint8)
    return np.stack(images).transpose(0, 3, 1, 2).reshape(len(scenes), 3 * 32 * 32)


def _pickle(path: Path, content: dict) -> None:
    import pickle

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(content, protocol=2))


def write_cifar10(folder: Path, scenes: list[Scene], sizes: FakeSizes) -> None:
    """CIFAR-10's python layout: the train scenes dealt over ``data_batch_1..5``, the val ones in ``test_batch``."""
    base, split = folder / "cifar-10-batches-py", _splits(scenes, sizes)
    labels = {name: [i % sizes.classes for i in range(len(part))] for name, part in split.items()}
    for b in range(5):
        dealt = labels["train"][b::5]  # an empty batch's labels: an empty integer array, as the reader expects
        _pickle(base / f"data_batch_{b + 1}", {b"data": _cifar_rows(split["train"][b::5]),
                                                b"labels": dealt or np.zeros(0, dtype=np.int64)})
    _pickle(base / "test_batch", {b"data": _cifar_rows(split["val"]), b"labels": labels["val"]})
    _pickle(base / "batches.meta", {b"label_names": [f"fake class {k}".encode() for k in range(sizes.classes)]})


def write_cifar100(folder: Path, scenes: list[Scene], sizes: FakeSizes) -> None:
    """CIFAR-100's python layout: ``train``, ``test`` (fine labels) and ``meta``."""
    base, split = folder / "cifar-100-python", _splits(scenes, sizes)
    for name, file in (("train", "train"), ("val", "test")):
        part = split[name]
        _pickle(base / file, {b"data": _cifar_rows(part), b"fine_labels": [i % sizes.classes for i in range(len(part))],
                              b"coarse_labels": [0] * len(part)})
    _pickle(base / "meta", {b"fine_label_names": [f"fake class {k}".encode() for k in range(sizes.classes)]})


# The folder each layout is written to: the arrangement of data/README.md, which the configs' default
# roots name (data.root of data=imagenet is data/imagenet, whose train/ pretraining reads; $IMAGENET100_ROOT's default data/imagenet100 ...).
ARRANGEMENT: dict[str, Callable[[Path, list[Scene], FakeSizes], None]] = {
    "imagenet": write_imagenet,
    "imagenet100": write_imagenet,
    "imagenet10": write_imagenet,  # seed 002 Fig. 4's 10 classes ($IMAGENET10_ROOT's default, data/imagenet10)
    "voc": write_voc,
    "ade20k": write_ade20k,
    "cocostuff": write_cocostuff,
    "coco": write_coco20k,
    "tiny-imagenet": write_tiny_imagenet,
    "mnist": write_mnist_layout,
    "cifar10": write_cifar10,
    "cifar100": write_cifar100,
}


def check_sizes(sizes: FakeSizes, scale: int) -> None:
    """Refuse, in one sentence, sizes no fake dataset can have."""
    if not 1 <= sizes.classes <= len(WNIDS) or sizes.train_per_class < 1 or sizes.val_per_class < 1 or scale < 1:
        raise ConfigError(f"fake datasets of {sizes} at scale {scale}: expected 1 to {len(WNIDS)} classes, "
                          "at least one image per class and split, and a scale of 1 or more")


def write_fake_datasets(data_dir: str | os.PathLike, sizes: FakeSizes, seed: int, scale: int) -> dict[str, Path]:
    """Write every layout of ``ARRANGEMENT`` under ``data_dir/<name>/``; returns the folders.

    A folder that exists without ``.skipless_fake`` (a real dataset) is refused in one sentence before
    anything is written; a fake one is written over."""
    check_sizes(sizes, scale)
    data_dir = Path(data_dir)
    folders = {name: data_dir / name for name in ARRANGEMENT}
    real = [f for f in folders.values() if f.exists() and not (f / FAKE_TAG).exists()]
    if real:
        raise MalformedDatasetError(f"{real[0]} exists and is no fake dataset (no {FAKE_TAG}); not writing fake "
                                    "images into it: expected a new or a fake folder")
    scenes = [scene(i, seed, scale) for i in range(sizes.train + sizes.val)]
    for name, write in ARRANGEMENT.items():
        folders[name].mkdir(parents=True, exist_ok=True)
        (folders[name] / FAKE_TAG).write_text("fake images for make paper PREFLIGHT=1; safe to delete\n")
        write(folders[name], scenes, sizes)
    return folders


# --------------------------------------------------------------------------- the readers' tests' stand-ins
MNIST_SIZE = 28


def fake_digits(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random grey ``28 x 28`` uint8 images and labels ``0, 1, ..., 9, 0, ...`` (uint8), from ``seed``."""
    images = np.random.default_rng(seed).integers(0, 256, size=(n, MNIST_SIZE, MNIST_SIZE), dtype=np.uint8)
    return images, (np.arange(n) % 10).astype(np.uint8)


def write_mnist(folder: Path, split: str, images: np.ndarray, labels: np.ndarray, gz: bool = False) -> list[Path]:
    """The image and label IDX files of ``split`` (``train`` or ``val``, i.e. t10k) in ``folder``, gzipped
    (``<name>.gz``) or not. Returns the two paths."""
    suffix = ".gz" if gz else ""
    images_name, labels_name = MNIST_FILES[split]
    return [write_idx(Path(folder) / f"{images_name}{suffix}", images),
            write_idx(Path(folder) / f"{labels_name}{suffix}", labels)]


def write_fake_mnist(root: str | Path, n_train: int = 20, n_val: int = 10, gz: bool = True,
                     seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A fake MNIST at ``root/MNIST/raw`` (torchvision's layout): ``{split: (images, labels)}`` written."""
    raw = Path(root) / "MNIST" / "raw"
    written = {}
    for offset, (split, n) in enumerate((("train", n_train), ("val", n_val))):
        written[split] = fake_digits(n, seed + offset)
        write_mnist(raw, split, *written[split], gz=gz)
    return written


def write_fake_imagenet(root: str | Path, wnids: Iterable[str], per_class: int = 1, size: int = 16,
                        splits: Iterable[str] = ("train", "val")) -> Path:
    """``per_class`` JPEGs of ``size`` px, one flat colour per class, in ``root/<split>/<wnid>/`` for every
    split and wnid (val sorted into class folders). Returns ``root``."""
    root = Path(root)
    for c, wnid in enumerate(wnids):
        colour = ((37 * c) % 256, (91 * c) % 256, (151 * c) % 256)
        for split in splits:
            folder = root / split / wnid
            folder.mkdir(parents=True, exist_ok=True)
            for k in range(per_class):
                Image.new("RGB", (size, size), colour).save(folder / f"{wnid}_{k + 1}.JPEG", quality=90)
    return root
