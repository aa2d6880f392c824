"""CIFAR-10 and CIFAR-100 in their official "python version" layout (cs.toronto.edu/~kriz/cifar.html).

The archives ``cifar-10-python.tar.gz`` and ``cifar-100-python.tar.gz`` unpack into
``cifar-10-batches-py/`` (``data_batch_1`` ... ``data_batch_5``, ``test_batch``, ``batches.meta``)
and ``cifar-100-python/`` (``train``, ``test``, ``meta``). Each batch is a Python 2 pickle of a dict
with bytes keys: ``b"data"``, an ``(N, 3072)`` uint8 array whose rows hold the red, then the green,
then the blue 32x32 plane, each row-major, and the labels (``b"labels"`` for CIFAR-10,
``b"fine_labels"`` for CIFAR-100, whose ``b"coarse_labels"`` are not used here). The meta file names
the classes (``b"label_names"`` / ``b"fine_label_names"``).

The whole split is small (50,000 images are 150 MB), so it is decoded once into an ``(N, 32, 32, 3)``
uint8 array and served from memory: no per-image file to open, and forked DataLoader workers share it.
The files are pickles, which can run code when loaded: read only copies you trust (the official ones).
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MalformedDatasetError, missing_dataset
from .labelled import LabelledImages


@dataclass(frozen=True)
class CifarLayout:
    """Where one of the two CIFARs keeps its batches and which pickle keys hold labels and names."""

    title: str
    folder: str
    train: tuple[str, ...]
    val: tuple[str, ...]
    meta: str
    labels: bytes
    names: bytes
    archive: str
    files: str

    @property
    def layout(self) -> str:
        return (f"<root>/{self.folder}/{{{self.files}}} ({self.archive} unpacked, the python version; "
                f"<root> may also be {self.folder}/ itself)")


CIFAR10 = CifarLayout("CIFAR-10", "cifar-10-batches-py", tuple(f"data_batch_{i}" for i in range(1, 6)),
                      ("test_batch",), "batches.meta", b"labels", b"label_names", "cifar-10-python.tar.gz",
                      "data_batch_1..5, test_batch, batches.meta")
CIFAR100 = CifarLayout("CIFAR-100", "cifar-100-python", ("train",), ("test",), "meta",
                       b"fine_labels", b"fine_label_names", "cifar-100-python.tar.gz", "train, test, meta")


def _folder(root: Path, spec: CifarLayout) -> Path:
    """``root/<folder>``, or ``root`` itself when it is that folder (its meta file is there)."""
    if (root / spec.folder).is_dir():
        return root / spec.folder
    if (root / spec.meta).is_file():
        return root
    raise missing_dataset(spec.title, root / spec.folder, spec.layout)


def _load(path: Path, spec: CifarLayout) -> dict:
    """One pickle of the layout, as a dict. ``encoding="bytes"`` is how the Python 2 pickles load
    (keys stay bytes, arrays keep their buffers); a copy re-pickled with str keys is accepted too."""
    if not path.is_file():
        raise missing_dataset(f"{spec.title} file {path.name}", path, spec.layout)
    try:
        with open(path, "rb") as f:
            content = pickle.load(f, encoding="bytes")
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, IndexError, ValueError,
            TypeError) as error:
        raise MalformedDatasetError(
            f"{path} is not a readable {spec.title} pickle ({type(error).__name__}: {error}); "
            f"expected {spec.layout}") from error
    if not isinstance(content, dict):
        raise MalformedDatasetError(f"{path} holds a {type(content).__name__}, not the dict of {spec.layout}")
    return content


def _get(content: dict, key: bytes, path: Path, spec: CifarLayout) -> Any:
    for k in (key, key.decode()):
        if k in content:
            return content[k]
    raise MalformedDatasetError(
        f"{path} has no {key!r} entry (it has {sorted(map(str, content))}); expected {spec.layout}")


def _batch(path: Path, spec: CifarLayout) -> tuple[np.ndarray, np.ndarray]:
    """Images ``(N, 32, 32, 3)`` uint8 and labels ``(N,)`` of one batch file."""
    content = _load(path, spec)
    data = np.asarray(_get(content, b"data", path, spec))
    labels = np.asarray(_get(content, spec.labels, path, spec))
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise MalformedDatasetError(
            f"{path}: data is {data.dtype} {data.shape}, expected uint8 (N, 3072) (three 32x32 planes per row)")
    if labels.shape != (len(data),) or not np.issubdtype(labels.dtype, np.integer):
        raise MalformedDatasetError(
            f"{path}: {len(data)} images but labels of shape {labels.shape} ({labels.dtype}); "
            f"expected one integer {spec.labels!r} per image")
    # a row is R plane | G plane | B plane, each row-major 32x32: (N, 3, 32, 32) -> (N, 32, 32, 3)
    images = np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    return images, labels.astype(np.int64)


def _names(path: Path, spec: CifarLayout) -> list[str]:
    names = _get(_load(path, spec), spec.names, path, spec)
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def read_cifar(spec: CifarLayout, root: Path, split: str, transform) -> LabelledImages:
    """The train (the data batches) or val (the test batch) split of ``spec`` at ``root``."""
    folder = _folder(root, spec)
    names = _names(folder / spec.meta, spec)
    batches = [_batch(folder / name, spec) for name in (spec.train if split == "train" else spec.val)]
    images = np.concatenate([b[0] for b in batches])
    labels = np.concatenate([b[1] for b in batches])
    return LabelledImages(f"{spec.title} {split}", images, labels, names, transform)
