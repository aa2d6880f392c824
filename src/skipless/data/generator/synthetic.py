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
``configs/recipe/dino-demo.yaml``. Shape and texture remain a second cue for longer runs.

The scenes are written exactly like PASCAL VOC 2012 (JPEGs, palette PNG masks with a void band
along object boundaries, XML boxes, ImageSets lists; also ``SegmentationObject/``), so that the
readers of ``voc.py`` and every evaluator serve the default and real VOC alike. The drawing
itself is ``scene_render.py``; this module writes, generates and checks the dataset.

Image ``i`` depends only on ``(seed, i)`` (its own ``numpy`` Generator), so the output is the same
byte for byte whatever the number of worker processes. ``ensure_default`` generates once and is
safe to call from every DDP rank at the same time.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
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
from PIL import Image
from tqdm import tqdm

from .scene_render import BAND, CLASSES, GENERATOR_VERSION, SIDES, render, skimage_data_dir
from ..voc import MARKER, read_marker, voc_dir, voc_palette

# The generator's name in the marker of every default written: the module's path before data/ was
# grouped (issue 28), kept so that a default generated then still reads as complete.
GENERATOR_ID = "skipless.data.synthetic"

__all__ = ["BAND", "CLASSES", "GENERATOR_VERSION", "SIDES", "annotation_xml", "ensure_default", "generate",
           "is_complete", "palette_png", "render", "skimage_data_dir", "write_scene"]

JPEG_QUALITY = 90
GENERATED_TAG = ".skipless_generated"  # written first: a VOC2012/ holding it is ours to replace


def palette_png(array: np.ndarray, path: Path) -> None:
    png = Image.fromarray(array)  # mode "L"; attaching the palette makes it "P" with the same indices
    png.putpalette(voc_palette())
    png.save(path, optimize=False)


def annotation_xml(image_id: str, size: tuple[int, int], objects: list[dict], folder: str = "VOC2012") -> bytes:
    """VOC XML; boxes 1-based inclusive (``xmin=1`` is the first column), as VOC writes them."""
    root = ET.Element("annotation")
    ET.SubElement(root, "folder").text = folder
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
    palette_png(lookup[instance], voc / "SegmentationClass" / f"{image_id}.png")
    palette_png(instance, voc / "SegmentationObject" / f"{image_id}.png")
    size = (image.shape[1], image.shape[0])
    (voc / "Annotations" / f"{image_id}.xml").write_bytes(annotation_xml(image_id, size, objects))
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
    (tmp / GENERATED_TAG).write_text(f"generated by {GENERATOR_ID}; safe to delete and regenerate\n")

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
        "generator": GENERATOR_ID, "version": GENERATOR_VERSION, "seed": seed,
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
    if not marker or marker.get("generator") != GENERATOR_ID:
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
    from ...config import load_group  # the YAML is the one place these values are written

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
