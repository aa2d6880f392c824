"""The embedded default dataset: generated scenes with exact ground truth, in the real VOC layout.

Why: the machines this project is built on reach no dataset host, and a new user wants to see
pretraining and the evaluators work before downloading 150 GB. So the default
data is generated from packages on PyPI only: photographs and textures bundled in the
scikit-image wheel (read from its ``data/`` folder by path, so nothing is ever downloaded) give the
backgrounds and the object surfaces; the objects are ten shape classes, each a distinct silhouette
made of a class-typical material (a hue band, a texture; 15% of objects take any hue and another
texture or a flat colour, as real classes have typical but not fixed looks), with random
saturation and brightness (0.5-1), scale, rotation, aspect, shading and a drop shadow, in front of a hazy,
paler background; one to three objects per image, the first one larger (it is usually the image's
dominant class, the label of the k-NN monitor), later ones occluding earlier ones.

Why these choices (measured with the k-NN monitor of pretraining): with
material independent of the class (v1) nothing learnable in CPU minutes beat chance; sharp
backgrounds made DINO recognise the source photograph instead of the objects (v3); with texture and
shape as the only cues (v4, and stronger printed or photographed textures in two trials) neither
DINO nor a supervised ViT learnt the classes within the ~250 steps of the CPU demo (k-NN at the
random floor, about 0.11). Version 6 gives each class a hue band again and makes the first object
dominant: a random backbone's k-NN is then about 0.23-0.26 (colour survives random features), and
the CPU demo's DINO run reaches about 0.35 with the centred skipless init and mean-token pooling of
``configs/recipe/demo.yaml``. Shape and texture remain a second cue for longer runs.

The scenes are written exactly like PASCAL VOC 2012 (JPEGs, palette PNG masks with a void band
along object boundaries, XML boxes, ImageSets lists; also ``SegmentationObject/``), so that the
readers of ``voc.py`` and every evaluator serve the default and real VOC alike.

Image ``i`` depends only on ``(seed, i)`` (its own ``numpy`` Generator), so the output is the same
byte for byte whatever the number of worker processes. ``ensure_default`` generates once and is
safe to call from every DDP rank at the same time.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import importlib.util
import json
import multiprocessing
import os
import shutil
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from typing import Iterator

import numpy as np
from PIL import Image, ImageDraw, ImageFilter
from scipy import ndimage
from tqdm import tqdm

from .voc import MARKER, read_marker, voc_dir, voc_palette

GENERATOR_VERSION = 6  # bump whenever the rendering changes: existing defaults are then regenerated
CLASSES: tuple[str, ...] = ("background", "disc", "square", "triangle", "star", "ring", "cross",
                            "hexagon", "crescent", "ellipse", "heart")
SIDES = (160, 176, 192, 208, 224)  # image width and height are each drawn from these
BAND = 2  # width in pixels of the void (255) band that VOC draws along object boundaries
SUPERSAMPLE = 4  # silhouettes are drawn at 4x and box-filtered: antialiased edges
JPEG_QUALITY = 90
GENERATED_TAG = ".skipless_generated"  # written first: a VOC2012/ holding it is ours to replace
# Bundled in the scikit-image wheel (checked for 0.22-0.26); the others of skimage.data are fetched
# over the network by pooch and must never be used here.
BACKGROUNDS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "motorcycle_left.png",
               "hubble_deep_field.jpg", "brick.png", "grass.png", "gravel.png", "camera.png",
               "moon.png", "ihc.png")
TEXTURES = ("brick.png", "grass.png", "gravel.png", "ihc.png", "coins.png", "moon.png", "cell.png",
            "camera.png")
FLIPPABLE = {"brick.png", "grass.png", "gravel.png", "moon.png", "ihc.png", "hubble_deep_field.jpg"}

_SOURCES: dict[str, Image.Image] = {}


def skimage_data_dir() -> Path:
    """The ``data/`` folder of the installed scikit-image, found without importing it."""
    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("scikit-image is needed to generate the default dataset (pip install scikit-image)")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def _source(name: str) -> Image.Image:
    """A bundled photograph or texture, decoded once per process."""
    if name not in _SOURCES:
        path = skimage_data_dir() / name
        if not path.is_file():
            raise FileNotFoundError(f"{path} is not bundled in this scikit-image; the default dataset "
                                    "needs scikit-image>=0.22 (see data/README.md)")
        with Image.open(path) as image:
            _SOURCES[name] = image.convert("L" if image.mode in ("L", "I;16") else "RGB")
    return _SOURCES[name]


# --------------------------------------------------------------------------- shapes
def _circle(radius: float, cx: float = 0.0, cy: float = 0.0, n: int = 96) -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return np.stack([cx + radius * np.cos(t), cy + radius * np.sin(t)], 1)


def _regular(n: int, radius: float, phase: float = -np.pi / 2) -> np.ndarray:
    t = phase + np.arange(n) * 2 * np.pi / n
    return np.stack([radius * np.cos(t), radius * np.sin(t)], 1)


def _star() -> np.ndarray:
    outer, inner = _regular(5, 1.15), _regular(5, 0.47, phase=-np.pi / 2 + np.pi / 5)
    return np.stack([outer, inner], 1).reshape(-1, 2)


def _cross(arm: float = 0.34) -> np.ndarray:
    a, b = arm, 1.0
    return np.array([(-a, -b), (a, -b), (a, -a), (b, -a), (b, a), (a, a), (a, b), (-a, b), (-a, a),
                     (-b, a), (-b, -a), (-a, -a)])


def _heart() -> np.ndarray:
    t = np.linspace(0, 2 * np.pi, 96, endpoint=False)
    x = 16 * np.sin(t) ** 3
    y = 13 * np.cos(t) - 5 * np.cos(2 * t) - 2 * np.cos(3 * t) - np.cos(4 * t)
    return np.stack([x / 15.0, -(y + 2.5) / 15.0], 1)  # y flipped: image rows grow downwards


# Each class: polygons in a unit frame (radius about 1), drawn in order with fill 1 (object) or
# 0 (a hole: the ring's centre, the crescent's bite). Sizes are chosen so that areas are similar.
SHAPES: dict[str, list[tuple[np.ndarray, int]]] = {
    "disc": [(_circle(1.0), 1)],
    "square": [(np.array([(-0.88, -0.88), (0.88, -0.88), (0.88, 0.88), (-0.88, 0.88)]), 1)],
    "triangle": [(_regular(3, 1.25) + (0, 0.1), 1)],
    "star": [(_star(), 1)],
    "ring": [(_circle(1.05), 1), (_circle(0.58), 0)],
    "cross": [(_cross(), 1)],
    "hexagon": [(_regular(6, 1.0, phase=0.0), 1)],
    "crescent": [(_circle(1.05), 1), (_circle(0.88, cx=0.5), 0)],
    "ellipse": [(_circle(1.0) * (1.3, 0.55), 1)],
    "heart": [(_heart(), 1)],
}
assert tuple(SHAPES) == CLASSES[1:]


def _silhouette(shape: str, center: tuple[float, float], radius: float, angle: float, aspect: float,
                size: tuple[int, int]) -> tuple[np.ndarray, bool]:
    """Antialiased coverage (H, W) in [0, 1] of one placed shape, and whether it leaves the image."""
    width, height = size
    cos, sin = np.cos(angle), np.sin(angle)
    rotation = np.array([[cos, -sin], [sin, cos]])
    stretch = np.array([np.sqrt(aspect), 1 / np.sqrt(aspect)]) * radius
    canvas = Image.new("L", (width * SUPERSAMPLE, height * SUPERSAMPLE), 0)
    draw = ImageDraw.Draw(canvas)
    truncated = False
    for polygon, fill in SHAPES[shape]:
        points = (polygon * stretch) @ rotation.T + center
        if fill:
            truncated |= bool((points.min(0) < 0).any() or points[:, 0].max() > width
                              or points[:, 1].max() > height)
        draw.polygon([tuple(p) for p in points * SUPERSAMPLE], fill=255 * fill)
    coverage = np.asarray(canvas.reduce(SUPERSAMPLE), dtype=np.float32) / 255.0
    return coverage, truncated


# --------------------------------------------------------------------------- colour and texture
def _hsv_to_rgb(h: float, s: float, v: float) -> np.ndarray:
    k = (np.array([5.0, 3.0, 1.0]) + h * 6) % 6
    return v - v * s * np.clip(np.minimum(k, 4 - k), 0, 1)


def _crop(rng: np.random.Generator, name: str, size: tuple[int, int], min_scale: float) -> np.ndarray:
    """A random crop of a source resized to ``size``, float32 (H, W) or (H, W, 3) in [0, 1]."""
    source = _source(name)
    sw, sh = source.size
    aspect = size[0] / size[1]
    ch = min(sh, sw / aspect) * rng.uniform(min_scale, 1.0)
    cw = ch * aspect
    x0, y0 = rng.uniform(0, sw - cw), rng.uniform(0, sh - ch)
    crop = source.resize(size, Image.BILINEAR, box=(x0, y0, x0 + cw, y0 + ch))
    array = np.asarray(crop, dtype=np.float32) / 255.0
    if rng.random() < 0.5:
        array = array[:, ::-1]
    if name in FLIPPABLE and rng.random() < 0.5:
        array = array[::-1]
    return array


def _colourise(rng: np.random.Generator, array: np.ndarray) -> np.ndarray:
    """Random but plausible colour shift; grayscale sources get a tint so that nothing is gray."""
    if array.ndim == 2:
        tint = _hsv_to_rgb(rng.random(), rng.uniform(0.05, 0.5), 1.0)
        array = array[..., None] * (tint / tint.mean()).astype(np.float32)
    gray = array.mean(2, keepdims=True)
    array = gray + (array - gray) * rng.uniform(0.5, 1.3)  # saturation
    mean = array.mean()
    array = mean + (array - mean) * rng.uniform(0.7, 1.15)  # contrast
    array = array * rng.uniform(0.7, 1.2) * rng.uniform(0.9, 1.1, size=3)  # brightness, white balance
    return np.clip(array, 0, 1).astype(np.float32)


def _background(rng: np.random.Generator, size: tuple[int, int]) -> np.ndarray:
    """A colour-shifted photograph or texture crop; sometimes two, split by a wavy horizon."""
    width, height = size
    image = _colourise(rng, _crop(rng, BACKGROUNDS[rng.integers(len(BACKGROUNDS))], size, 0.35))
    if rng.random() < 0.35:
        ground = _colourise(rng, _crop(rng, BACKGROUNDS[rng.integers(len(BACKGROUNDS))], size, 0.35))
        x = np.arange(width)
        horizon = height * rng.uniform(0.4, 0.75) + height * 0.05 * np.sin(
            x * 2 * np.pi / width * rng.uniform(0.5, 2.0) + rng.uniform(0, 2 * np.pi))
        rows = np.arange(height)[:, None]
        weight = np.clip((rows - horizon[None, :]) / 4.0 + 0.5, 0, 1)[..., None].astype(np.float32)
        image = image * (1 - weight) + ground * weight
    # Shallow depth of field and haze: the objects stand in front of a softer, paler scene, so the
    # scene's photograph is not the easiest thing for self-supervision to recognise (generator v3).
    mean = image.mean((0, 1), keepdims=True)
    image = mean + rng.uniform(0.45, 0.75) * (image - mean)
    blurred = Image.fromarray((np.clip(image, 0, 1) * 255).astype(np.uint8)).filter(
        ImageFilter.GaussianBlur(rng.uniform(1.0, 3.0)))
    image = np.asarray(blurred, dtype=np.float32) / 255.0
    return image


def _surface(rng: np.random.Generator, size: tuple[int, int], class_index: int) -> np.ndarray:
    """What an object is made of, float32 (H, W, 3): usually (85%) its class's material, a hue near
    ``(k - 1) / 10`` of the colour circle (s.d. 0.03, DINO's hue jitter reaches +-0.1) with
    saturation and brightness from 0.5 to 1 and the class's texture; else any hue, and any texture or a flat colour."""
    width, height = size
    typical = rng.random() < 0.85
    hue = ((class_index - 1) / (len(CLASSES) - 1) + rng.normal(0, 0.03)) % 1.0 if typical else rng.random()
    colour = _hsv_to_rgb(hue, rng.uniform(0.5, 1.0), rng.uniform(0.5, 1.0))
    if typical:
        name = TEXTURES[(class_index - 1) % len(TEXTURES)]
    elif rng.random() < 0.5:
        return np.broadcast_to(colour, (height, width, 3)).astype(np.float32)
    else:
        name = TEXTURES[rng.integers(len(TEXTURES))]
    texture = _crop(rng, name, size, 0.2)
    if texture.ndim == 3:
        texture = texture.mean(2)
    relative = texture / max(float(texture.mean()), 1e-3) - 1.0
    strength = rng.uniform(0.5, 0.9)
    return np.clip(colour * (1.0 + strength * relative[..., None]), 0, 1).astype(np.float32)


def _blur(array: np.ndarray, radius: float) -> np.ndarray:
    image = Image.fromarray((np.clip(array, 0, 1) * 255).astype(np.uint8))
    return np.asarray(image.filter(ImageFilter.GaussianBlur(radius)), dtype=np.float32) / 255.0


def _shift(array: np.ndarray, dx: int, dy: int) -> np.ndarray:
    """Translate a 2-D array by whole pixels, filling with zeros (no wrap-around)."""
    out = np.zeros_like(array)
    h, w = array.shape
    out[max(dy, 0):h + min(dy, 0), max(dx, 0):w + min(dx, 0)] = \
        array[max(-dy, 0):h - max(dy, 0), max(-dx, 0):w - max(dx, 0)]
    return out


# --------------------------------------------------------------------------- one scene
def render(index: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """Draw scene ``index``: image uint8 (H, W, 3), instance map uint8 (H, W) and the objects.

    The instance map holds 0 for background, k for the k-th listed object and 255 for the void
    band; objects are listed in drawing order with their class, visible box (0-based inclusive
    pixel extents of their instance pixels) and truncated / occluded flags.
    """
    rng = np.random.default_rng([seed, index])
    size = (int(rng.choice(SIDES)), int(rng.choice(SIDES)))
    width, height = size
    image = _background(rng, size)
    light = rng.uniform(0, 2 * np.pi)
    light_dir = np.array([np.cos(light), np.sin(light)])
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    depth = np.zeros((height, width), dtype=np.uint8)  # which drawn object is on top (0 = none)
    placed: list[dict] = []
    wanted = int(rng.choice([1, 2, 3], p=[0.4, 0.35, 0.25]))
    for order in range(wanted):
        for _attempt in range(12):
            shape = CLASSES[1 + int(rng.integers(len(CLASSES) - 1))]
            radius = (rng.uniform(0.28, 0.42) if order == 0 else rng.uniform(0.15, 0.27)) * min(size)
            center = (rng.uniform(0.15, 0.85) * width, rng.uniform(0.15, 0.85) * height)
            coverage, truncated = _silhouette(shape, center, radius, rng.uniform(0, 2 * np.pi),
                                              float(np.exp(rng.uniform(-0.18, 0.18))), size)
            mask = coverage >= 0.5
            if mask.sum() < 200:
                continue
            new_depth = np.where(mask, len(placed) + 1, depth)
            # Every earlier object keeps at least half of itself in view, or the scene is redrawn.
            if all((new_depth == k + 1).sum() >= max(150, 0.5 * o["area"]) for k, o in enumerate(placed)):
                break
        else:
            continue
        depth = new_depth
        placed.append({"name": shape, "area": int(mask.sum()), "truncated": truncated})
        # Drop shadow, away from the light, on whatever lies below.
        if rng.random() < 0.6:
            offset = -light_dir * radius * rng.uniform(0.08, 0.18)
            shadow = _blur(_shift(coverage, int(round(offset[0])), int(round(offset[1]))), radius * 0.12)
            image = image * (1 - np.float32(rng.uniform(0.3, 0.55)) * shadow[..., None])
        # Surface, kept distinguishable from what is behind it, with directional light and a bevel.
        behind = image[mask].mean(0)
        for _retry in range(4):
            surface = _surface(rng, size, CLASSES.index(shape))
            if np.linalg.norm(surface[mask].mean(0) - behind) > 0.2:
                break
        along = ((xs - np.float32(center[0])) * np.float32(light_dir[0] / radius)
                 + (ys - np.float32(center[1])) * np.float32(light_dir[1] / radius))
        bevel = np.clip(2 * _blur(mask.astype(np.float32), max(1.5, 0.12 * radius)) - 1, 0, 1)
        shading = np.clip(1 + 0.25 * along, 0.6, 1.4) * (0.7 + 0.3 * bevel)
        surface = np.clip(surface * shading[..., None], 0, 1, dtype=np.float32)
        image = image * (1 - coverage[..., None]) + surface * coverage[..., None]
    image = image * 255 + rng.normal(0, 2.0, image.shape).astype(np.float32)  # sensor noise
    image = np.clip(image, 0, 255).astype(np.uint8)

    # Void band on the lower side of each boundary (background next to an object, or an occluded
    # object next to its occluder): the antialiased, mixed pixels are ignored, as in VOC.
    band = ndimage.maximum_filter(depth, size=2 * BAND + 1) > depth
    objects, instance = [], np.zeros_like(depth)
    for k, o in enumerate(placed, start=1):
        visible = (depth == k) & ~band
        if not visible.any():
            continue
        rows, cols = np.nonzero(visible)
        instance[visible] = len(objects) + 1
        objects.append({"name": o["name"], "truncated": o["truncated"],
                        "occluded": bool((depth == k).sum() < o["area"]),
                        "box": (int(cols.min()), int(rows.min()), int(cols.max()), int(rows.max()))})
    instance[band] = 255
    return image, instance, objects


def _palette_png(array: np.ndarray, path: Path) -> None:
    png = Image.fromarray(array)  # mode "L"; attaching the palette makes it "P" with the same indices
    png.putpalette(voc_palette())
    png.save(path, optimize=False)


def _annotation_xml(image_id: str, size: tuple[int, int], objects: list[dict]) -> bytes:
    """VOC XML; boxes 1-based inclusive (``xmin=1`` is the first column), as VOC writes them."""
    root = ET.Element("annotation")
    ET.SubElement(root, "folder").text = "VOC2012"
    ET.SubElement(root, "filename").text = f"{image_id}.jpg"
    ET.SubElement(ET.SubElement(root, "source"), "database").text = "skipless default (generated)"
    size_node = ET.SubElement(root, "size")
    for key, value in zip(("width", "height", "depth"), (*size, 3)):
        ET.SubElement(size_node, key).text = str(value)
    ET.SubElement(root, "segmented").text = "1"
    for o in objects:
        node = ET.SubElement(root, "object")
        ET.SubElement(node, "name").text = o["name"]
        ET.SubElement(node, "pose").text = "Unspecified"
        ET.SubElement(node, "truncated").text = str(int(o["truncated"]))
        ET.SubElement(node, "occluded").text = str(int(o["occluded"]))
        ET.SubElement(node, "difficult").text = "0"
        box = ET.SubElement(node, "bndbox")
        for key, value in zip(("xmin", "ymin", "xmax", "ymax"), o["box"]):
            ET.SubElement(box, key).text = str(value + 1)
    ET.indent(root, space="\t")
    return ET.tostring(root, encoding="utf-8") + b"\n"


def write_scene(index: int, seed: int, voc: Path) -> tuple[str, list[str]]:
    """Render scene ``index`` and write its JPEG, class and object masks and XML into ``voc``."""
    image_id = f"{index:06d}"
    image, instance, objects = render(index, seed)
    lookup = np.full(256, 255, dtype=np.uint8)
    lookup[0] = 0
    for k, o in enumerate(objects, start=1):
        lookup[k] = CLASSES.index(o["name"])
    Image.fromarray(image).save(voc / "JPEGImages" / f"{image_id}.jpg", quality=JPEG_QUALITY)
    _palette_png(lookup[instance], voc / "SegmentationClass" / f"{image_id}.png")
    _palette_png(instance, voc / "SegmentationObject" / f"{image_id}.png")
    size = (image.shape[1], image.shape[0])
    (voc / "Annotations" / f"{image_id}.xml").write_bytes(_annotation_xml(image_id, size, objects))
    return image_id, [o["name"] for o in objects]


def _write_chunk(args: tuple[list[int], int, str]) -> list[tuple[str, list[str]]]:
    indices, seed, voc = args
    return [write_scene(i, seed, Path(voc)) for i in indices]


# --------------------------------------------------------------------------- whole dataset
@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Exclusive ``flock`` on ``<root>/.generate.lock``: one generator at a time (DDP ranks wait)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".generate.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _default_workers() -> int:
    try:
        return max(1, min(8, len(os.sched_getaffinity(0))))
    except AttributeError:
        return max(1, min(8, os.cpu_count() or 1))


def _check_replaceable(voc: Path) -> None:
    """Refuse to overwrite a VOC2012 folder that skipless did not generate (e.g. the real one)."""
    if voc.exists() and not (voc / GENERATED_TAG).exists() and any(voc.iterdir()):
        raise FileExistsError(
            f"{voc} holds a dataset that skipless did not generate (no {GENERATED_TAG}); not "
            "overwriting it with the default. Point data.root (or --root) at another folder for the "
            "default, or use this one as real VOC; see data/README.md")


def _generate_unlocked(root: Path, n_train: int, n_val: int, seed: int, workers: int | None) -> Path:
    voc = voc_dir(root, "2012")
    _check_replaceable(voc)
    voc.parent.mkdir(parents=True, exist_ok=True)
    for stale in voc.parent.glob(".VOC2012.*"):  # left by an interrupted generation
        shutil.rmtree(stale, ignore_errors=True)
    tmp = voc.parent / f".VOC2012.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    for folder in ("JPEGImages", "SegmentationClass", "SegmentationObject", "Annotations",
                   "ImageSets/Segmentation", "ImageSets/Main"):
        (tmp / folder).mkdir(parents=True)
    (tmp / GENERATED_TAG).write_text("generated by skipless.data.synthetic; safe to delete and regenerate\n")

    total = n_train + n_val
    workers = _default_workers() if workers is None else max(1, workers)
    chunks = [(list(range(s, min(s + 16, total))), seed, str(tmp)) for s in range(0, total, 16)]
    names: dict[str, list[str]] = {}
    with tqdm(total=total, desc=f"generating {total} default images", unit="img", file=sys.stderr) as bar:
        if workers == 1 or total < 64:  # a pool costs more than it saves on a handful of images
            results = map(_write_chunk, chunks)
            pool = None
        else:
            # fork, not spawn: spawn re-imports the caller's __main__, and a user script without a
            # main guard would re-run itself and wait forever on our lock. The children only use
            # numpy, scikit-image and PIL, which are safe after a fork.
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            pool = multiprocessing.get_context(method).Pool(min(workers, len(chunks)))
            results = pool.imap_unordered(_write_chunk, chunks)
        try:
            for chunk in results:
                names.update(chunk)
                bar.update(len(chunk))
        finally:
            if pool is not None:
                pool.terminate()
                pool.join()

    ids = [f"{i:06d}" for i in range(total)]
    splits = {"train": ids[:n_train], "val": ids[n_train:], "trainval": ids}
    for split, split_ids in splits.items():
        for kind in ("Segmentation", "Main"):
            (tmp / "ImageSets" / kind / f"{split}.txt").write_text("".join(i + "\n" for i in split_ids))
    marker = {
        "generator": "skipless.data.synthetic", "version": GENERATOR_VERSION, "seed": seed,
        "n_train": n_train, "n_val": n_val, "classes": list(CLASSES), "void_band_px": BAND,
        "objects": {s: dict(sorted(Counter(n for i in splits[s] for n in names[i]).items()))
                    for s in ("train", "val")},
    }
    (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n")  # last: marks completeness

    old = voc.parent / f".VOC2012.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if voc.exists():
        voc.rename(old)
    tmp.rename(voc)
    shutil.rmtree(old, ignore_errors=True)
    return root


def generate(root: str | os.PathLike, n_train: int = 2000, n_val: int = 1000, seed: int = 0,
             workers: int | None = None) -> Path:
    """Write the default dataset under ``<root>/VOCdevkit/VOC2012`` (replacing a previous default).

    Everything is written into a temporary sibling folder that is renamed into place when complete,
    so an interrupted generation never looks like a dataset.

    Args:
        root: data root; ``VOCdevkit/`` is created inside it.
        n_train: images of the train split (ids ``000000`` ...).
        n_val: images of the val split (the ids that follow).
        seed: image ``i`` is drawn from ``numpy.random.default_rng([seed, i])``.
        workers: processes; None uses the available cores (at most 8), 1 runs in this process.

    Returns:
        ``root``, as a Path, for the readers of ``voc.py``.
    """
    root = Path(root)
    with _locked(root):
        return _generate_unlocked(root, n_train, n_val, seed, workers)


def is_complete(root: str | os.PathLike, n_train: int, n_val: int, seed: int) -> bool:
    """Whether ``root`` holds a finished default of this size, seed and generator version."""
    voc = voc_dir(root, "2012")
    marker = read_marker(voc)
    if not marker or marker.get("generator") != "skipless.data.synthetic":
        return False
    if (marker.get("version"), marker.get("seed"), marker.get("n_train"), marker.get("n_val")) != \
            (GENERATOR_VERSION, seed, n_train, n_val):
        return False
    lists = [voc / "ImageSets" / "Segmentation" / f"{s}.txt" for s in ("train", "val")]
    images = voc / "JPEGImages"
    return all(p.is_file() for p in lists) and images.is_dir() and \
        len(os.listdir(images)) == n_train + n_val


def default_settings() -> dict:
    """Root, sizes and seed of the embedded default, as ``configs/data/default.yaml`` states them."""
    from ..config import load_group  # the YAML is the one place these values are written

    d = load_group("data", "default").data
    return {"root": str(d.root), "n_train": int(d.n_train), "n_val": int(d.n_val), "seed": int(d.seed)}


def ensure_default(root: str | os.PathLike, n_train: int | None = None, n_val: int | None = None,
                   seed: int | None = None, workers: int | None = None) -> Path:
    """Return ``root`` once it holds the default dataset, generating it first if needed.

    Sizes and seed left as None are those of ``configs/data/default.yaml`` (``default_settings``).

    A complete default of the same size, seed and generator version is used as it is; one of
    another size, seed or version is regenerated (saying so). Safe to call from several processes
    at once (DDP ranks): they wait on a file lock and the first one generates.
    """
    root = Path(root)
    settings = default_settings() if None in (n_train, n_val, seed) else {}
    n_train = settings["n_train"] if n_train is None else n_train
    n_val = settings["n_val"] if n_val is None else n_val
    seed = settings["seed"] if seed is None else seed
    if is_complete(root, n_train, n_val, seed):
        return root
    with _locked(root):
        if is_complete(root, n_train, n_val, seed):  # another rank finished while we waited
            return root
        voc = voc_dir(root, "2012")
        _check_replaceable(voc)
        old = read_marker(voc)
        if old is not None:
            print(f"regenerating the default dataset at {voc}: it has n_train={old.get('n_train')} "
                  f"n_val={old.get('n_val')} seed={old.get('seed')} version={old.get('version')}, "
                  f"wanted n_train={n_train} n_val={n_val} seed={seed} version={GENERATOR_VERSION}",
                  flush=True)
        else:
            print(f"generating the embedded default dataset ({n_train} train + {n_val} val images) "
                  f"into {voc} (once; see data/README.md)", flush=True)
        return _generate_unlocked(root, n_train, n_val, seed, workers)


def main(argv: list[str] | None = None) -> None:
    defaults = default_settings()  # `make data` passes nothing: the values of configs/data/default.yaml
    parser = argparse.ArgumentParser(description="Generate the embedded default dataset (VOC layout); "
                                     "defaults from configs/data/default.yaml.")
    parser.add_argument("--root", default=defaults["root"], help="data root; writes <root>/VOCdevkit/VOC2012")
    parser.add_argument("--n-train", type=int, default=defaults["n_train"])
    parser.add_argument("--n-val", type=int, default=defaults["n_val"])
    parser.add_argument("--seed", type=int, default=defaults["seed"])
    parser.add_argument("--workers", type=int, default=None, help="processes (default: the cores, at most 8)")
    parser.add_argument("--force", action="store_true", help="regenerate even if a complete default exists")
    args = parser.parse_args(argv)
    voc = voc_dir(args.root, "2012")
    start = time.perf_counter()
    if args.force:
        generate(args.root, args.n_train, args.n_val, args.seed, args.workers)
    elif is_complete(args.root, args.n_train, args.n_val, args.seed):
        print(f"{voc} already holds the default dataset ({args.n_train} train + {args.n_val} val, "
              f"seed {args.seed}); nothing to do (--force regenerates)")
        return
    else:
        ensure_default(args.root, args.n_train, args.n_val, args.seed, args.workers)
    print(f"wrote {args.n_train} train + {args.n_val} val images to {voc} in "
          f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
