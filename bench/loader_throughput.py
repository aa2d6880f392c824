"""The ``loader`` section of ``make bench``: what the training pipelines cost per image at full scale, and
whether the pretraining loader can feed the step.

The images are ImageNet-sized JPEGs with natural-image statistics (``natural_images.py``: a 1/f amplitude
spectrum per channel, correlated channels, occluding objects with hard edges; 500 x 375 and the other
common ImageNet sizes; quality 90, about 120 kB a file), generated on the first call into the bench's cache
folder (``bench/cache/``, ``--cache``) and reused after. They are read from the page cache: a disk or a
network file system is not part of these numbers.

1. **CPU milliseconds per image** (``pipelines``), one thread (``torch.set_num_threads(1)``; PIL's
   operations run on one thread), in the main process, no workers: each image decoded by the training
   reader (``data/reads.py``'s ``decode_rgb``) and transformed, for each pipeline at full scale:
   ``dino``, DINO's multi-crop (the suite's ``MultiCropAugmentation`` at the paper's 2 x 224 + 10 x 96);
   ``mae``, MAE's training view at 224 (``recipe/mae-paper.yaml``); ``supervised``, the supervised
   training transform at 224 (``train.yaml``'s timm recipe with RandAugment and random erasing);
   ``decode``, the decode alone, which every other row includes; ``dino colour on device`` and ``dino crops
   on device``, what DINO's workers still do under ``data.augment_on=device`` (decode, crop, flip to uint8)
   and ``device_crops`` (decode, draw the boxes); ``device_part`` times the device's half of ``device_crops``
   (cuts, resizes, colour ops) on this CPU for one batch. Beside ours, the official
   ``DataAugmentationDINO`` (facebookresearch/dino ``main_dino.py``, with the same scales and number of
   local crops; its crop sizes are fixed at 224 and 96 in its code), imported from the checkout that
   the ``official`` section reads (``DINO_REPO`` or ``--dino-repo``); one sentence says why when none is
   given. The pipelines take turns image by image, so a neighbour's load on shared cores falls on all of
   them alike. CPU time (``time.process_time``: this process, all its threads) and wall time are summed
   over ``images`` images after ``warmup``; ``images_per_s_per_core`` is 1000 / CPU ms, what one busy
   core delivers.
2. **Where DINO's multi-crop time goes** (``dino_breakdown``): the transforms of ``MultiCropAugmentation``
   applied one at a time and timed (CPU): the JPEG decode, the 12 crops with their resize to uint8 and
   the flip, the colour ops (jitter, grayscale, blur, solarize), to-tensor and normalise. The baseline
   for moving the colour ops onto the device.
3. **A reduced-size decode for the local crops** (``draft``; measured only, training does not use it):
   PIL's ``Image.draft`` decodes a JPEG at 1/2 scale in the DCT. The local crops cut from that image
   against those cut from the full decode (the globals still need the full one), with the share of local
   crops whose region is smaller than the crop on a side (upsampled).
4. **The training loader** (``workers``): ``training/data.py``'s pretraining loader over these images
   (the ImageFolder reader, DINO's multi-crop at the paper's sizes, DINO's collate, pinned memory on a
   GPU), 64 images a batch (one GPU's batch of the paper recipe), with 0 workers (the main process) and
   1, 2, 4 ... up to this machine's cores. Images/s in the steady state: after the first round of batches
   (one per worker, which the workers' start-up delays: ``startup_s``, paid every epoch because workers
   are not persistent) over a multiple of the worker count of batches; the images repeat to fill them.
   Against it, the demand: the images/s of the fastest step of the ``pretrain`` section when it ran in
   the same ``make bench`` (on a CPU that is the demo's step, so the ratio says little there).
"""
from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import torch
from PIL import Image
from torch.utils.data import Dataset
from torchvision import transforms
from torchvision.transforms import functional as TF

from skipless.config import load_config
from skipless.data.reads import decode_rgb
from skipless.ssl import method_of
from skipless.ssl.dino.self_distillation import MultiCropAugmentation, MultiCropColour, MultiCropCuts, collate_multicrop
from skipless.supervised.augment import train_transform
from skipless.training.data import pretrain_dataset, pretrain_loader

from .natural_images import QUALITY, VERSION, ensure_natural_jpegs
from .side_by_side import import_official, official_checkout_problem
from .table import markdown_table

PIPELINE_COLUMNS = ["pipeline", "views", "cpu_ms_per_image", "wall_ms_per_image", "images_per_s_per_core"]
# The worker table's rows: what the loader's workers do on each path of ``data.augment_on`` (auto picks one).
AUGMENT_PATHS = ("workers", "device", "device_crops")
BREAKDOWN_COLUMNS = ["stage", "op", "global_ms", "local_ms", "ms_per_image", "share"]
WORKER_COLUMNS = ["augment_on", "crops", "batch", "num_workers", "startup_s", "batches", "images_per_s", "images_per_s_per_worker",
                  "demand_images_per_s", "loader_over_demand"]
# DINO at the paper's crops (2 x 224 + 10 x 96, as the pretrain section's GPU rows), one GPU's batch of 64.
DINO_SIZES = ["data=imagenet", "dino.global_crop_size=224", "dino.local_crop_size=96", "dino.local_crops_number=10",
              "train.batch_size_per_device=64", "train.global_batch=null"]
# The breakdown's stages, in the order a crop goes through them, and the stage of each transform class.
STAGES = {"decode": "JPEG decode (+ the RGB copy)", "crops": "crops + resize to uint8 + flip",
          "colour": "colour: jitter, grayscale, blur, solarize", "tensor": "to tensor + normalise"}
STAGE_OF = {"decode_rgb": "decode", "convert": "decode", "RandomResizedCrop": "crops",
            "RandomHorizontalFlip": "crops", "ColorJitter": "colour", "RandomGrayscale": "colour",
            "RandomGaussianBlur": "colour", "RandomSolarize": "colour", "ToTensor": "tensor", "Normalize": "tensor"}


def crops_text(global_size: int, local_size: int, n_local: int) -> str:
    return f"2x{global_size} + {n_local}x{local_size}"


def our_pipelines(overrides: list[str]) -> dict[str, tuple[str, Callable]]:
    """name -> (its views, PIL image -> the views): ours at full scale (module docstring); ``overrides``
    change DINO's config (a test's smaller crops)."""
    dino = load_config("pretrain", [*DINO_SIZES, *overrides])
    mae = load_config("pretrain", ["ssl=mae", "data=imagenet"])
    aug = load_config("train", ["data=imagenet"]).aug
    d = dino.dino
    views = crops_text(d.global_crop_size, d.local_crop_size, d.local_crops_number)
    on = {where: load_config("pretrain", [*DINO_SIZES, *overrides, f"data.augment_on={where}"])
          for where in ("device", "device_crops")}
    return {"decode": ("-", lambda image: image),
            "dino": (views, method_of(dino).transform(dino)),
            "dino colour on device": (views, method_of(on["device"]).transform(on["device"])),
            "dino crops on device": (views, method_of(on["device_crops"]).transform(on["device_crops"])),
            "mae": (f"1x{mae.mae.input_size}", method_of(mae).transform(mae)),
            "supervised": (f"1x{aug.image_size}", train_transform(aug))}


def official_pipeline(repo: str | None, overrides: list[str]) -> tuple[tuple[str, Callable] | None, str]:
    """(its views, the official ``DataAugmentationDINO``) or None, and the checkout used or why none."""
    problem = official_checkout_problem(repo)
    if problem:
        return None, (f"official DINO DataAugmentationDINO: not measured, {problem}; "
                      "official_cpu_ms_per_image is null.")
    d = load_config("pretrain", [*DINO_SIZES, *overrides]).dino
    official = import_official(repo).main.DataAugmentationDINO(tuple(d.global_crops_scale), tuple(d.local_crops_scale),
                                                               int(d.local_crops_number))
    return (crops_text(224, 96, d.local_crops_number), official), f"official DINO DataAugmentationDINO from {repo}"


def per_image_costs(paths: list[Path], pipelines: dict[str, tuple[str, Callable]], warmup: int) -> list[dict]:
    """One row per pipeline: CPU and wall ms per image over ``paths[warmup:]``, decode included, the
    pipelines taking turns image by image."""
    cpu = dict.fromkeys(pipelines, 0.0)
    wall = dict.fromkeys(pipelines, 0.0)
    for i, path in enumerate(paths):
        for name, (_, transform) in pipelines.items():
            c, w = time.process_time(), time.perf_counter()
            transform(decode_rgb(path))
            if i >= warmup:
                cpu[name] += time.process_time() - c
                wall[name] += time.perf_counter() - w
    n = len(paths) - warmup
    return [{"pipeline": name, "views": views, "cpu_ms_per_image": 1000 * cpu[name] / n,
             "wall_ms_per_image": 1000 * wall[name] / n, "images_per_s_per_core": n / cpu[name] if cpu[name] else None,
             "images": n} for name, (views, _) in pipelines.items()]


def device_part(paths: list[Path], overrides: list[str], batch: int, device: torch.device | None = None) -> dict:
    """The device's half of ``data.augment_on=device_crops``: ``batch`` images' boxes drawn and collated as the
    workers do, then on ``device`` (None: the GPU where there is one, else this CPU at one thread) the cuts and
    resizes (``MultiCropCuts``) and the colour ops (``MultiCropColour``, all of ``device``'s half) of the batch;
    ms for each (CPU time on a CPU, wall time after a synchronize on a GPU), the median of 3 runs after one."""
    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cfg = load_config("pretrain", [*DINO_SIZES, *overrides, "data.augment_on=device_crops"])
    d = cfg.dino
    boxes = method_of(cfg).transform(cfg)
    whole = collate_multicrop([boxes(decode_rgb(paths[i % len(paths)])) for i in range(batch)])
    images = [image.to(device) for image in whole[1:]]  # whole[0]: the boxes, as lists
    cuts, colour = MultiCropCuts(d.global_crop_size, d.local_crop_size), MultiCropColour()
    on_gpu = device.type == "cuda"

    def now() -> float:
        if on_gpu:
            torch.cuda.synchronize(device)
            return time.perf_counter()
        return time.process_time()

    times: dict[str, list[float]] = {"cuts": [], "colour": []}
    for run in range(4):
        c = now()
        crops = cuts(whole[0], images)
        t = now()
        colour(crops)
        done = now()
        if run:
            times["cuts"].append(1000 * (t - c))
            times["colour"].append(1000 * (done - t))
    median = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    return {"device": str(device), "batch": batch, "cuts_ms": median["cuts"], "colour_ms": median["colour"],
            "total_ms": median["cuts"] + median["colour"],
            "ms_per_image": (median["cuts"] + median["colour"]) / batch,
            # what the device adds to each image's step on either device path
            "device_ms_per_image": {"workers": 0.0, "device": median["colour"] / batch,
                                    "device_crops": (median["cuts"] + median["colour"]) / batch}}


def flat(transform: Callable) -> list[Callable]:
    """The transforms a ``Compose`` (nested or not) applies, in order."""
    if isinstance(transform, transforms.Compose):
        return [t for inner in transform.transforms for t in flat(inner)]
    return [transform]


def op_name(transform: Callable) -> str:
    """A transform's class name; a ``RandomApply`` of one transform is named by that one."""
    if isinstance(transform, transforms.RandomApply) and len(transform.transforms) == 1:
        return type(transform.transforms[0]).__name__
    return type(transform).__name__


def dino_breakdown(paths: list[Path], aug: MultiCropAugmentation, warmup: int) -> dict:
    """CPU ms per image of each transform of ``aug`` (global and local crops apart), the decode, and
    their sums by stage (module docstring), over ``paths[warmup:]``."""
    views = [("global", flat(aug.global_1)), ("global", flat(aug.global_2))]
    views += [("local", flat(aug.local))] * aug.local_crops_number
    spent: Counter = Counter()

    def timed(key: tuple[str, str], f: Callable, x):
        start = time.process_time()
        y = f(x)
        spent[key] += time.process_time() - start
        return y

    for i, path in enumerate(paths):
        if i == warmup:
            spent.clear()
        image = timed(("decode_rgb", "-"), decode_rgb, path)
        image = timed(("convert", "-"), lambda im: im.convert("RGB"), image)  # MultiCropAugmentation.__call__'s
        for kind, ops in views:
            x = image
            for t in ops:
                x = timed((op_name(t), kind), t, x)
    n = len(paths) - warmup
    order = [*STAGES.values(), "other"]
    ops: dict[str, dict] = {}
    for (op, kind), seconds in spent.items():
        row = ops.setdefault(op, {"stage": STAGES.get(STAGE_OF.get(op, ""), "other"), "op": op, "global_ms": None,
                                  "local_ms": None, "ms_per_image": 0.0})
        row["ms_per_image"] += 1000 * seconds / n
        if kind != "-":
            row[f"{kind}_ms"] = (row[f"{kind}_ms"] or 0.0) + 1000 * seconds / n
    rows = sorted(ops.values(), key=lambda r: order.index(r["stage"]))
    total = sum(r["ms_per_image"] for r in rows)
    for r in rows:
        r["share"] = r["ms_per_image"] / total
    stages = {stage: sum(r["ms_per_image"] for r in rows if r["stage"] == stage) for stage in order}
    return {"ops": rows, "stages_ms_per_image": {k: v for k, v in stages.items() if k in STAGES.values() or v},
            "total_ms_per_image": total, "images": n}


def decode_draft(path: Path, scale: int) -> Image.Image:
    """The JPEG at ``path`` decoded at 1/``scale`` (PIL's ``draft``: the DCT's reduced-size decode), RGB."""
    with Image.open(path) as image:
        image.draft("RGB", (image.width // scale, image.height // scale))
        return image.convert("RGB")


def draft_option(paths: list[Path], crop: transforms.RandomResizedCrop, n_local: int, warmup: int,
                 scale: int = 2) -> dict:
    """The local crops (``crop``, ``n_local`` of them) cut from the full decode and from a 1/``scale`` draft
    decode: CPU ms per image of each decode and of the crops, and the share of crops upsampled."""
    spent: Counter = Counter()
    upsampled: Counter = Counter()
    size = min(crop.size)
    for i, path in enumerate(paths):
        if i == warmup:
            spent.clear()
            upsampled.clear()
        for way, decode in (("full", decode_rgb), ("draft", lambda p: decode_draft(p, scale))):
            start = time.process_time()
            image = decode(path)
            spent[f"{way}_decode"] += time.process_time() - start
            start = time.process_time()
            for _ in range(n_local):
                top, left, h, w = crop.get_params(image, crop.scale, crop.ratio)
                upsampled[way] += min(h, w) < size
                TF.resized_crop(image, top, left, h, w, crop.size, crop.interpolation, antialias=crop.antialias)
            spent[f"{way}_crops"] += time.process_time() - start
    n = len(paths) - warmup
    ms = {f"{k}_ms_per_image": 1000 * v / n for k, v in spent.items()}
    return {"scale": scale, **ms, "local_crops": n_local, "images": n,
            "upsampled_share_full": upsampled["full"] / (n * n_local),
            "upsampled_share_draft": upsampled["draft"] / (n * n_local),
            "saving_ms_per_image": ms["full_crops_ms_per_image"] - ms["draft_decode_ms_per_image"]
            - ms["draft_crops_ms_per_image"]}


class Repeated(Dataset):
    """``dataset``'s items over and over, ``length`` of them (the worker table needs more than the pool)."""

    def __init__(self, dataset: Dataset, length: int) -> None:
        self.dataset, self.length = dataset, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        return self.dataset[index % len(self.dataset)]


def with_device_work(demand: float | None, device_ms_per_image: float) -> float | None:
    """The images/s a step of ``demand`` images/s takes when the device also augments each image for
    ``device_ms_per_image`` (the device paths' own share, added to the step's time)."""
    return None if demand is None else 1.0 / (1.0 / demand + device_ms_per_image / 1000)


def worker_counts(cores: int | None = None) -> list[int]:
    """0 (the main process), then 1, 2, 4 ... and the number of cores (at least 2)."""
    n = max(2, cores or len(os.sched_getaffinity(0)))
    counts, w = {0, n}, 1
    while w < n:
        counts.add(w)
        w *= 2
    return sorted(counts)


def loader_row(overrides: list[str], num_workers: int, batches: int, augment_on: str = "workers") -> dict:
    """Images/s of the pretraining loader with ``num_workers`` workers in the steady state (module docstring),
    its workers doing their share of ``data.augment_on=augment_on``."""
    cfg = load_config("pretrain", [*overrides, f"train.num_workers={num_workers}", f"data.augment_on={augment_on}"])
    method = method_of(cfg)
    batch, d = int(cfg.train.batch_size_per_device), cfg.dino
    first = max(1, num_workers)
    timed = -(-batches // first) * first  # a whole number of rounds
    dataset = Repeated(pretrain_dataset(cfg, method.transform(cfg)), (first + timed) * batch)
    loader = pretrain_loader(cfg, dataset, method.collate)
    start = time.perf_counter()
    it = iter(loader)
    for _ in range(first):
        next(it)
    ready = time.perf_counter()
    for _ in range(timed):
        next(it)
    end = time.perf_counter()
    del it
    images_per_s = timed * batch / (end - ready)
    return {"augment_on": augment_on, "crops": crops_text(d.global_crop_size, d.local_crop_size, d.local_crops_number), "batch": batch,
            "num_workers": num_workers, "startup_s": ready - start, "batches": timed, "images_per_s": images_per_s,
            "images_per_s_per_worker": images_per_s / first}


def section_loader(quick: bool = False, demand: float | None = None, dino_repo: str | None = None, *,
                   cache: str | Path = "bench/cache", images: int | None = None, warmup: int | None = None,
                   batches: int | None = None, workers: list[int] | None = None,
                   image_size: tuple[int, int] | None = None, overrides: list[str] | None = None,
                   seed: int = 0) -> tuple[dict, str]:
    """The section's results (module docstring) and the text to print. ``demand``: the step's images/s,
    if known; ``dino_repo``: the official checkout (None: ``$DINO_REPO``); ``images`` measured per
    pipeline after ``warmup``; ``batches`` of the worker table per worker count in ``workers`` (None:
    ``worker_counts()``); ``image_size``, ``overrides``: a test's smaller images and crops."""
    dino_repo = os.environ.get("DINO_REPO") if dino_repo is None else dino_repo
    images = images or (8 if quick else 64)
    warmup = (1 if quick else 4) if warmup is None else warmup
    batches = batches or (2 if quick else 4)
    overrides = [*(["train.batch_size_per_device=16"] if quick else []), *(overrides or [])]
    paths = ensure_natural_jpegs(cache, warmup + images, seed, image_size)
    folder = paths[0].parent
    overrides = [f"data.root={folder}", *overrides]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        random.seed(seed)
        ours = our_pipelines(overrides)
        official, note = official_pipeline(dino_repo, overrides)
        timed = dict(ours) if official is None else {**ours, "official dino": official}
        rows = per_image_costs(paths, timed, warmup)
        dino_aug = ours["dino"][1]
        breakdown = dino_breakdown(paths, dino_aug, warmup)
        draft = draft_option(paths, flat(dino_aug.local)[0], dino_aug.local_crops_number, warmup)
        on_device = device_part(paths, overrides, 8 if quick else 64)
        worker_rows = [loader_row([*DINO_SIZES, *overrides], w, batches, where) for where in AUGMENT_PATHS
                       for w in (workers or worker_counts())]
    finally:
        torch.set_num_threads(threads)
    for r in worker_rows:
        r["demand_images_per_s"] = with_device_work(demand, on_device["device_ms_per_image"][r["augment_on"]])
        r["loader_over_demand"] = r["images_per_s"] / r["demand_images_per_s"] if demand else None
    by_name = {r["pipeline"]: r for r in rows}
    official_row = by_name.get("official dino")
    if official_row is not None:
        official_row["official_over_ours"] = official_row["cpu_ms_per_image"] / by_name["dino"]["cpu_ms_per_image"]
    sizes = Counter(f"{w}x{h}" for w, h in (Image.open(p).size for p in paths))
    kb = sum(p.stat().st_size for p in paths) / len(paths) / 1000
    result = {
        "images": {"folder": str(folder), "count": len(paths), "seed": seed, "recipe": f"natural-jpeg-v{VERSION}",
                   "jpeg_quality": QUALITY, "mean_kb": kb, "sizes": dict(sizes.most_common())},
        "threads": 1, "warmup_images": warmup, "measured_images": images,
        "pipelines": rows,
        "cpu_ms_per_image": {r["pipeline"]: r["cpu_ms_per_image"] for r in rows if r["pipeline"] in ours},
        "wall_ms_per_image": {r["pipeline"]: r["wall_ms_per_image"] for r in rows if r["pipeline"] in ours},
        "official_cpu_ms_per_image": None if official_row is None else official_row["cpu_ms_per_image"],
        "official_wall_ms_per_image": None if official_row is None else official_row["wall_ms_per_image"],
        "official_note": note,
        "dino_breakdown": breakdown, "draft": draft, "device_part": on_device,
        "cores": len(os.sched_getaffinity(0)), "workers": worker_rows}
    return result, section_text(result, demand)


def device_words(device: str) -> str:
    return "this CPU (1 thread)" if device == "cpu" else f"the GPU ({device})"


def section_text(r: dict, demand: float | None) -> str:
    """The tables and lines ``make bench`` prints for the section."""
    im, b, d = r["images"], r["dino_breakdown"], r["draft"]
    shapes = ", ".join(f"{k} ({v})" for k, v in im["sizes"].items())
    lines = [f"\nloader: {im['count']} natural JPEGs ({im['recipe']}, quality {im['jpeg_quality']}, mean "
             f"{im['mean_kb']:.0f} kB; {shapes}) in {im['folder']}",
             f"CPU ms per image, 1 thread, main process, decode included, over {r['measured_images']} images after "
             f"{r['warmup_images']} (pipelines in turn):",
             markdown_table(r["pipelines"], [*PIPELINE_COLUMNS, *(["official_over_ours"] if
                                                                  r["official_cpu_ms_per_image"] else [])])]
    if r["official_cpu_ms_per_image"] is None:
        lines.append(r["official_note"])
    lines += [f"\nDINO multi-crop by transform (CPU ms per image, {b['images']} images; total "
              f"{b['total_ms_per_image']:.1f} ms):", markdown_table(b["ops"], BREAKDOWN_COLUMNS),
              "by stage: " + ", ".join(f"{k} {v:.1f} ms" for k, v in b["stages_ms_per_image"].items()),
              f"\nlocal crops from a 1/{d['scale']} draft decode (measured only): decode {d['draft_decode_ms_per_image']:.1f}"
              f" ms + {d['local_crops']} crops {d['draft_crops_ms_per_image']:.1f} ms, against "
              f"{d['full_crops_ms_per_image']:.1f} ms for the crops from the full decode ({d['full_decode_ms_per_image']:.1f}"
              f" ms, still needed for the globals): {d['saving_ms_per_image']:+.1f} ms per image saved; crops upsampled "
              f"{d['upsampled_share_full']:.0%} (full) and {d['upsampled_share_draft']:.0%} (draft)",
              f"\nthe device's half of data.augment_on=device_crops on {device_words(r['device_part']['device'])}, a batch of "
              f"{r['device_part']['batch']}: cuts + resizes {r['device_part']['cuts_ms']:.0f} ms, colour ops "
              f"{r['device_part']['colour_ms']:.0f} ms ({r['device_part']['ms_per_image']:.1f} ms per image)",
              f"\nthe pretraining loader ({r['cores']} cores; steady state after one batch per worker; the workers' "
              f"share of each data.augment_on path; demand: the fastest step of the pretrain section"
              f"{' with the device part above added to each image on the device paths' if demand else ', not run here'}):",
              markdown_table(r["workers"], WORKER_COLUMNS)]
    return "\n".join(lines)
