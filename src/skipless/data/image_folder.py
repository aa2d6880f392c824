"""Images of a folder tree for pretraining (ImageNet-style ``train/<class>/<image>`` or flat).

Labels are unused (DINO is self-supervised), so any folder of images works. The file list is
sorted, hence the same on every rank and every run. One unreadable image in a million must not
stop a week of training: it is skipped (the next index is served instead), counted and reported
once, never fatal. Reported by a ``CorruptImageWarning`` in the process that met it, or, when
``on_unreadable`` is set (a training loader's ``SkipTally``), by that hook, which says it once over
every worker and rank. What counts as unreadable, the pixel limit and the small-image hook: ``reads.py``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from PIL import Image

from .errors import MalformedDatasetError, missing_dataset
from .reads import READ_ERRORS, UnreadableSkips, decode_rgb
from .voc import VOCImages

__all__ = ["EXTENSIONS", "ImageFolderDataset", "VOCImages", "READ_ERRORS", "decode_rgb"]

EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
LAYOUT = "an image folder, <root>/<class>/<image>.jpg (ImageNet train/) or flat <root>/<image>.jpg"


def list_images(root: Path) -> list[Path]:
    """All image files under ``root``, recursively, by extension (any case), sorted."""
    found = []
    for folder, _dirs, files in os.walk(root, followlinks=True):
        found.extend(Path(folder) / f for f in files if f.lower().endswith(EXTENSIONS))
    return sorted(found)


class ImageFolderDataset(UnreadableSkips):
    """Every image under ``root``, as a PIL RGB image or ``transform(image)``.

    Attributes:
        files: the sorted image paths.
        skipped, on_unreadable, on_small, max_pixels, min_side: see ``UnreadableSkips`` (``limit_reads``).
    """

    def __init__(self, root: str | os.PathLike, transform: Callable[[Image.Image], Any] | None = None) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise missing_dataset("image folder", self.root, LAYOUT)
        self.files = list_images(self.root)
        if not self.files:
            raise missing_dataset(f"image folder (no {'/'.join(e[1:] for e in EXTENSIONS)} files)",
                                  self.root, LAYOUT)
        self.transform = transform
        self._start_skips()

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> Any:
        image = self._first_readable(index, lambda i: self._decode(i, self.files[i]), self.files.__getitem__,
                                     lambda: RuntimeError(f"no image under {self.root} could be read "
                                                          f"({self.skipped} failures)"))
        return self.transform(image) if self.transform is not None else image

    def check_readable(self) -> None:
        """Refuse a folder in which no image decodes (``MalformedDatasetError``), before training.

        Files are tried in order until one decodes: a single read on a healthy folder. These trial
        reads are not counted in ``skipped``."""
        first = ""
        for path in self.files:
            try:
                decode_rgb(path, self.max_pixels)
                return
            except READ_ERRORS as error:
                first = first or f"{path.name}: {type(error).__name__}: {error}"
        raise MalformedDatasetError(
            f"none of the {len(self.files)} images under data.root={self.root} can be read (first: {first}); "
            "expected readable jpg/png/bmp/webp files; check the copy or point data.root= at another folder")
