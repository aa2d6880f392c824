"""ImageNet-100 (``make data DATA=imagenet100``): CMC's 100 classes of ImageNet-1k, built from an
ImageNet root as a folder of links, the layout the ``imagenet`` reader and seed 002's experiments read.

The classes are ``imagenet100.txt`` beside this file: the list of Tian et al., "Contrastive Multiview
Coding" (ECCV 2020; github.com/HobbitLong/CMC, ``imagenet100.txt``), the usual ImageNet-100 (seed 002
does not name its 100 classes). The subset is

    <out>/train/<wnid>  -> <imagenet>/train/<wnid>     a symbolic link per class folder: nothing is copied
    <out>/val/<wnid>    -> <imagenet>/val/<wnid>
    <out>/LOC_synset_mapping.txt -> <imagenet>/...      when the ImageNet root has it (the class names)

with absolute link targets (the links break if ImageNet moves: build the subset again). ImageNet's
``val/`` must be sorted into class folders (the common layout, e.g. after ``valprep.sh``); a flat
``val/`` is refused, since a class folder is what is linked. ``<out>`` is what the MAE experiments read
as ``$IMAGENET100_ROOT`` (``configs/experiments/mae-*.yaml``; pretraining reads ``<out>/train``, the
probes ``dataset=imagenet root=<out>``, whose reader takes the 100 classes from ``train/``).

Every check comes before anything is written, each one sentence: an ImageNet root without ``train/`` or
``val/``, a flat ``val/``, classes missing from the root (how many, and the first few), and an ``<out>``
that holds anything but this very subset (it is never overwritten; an empty folder is used). The subset
is written into a temporary sibling folder and renamed into place, so an interrupted build leaves no
half subset behind. Run again on a complete subset it says so and writes nothing.
"""
from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ...errors import SkiplessError, exit_on_user_error
from ..errors import README, DatasetNotFoundError, MalformedDatasetError, missing_dataset
from ..image_folder import EXTENSIONS

LIST = Path(__file__).with_name("imagenet100.txt")
SPLITS = ("train", "val")
MAPPING = "LOC_synset_mapping.txt"   # ImageNet's optional class names (imagenet.py reads it)
DEFAULT_OUT = "data/imagenet100"     # where the MAE experiments look when $IMAGENET100_ROOT is unset
LAYOUT = "<imagenet>/train/<wnid>/ and <imagenet>/val/<wnid>/ class folders (val sorted into class folders)"


class SubsetFolderError(SkiplessError, FileExistsError):
    """The output folder already holds something other than the subset that would be built."""


def imagenet100_wnids(path: Path = LIST) -> tuple[str, ...]:
    """The 100 wnids of ``imagenet100.txt``, in its order (comment lines skipped)."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    wnids = tuple(line for line in lines if line and not line.startswith("#"))
    if len(wnids) != 100 or len(set(wnids)) != 100:
        raise MalformedDatasetError(f"{path} lists {len(wnids)} wnids ({len(set(wnids))} distinct); expected 100")
    return wnids


def planned_links(imagenet: Path, wnids: tuple[str, ...] | None = None) -> dict[Path, Path]:
    """``{path in the subset: absolute target}`` for every class folder (and the class names file when
    the root has one). Raises one sentence when the root lacks ``train/`` or ``val/``, keeps ``val/``
    flat, or lacks any class."""
    wnids = imagenet100_wnids() if wnids is None else wnids
    root = Path(os.path.abspath(imagenet))
    for split in SPLITS:
        if not (root / split).is_dir():
            raise missing_dataset(f"ImageNet {split}/ (the source of ImageNet-100)", root / split, LAYOUT)
    if not any(e.is_dir() for e in os.scandir(root / "val")) and any(
            e.name.lower().endswith(EXTENSIONS) for e in os.scandir(root / "val")):
        raise MalformedDatasetError(
            f"{root / 'val'} holds its images flat, but ImageNet-100 links class folders: sort val/ into "
            f"val/<wnid>/ first (e.g. with valprep.sh, or from LOC_val_solution.csv; see {README})")
    missing = [f"{split}/{w}" for w in wnids for split in SPLITS if not (root / split / w).is_dir()]
    if missing:
        classes = len({m.split("/")[1] for m in missing})
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise DatasetNotFoundError(
            f"ImageNet at {root} lacks {classes} of the {len(wnids)} ImageNet-100 classes ({LIST.name}, CMC's list): "
            f"no {', '.join(missing[:5])}{more}; expected {LAYOUT} for every class, nothing was written (see {README})")
    links = {Path(split) / w: root / split / w for split in SPLITS for w in wnids}
    if (root / MAPPING).is_file():
        links[Path(MAPPING)] = root / MAPPING
    return links


def _difference(out: Path, links: dict[Path, Path]) -> str | None:
    """None when ``out`` holds exactly ``links`` (each a link to its target), else the first difference."""
    found = {Path(e.name) for e in os.scandir(out)}
    for split in SPLITS:
        if (out / split).is_dir() and not (out / split).is_symlink():
            found |= {Path(split) / e.name for e in os.scandir(out / split)}
    expected = set(links) | {Path(split) for split in SPLITS}
    for path in sorted(found - expected):
        return f"{path} is not part of it"
    for path in sorted(expected - found):
        return f"{path} is missing"
    for path, target in sorted(links.items()):
        if not (out / path).is_symlink():
            return f"{path} is not a link"
        if os.readlink(out / path) != str(target):
            return f"{path} links to {os.readlink(out / path)}, not {target}"
    return None


@dataclass(frozen=True)
class Built:
    """What ``build_subset`` did: ``written`` False when ``out`` already held the same subset."""

    out: Path
    source: Path
    classes: int
    images: dict[str, int]
    written: bool

    def line(self) -> str:
        counts = " + ".join(f"{self.images[s]:,} {s}" for s in SPLITS)
        classes = f"the {self.classes} classes of {LIST.name} (CMC's list)"
        if self.written:
            return f"ImageNet-100: linked {classes} of {self.source} into {self.out}: {counts} images"
        return f"ImageNet-100: {self.out} already links {classes} of {self.source}, nothing written: {counts} images"


def _count_images(folder: Path) -> int:
    return sum(1 for e in os.scandir(folder) if e.name.lower().endswith(EXTENSIONS))


def build_subset(imagenet: str | os.PathLike, out: str | os.PathLike, wnids: tuple[str, ...] | None = None) -> Built:
    """Link the ImageNet-100 class folders of ``imagenet`` into ``out`` (the module docstring says how).

    Raises, before anything is written: ``DatasetNotFoundError`` (no ``train/`` or ``val/``, classes
    missing), ``MalformedDatasetError`` (a flat ``val/``), ``SubsetFolderError`` (``out`` holds
    something else)."""
    out = Path(out).resolve() if Path(out).is_symlink() else Path(out)  # a link to a folder elsewhere: build there
    links = planned_links(Path(imagenet), wnids)
    source = Path(os.path.abspath(imagenet))
    classes = sum(1 for p in links if p.parts[0] == "train")
    written = True
    if out.exists() and (not out.is_dir() or any(os.scandir(out))):
        if not out.is_dir():
            raise SubsetFolderError(f"{out} exists and is not a folder; ImageNet-100 is never written over "
                                    "another file: remove it or set IMAGENET100_ROOT= to another folder")
        difference = _difference(out, links)
        if difference is not None:
            raise SubsetFolderError(
                f"{out} already holds something other than the ImageNet-100 subset of {source} ({difference}); "
                "it is never overwritten: remove it, or set IMAGENET100_ROOT= to another folder")
        written = False
    else:
        print(f"ImageNet-100: linking {len(links)} entries of {source} into {out} ...", flush=True)
        staging = out.parent / f".{out.name}.building-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            for path, target in links.items():
                (staging / path).parent.mkdir(parents=True, exist_ok=True)
                os.symlink(target, staging / path, target_is_directory=target.is_dir())
            if out.is_dir():
                out.rmdir()  # empty (checked above): the complete subset takes its place
            os.rename(staging, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    images = {split: sum(_count_images(out / split / w) for w in os.listdir(out / split)) for split in SPLITS}
    return Built(out, source, classes, images, written)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Build ImageNet-100 (CMC's 100 classes, imagenet100.txt) from an ImageNet root as a folder "
                    "of links: <out>/{train,val}/<wnid> -> <imagenet>/{train,val}/<wnid>.")
    parser.add_argument("--imagenet-root", default=os.environ.get("IMAGENET_ROOT"),
                        help="ImageNet-1k with train/<wnid>/ and val/<wnid>/ (default: $IMAGENET_ROOT)")
    parser.add_argument("--out", default=os.environ.get("IMAGENET100_ROOT") or DEFAULT_OUT,
                        help=f"the subset's folder (default: $IMAGENET100_ROOT, else {DEFAULT_OUT})")
    args = parser.parse_args(argv)

    def body() -> None:
        if not args.imagenet_root:
            raise DatasetNotFoundError(
                "ImageNet-100 is built from ImageNet-1k: name its folder with IMAGENET_ROOT=<folder holding train/ and "
                f"val/> (make data DATA=imagenet100 IMAGENET_ROOT=...; see {README})")
        print(build_subset(args.imagenet_root, args.out).line())

    exit_on_user_error(body)


if __name__ == "__main__":
    main()
