"""ImageNet-1k (ILSVRC 2012 classification) with labels, for supervised training and the k-NN / linear evaluators.

``train/`` is the official ``ILSVRC2012_img_train.tar`` with each class tar unpacked into its own
folder, ``train/<wnid>/<wnid>_<k>.JPEG``; the classes are its folders' wnids, sorted (index 0 is
``n01440764``, the order of torchvision's ``ImageFolder`` and of every released checkpoint).

``ILSVRC2012_img_val.tar`` unpacks flat (``val/ILSVRC2012_val_00000001.JPEG`` ...), its labels kept
apart, so ``val/`` is read in any of the forms people have:

1. class folders ``val/<wnid>/*.JPEG`` (after the usual ``valprep.sh``);
2. flat, with Kaggle's ``LOC_val_solution.csv`` (in ``<root>`` or ``val/``): header
   ``ImageId,PredictionString``, the first token of the prediction string is the image's wnid;
3. flat, with the devkit's ``ILSVRC2012_validation_ground_truth.txt`` (one 1-based class id a line,
   for the images in file-name order) and its ``meta.mat`` (``ILSVRC2012_devkit_t12/data/``), which
   maps those ids to wnids. The ids are the devkit's ``ILSVRC2012_ID`` order, *not* the sorted wnids
   (id 1 is n02119789, kit fox), so the sorted ``LOC_synset_mapping.txt`` cannot stand in for
   ``meta.mat``: that would mislabel almost every image silently, and the reader refuses instead.

Class names come from ``LOC_synset_mapping.txt`` (``n01440764 tench, Tinca tinca``) when it is in
``<root>``, else they are the wnids. An image listing is recursive by image extension and sorted.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

from ..errors import MalformedDatasetError, missing_dataset, own_folder_hint
from ..image_folder import list_images
from .labelled import LabelledImages

TITLE = "ImageNet"
SOLUTION = "LOC_val_solution.csv"
GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"
META = "meta.mat"
MAPPING = "LOC_synset_mapping.txt"
DEVKIT = Path("ILSVRC2012_devkit_t12") / "data"
LAYOUT = ("<root>/train/<wnid>/*.JPEG and <root>/val/<wnid>/*.JPEG, or a flat <root>/val/*.JPEG with "
          f"{SOLUTION} (Kaggle) or {GROUND_TRUTH} + {META} (devkit) in <root>, <root>/val or "
          f"<root>/{DEVKIT.as_posix()}; {MAPPING} in <root> (optional) names the classes")


def _find(root: Path, name: str) -> Path | None:
    """``name`` in ``<root>``, ``<root>/val`` or the unpacked devkit's ``data/``, the first found."""
    for folder in (root, root / "val", root / DEVKIT):
        if (folder / name).is_file():
            return folder / name
    return None


def _by_folder(folder: Path, index: dict[str, int] | None) -> tuple[list[Path], list[str]]:
    """Images under ``folder/<wnid>/`` and their wnids; with ``index``, every wnid must be in it."""
    files = list_images(folder)
    wnids = [f.relative_to(folder).parts[0] for f in files]
    for path, wnid in zip(files, wnids):
        if path.parent == folder:
            raise MalformedDatasetError(f"{path} lies directly in {folder}, outside any class folder; expected {LAYOUT}")
        if index is not None and wnid not in index:
            raise MalformedDatasetError(f"{folder / wnid} is not a class of {folder.parent / 'train'}; "
                                        "train and val must have the same wnids")
    return files, wnids


def _classes(root: Path) -> list[str]:
    train = root / "train"
    if not train.is_dir():
        raise missing_dataset(f"{TITLE} train", train, LAYOUT, own_folder_hint(root, ("train", "val")) if root.name in ("train", "val") else None)
    wnids = sorted(e.name for e in os.scandir(train) if e.is_dir())
    if not wnids:
        raise missing_dataset(f"{TITLE} train (no class folder)", train, LAYOUT)
    return wnids


def _names(root: Path, wnids: list[str]) -> list[str]:
    path = root / MAPPING
    if not path.is_file():
        return wnids
    words = {}
    for line in path.read_text().splitlines():
        wnid, _, text = line.strip().partition(" ")
        words[wnid] = text.strip()
    return [words.get(w) or w for w in wnids]


def _solution(path: Path) -> dict[str, str]:
    """Kaggle's ``LOC_val_solution.csv``: image id (file stem) -> wnid of its first box."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or [c.strip() for c in rows[0][:2]] != ["ImageId", "PredictionString"]:
        raise MalformedDatasetError(f"{path} does not start with the header ImageId,PredictionString")
    wnids = {}
    for number, row in enumerate(rows[1:], 2):
        if not row:
            continue
        if len(row) < 2 or not row[1].split():
            raise MalformedDatasetError(f"{path} line {number} has no wnid; expected <ImageId>,<wnid> <x0> <y0> <x1> <y1> ...")
        wnids[row[0].strip()] = row[1].split()[0]
    return wnids


def _devkit_wnids(meta: Path) -> dict[int, str]:
    """``ILSVRC2012_ID -> wnid`` of the 1,000 leaf synsets of the devkit's ``meta.mat``."""
    import scipy.io

    try:
        synsets = scipy.io.loadmat(meta, squeeze_me=True)["synsets"]
        ids, wnids, children = synsets["ILSVRC2012_ID"], synsets["WNID"], synsets["num_children"]
    except (OSError, ValueError, KeyError, TypeError, IndexError) as error:
        raise MalformedDatasetError(f"{meta} is not the devkit's meta.mat (a 'synsets' struct with ILSVRC2012_ID, "
                                    f"WNID, num_children): {type(error).__name__}: {error}") from error
    return {int(i): str(w) for i, w, c in zip(ids, wnids, children) if int(c) == 0}


def _ground_truth(root: Path, path: Path, files: list[Path]) -> list[str]:
    meta = _find(root, META)
    if meta is None:
        raise missing_dataset(
            f"{TITLE} devkit {META} (the class order of {GROUND_TRUTH}, which is not the sorted order of {MAPPING})",
            root / DEVKIT / META, LAYOUT)
    by_id = _devkit_wnids(meta)
    ids = path.read_text().split()
    if len(ids) != len(files):
        raise MalformedDatasetError(f"{path} has {len(ids)} labels for the {len(files)} images of "
                                    f"{root / 'val'}; expected one line per image, in file-name order")
    wnids = []
    for number, text in enumerate(ids, 1):
        if not text.isdigit() or int(text) not in by_id:
            raise MalformedDatasetError(f"{path} line {number}: {text!r} is not a class id of {meta}")
        wnids.append(by_id[int(text)])
    return wnids


def _flat_val(root: Path, files: list[Path]) -> tuple[list[str], Path]:
    """The wnid of each flat val image, and the file that said so."""
    solution = _find(root, SOLUTION)
    if solution is not None:
        table = _solution(solution)
        missing = [f for f in files if f.stem not in table]
        if missing:
            raise MalformedDatasetError(f"{solution} has no row for {missing[0].stem} ({len(missing)} images "
                                        "without one); expected a row per val image")
        return [table[f.stem] for f in files], solution
    truth = _find(root, GROUND_TRUTH)
    if truth is not None:
        return _ground_truth(root, truth, files), truth
    raise missing_dataset(f"{TITLE} val labels", root / "val", LAYOUT)


def read_imagenet(root: Path, split: str, transform) -> LabelledImages:
    """The train or val split of ImageNet-1k at ``root`` (see the module docstring for the layouts)."""
    wnids = _classes(root)
    index = {w: i for i, w in enumerate(wnids)}
    folder = root / split
    if split == "train":
        files, found = _by_folder(folder, index)
    else:
        if not folder.is_dir():
            raise missing_dataset(f"{TITLE} val", folder, LAYOUT)
        if any(e.is_dir() for e in os.scandir(folder)):
            files, found = _by_folder(folder, index)
        else:
            files = list_images(folder)
            found, source = _flat_val(root, files)
            unknown = sorted(set(found) - set(index))
            if unknown:
                raise MalformedDatasetError(f"{source} names {unknown[0]} ({len(unknown)} such wnids), which is not "
                                            f"a class folder of {root / 'train'}; train and val must have the same wnids")
    if not files:
        raise missing_dataset(f"{TITLE} {split} (no image)", folder, LAYOUT)
    return LabelledImages(f"{TITLE} {split}", files, [index[w] for w in found], _names(root, wnids), transform)
