"""Subsets of ImageNet-1k (``make data DATA=imagenet100`` or ``DATA=imagenet10``), each built from an
ImageNet root as a folder of links, the layout the ``imagenet`` reader and seed 002's experiments read.

``SUBSETS`` lists them, each with its classes in a file beside this one:

- ``imagenet100``, ImageNet-100: ``imagenet100.txt``, the list of Tian et al., "Contrastive Multiview
  Coding" (ECCV 2020; github.com/HobbitLong/CMC, ``imagenet100.txt``), the usual ImageNet-100 (seed 002
  does not name its 100 classes), read by the MAE experiments;
- ``imagenet10``, ImageNet-10: ``imagenet10.txt``, the 10 classes of fast.ai's Imagenette
  (github.com/fastai/imagenette), the usual 10-class subset (seed 002, Sec. 5.1, Fig. 4, trains its
  ResNet-18 on 10 classes of ImageNet without naming them). Whoever has Imagenette itself needs no build:
  its ``train/<wnid>`` and ``val/<wnid>`` folders are what the ``imagenet`` reader reads.

A subset is

    <out>/train/<wnid>  -> <imagenet>/train/<wnid>     a symbolic link per class folder: nothing is copied
    <out>/val/<wnid>    -> <imagenet>/val/<wnid>
    <out>/LOC_synset_mapping.txt -> <imagenet>/...      when the ImageNet root has it (the class names)

with absolute link targets (the links break if ImageNet moves: build the subset again). ImageNet's
``val/`` must be sorted into class folders (the common layout, e.g. after ``valprep.sh``); a flat
``val/`` is refused, since a class folder is what is linked. ``<out>`` is the subset's variable, else its
default folder: ImageNet-100's is what the MAE experiments read as ``$IMAGENET100_ROOT``
(``configs/experiments/mae-*.yaml``; pretraining reads ``<out>/train``, the probes ``dataset=imagenet
root=<out>``, whose reader takes the 100 classes from ``train/``); ImageNet-10's is ``$IMAGENET10_ROOT``,
which ``make train DATA=imagenet10`` reads (``configs/data/imagenet10.yaml``).

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
from ..errors import README, DatasetNotFoundError, MalformedDatasetError, UnknownDatasetError, missing_dataset
from ..image_folder import EXTENSIONS

SPLITS = ("train", "val")
MAPPING = "LOC_synset_mapping.txt"   # ImageNet's optional class names (imagenet.py reads it)
LAYOUT = "<imagenet>/train/<wnid>/ and <imagenet>/val/<wnid>/ class folders (val sorted into class folders)"


@dataclass(frozen=True)
class Subset:
    """One subset ``make data`` builds: ``name`` (``DATA=`` and ``--subset``), ``title`` (how messages name
    it), ``wnids_file`` (its classes, one wnid a line, beside this module), ``classes`` (how many that file
    must list), ``origin`` (whose list it is), ``env`` (the variable naming its folder) and
    ``default_out`` (the folder when ``env`` is unset: ``data/<name>``, data/README.md's arrangement)."""

    name: str
    title: str
    wnids_file: Path
    classes: int
    origin: str
    env: str
    default_out: str


SUBSETS = {s.name: s for s in (
    # CMC's list (github.com/HobbitLong/CMC); data/imagenet100 is where the MAE experiments look by default
    Subset("imagenet100", "ImageNet-100", Path(__file__).with_name("imagenet100.txt"), 100, "CMC's list",
           "IMAGENET100_ROOT", "data/imagenet100"),
    # Imagenette's classes (github.com/fastai/imagenette); configs/data/imagenet10.yaml reads data/imagenet10
    Subset("imagenet10", "ImageNet-10", Path(__file__).with_name("imagenet10.txt"), 10, "Imagenette's classes",
           "IMAGENET10_ROOT", "data/imagenet10"),
)}
DEFAULT = "imagenet100"   # make data DATA=imagenet100 came first: the command without --subset builds it


class SubsetFolderError(SkiplessError, FileExistsError):
    """The output folder already holds something other than the subset that would be built."""


def subset_of(subset: str | Subset) -> Subset:
    """The ``SUBSETS`` entry named ``subset`` (a ``Subset`` is returned as it is); one sentence when no
    subset has that name."""
    if isinstance(subset, Subset):
        return subset
    if subset not in SUBSETS:
        raise UnknownDatasetError(f"unknown ImageNet subset {subset!r}; expected one of: {', '.join(SUBSETS)}")
    return SUBSETS[subset]


def subset_wnids(subset: str | Subset = DEFAULT) -> tuple[str, ...]:
    """The wnids of the subset's list, in its order (comment lines skipped); one sentence when the file
    does not list exactly ``classes`` distinct ids."""
    subset = subset_of(subset)
    path = subset.wnids_file
    lines = [line.strip() for line in path.read_text().splitlines()]
    wnids = tuple(line for line in lines if line and not line.startswith("#"))
    if len(wnids) != subset.classes or len(set(wnids)) != subset.classes:
        raise MalformedDatasetError(f"{path} lists {len(wnids)} wnids ({len(set(wnids))} distinct); expected "
                                    f"{subset.classes}, the {subset.title} classes")
    return wnids


def planned_links(imagenet: Path, subset: str | Subset = DEFAULT) -> dict[Path, Path]:
    """``{path in the subset: absolute target}`` for every class folder (and the class names file when
    the root has one). Raises one sentence when the root lacks ``train/`` or ``val/``, keeps ``val/``
    flat, or lacks any class."""
    subset = subset_of(subset)
    wnids = subset_wnids(subset)
    root = Path(os.path.abspath(imagenet))
    for split in SPLITS:
        if not (root / split).is_dir():
            raise missing_dataset(f"ImageNet {split}/ (the source of {subset.title})", root / split, LAYOUT)
    if not any(e.is_dir() for e in os.scandir(root / "val")) and any(
            e.name.lower().endswith(EXTENSIONS) for e in os.scandir(root / "val")):
        raise MalformedDatasetError(
            f"{root / 'val'} holds its images flat, but {subset.title} links class folders: sort val/ into "
            f"val/<wnid>/ first (e.g. with valprep.sh, or from LOC_val_solution.csv; see {README})")
    missing = [f"{split}/{w}" for w in wnids for split in SPLITS if not (root / split / w).is_dir()]
    if missing:
        classes = len({m.split("/")[1] for m in missing})
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise DatasetNotFoundError(
            f"ImageNet at {root} lacks {classes} of the {len(wnids)} {subset.title} classes "
            f"({subset.wnids_file.name}, {subset.origin}): no {', '.join(missing[:5])}{more}; expected {LAYOUT} "
            f"for every class, nothing was written (see {README})")
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
    subset: Subset

    def line(self) -> str:
        counts = " + ".join(f"{self.images[s]:,} {s}" for s in SPLITS)
        classes = f"the {self.classes} classes of {self.subset.wnids_file.name} ({self.subset.origin})"
        title = self.subset.title
        if self.written:
            return f"{title}: linked {classes} of {self.source} into {self.out}: {counts} images"
        return f"{title}: {self.out} already links {classes} of {self.source}, nothing written: {counts} images"


def _count_images(folder: Path) -> int:
    return sum(1 for e in os.scandir(folder) if e.name.lower().endswith(EXTENSIONS))


def build_subset(imagenet: str | os.PathLike, out: str | os.PathLike, subset: str | Subset = DEFAULT) -> Built:
    """Link the class folders of ``subset`` (a ``SUBSETS`` name) of ``imagenet`` into ``out`` (the module
    docstring says how).

    Raises, before anything is written: ``UnknownDatasetError`` (no such subset), ``DatasetNotFoundError``
    (no ``train/`` or ``val/``, classes missing), ``MalformedDatasetError`` (a flat ``val/``, a class list
    of the wrong length), ``SubsetFolderError`` (``out`` holds something else)."""
    subset = subset_of(subset)
    out = Path(out).resolve() if Path(out).is_symlink() else Path(out)  # a link to a folder elsewhere: build there
    links = planned_links(Path(imagenet), subset)
    source = Path(os.path.abspath(imagenet))
    classes = sum(1 for p in links if p.parts[0] == "train")
    written = True
    if out.exists() and (not out.is_dir() or any(os.scandir(out))):
        if not out.is_dir():
            raise SubsetFolderError(f"{out} exists and is not a folder; {subset.title} is never written over "
                                    f"another file: remove it or set {subset.env}= to another folder")
        difference = _difference(out, links)
        if difference is not None:
            raise SubsetFolderError(
                f"{out} already holds something other than the {subset.title} subset of {source} ({difference}); "
                f"it is never overwritten: remove it, or set {subset.env}= to another folder")
        written = False
    else:
        print(f"{subset.title}: linking {len(links)} entries of {source} into {out} ...", flush=True)
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
    return Built(out, source, classes, images, written, subset)


def main(argv: list[str] | None = None) -> None:
    listed = "; ".join(f"{s.name}: {s.title}, {s.classes} classes of {s.wnids_file.name} ({s.origin})"
                       for s in SUBSETS.values())
    parser = argparse.ArgumentParser(
        description=f"Build a subset of ImageNet-1k ({listed}) from an ImageNet root as a folder of links: "
                    "<out>/{train,val}/<wnid> -> <imagenet>/{train,val}/<wnid>.")
    parser.add_argument("--subset", choices=list(SUBSETS), default=DEFAULT, help=f"which (default: {DEFAULT})")
    parser.add_argument("--imagenet-root", default=os.environ.get("IMAGENET_ROOT"),
                        help="ImageNet-1k with train/<wnid>/ and val/<wnid>/ (default: $IMAGENET_ROOT)")
    parser.add_argument("--out", help="the subset's folder (default: its variable, else data/<subset>: "
                                      + ", ".join(f"${s.env} or {s.default_out}" for s in SUBSETS.values()) + ")")
    args = parser.parse_args(argv)
    subset = SUBSETS[args.subset]
    out = args.out or os.environ.get(subset.env) or subset.default_out

    def body() -> None:
        if not args.imagenet_root:
            raise DatasetNotFoundError(
                f"{subset.title} is built from ImageNet-1k: name its folder with IMAGENET_ROOT=<folder holding train/ "
                f"and val/> (make data DATA={subset.name} IMAGENET_ROOT=...; see {README})")
        print(build_subset(args.imagenet_root, out, subset).line())

    exit_on_user_error(body)


if __name__ == "__main__":
    main()
