"""Every label map of a split checked for its mode before any feature is extracted, from its PNG header.

A label map must hold class indices: a palette (P) or 8-bit grey (L) PNG. An RGB one (a coloured
visualisation saved in place of the labels) is refused by ``voc.load_mask``, but only when it is
read, which for the probe is after the whole training split has gone through the backbone, and in
a loader worker. Here each file's mode comes from the first 26 bytes of the file: the PNG signature
and the IHDR chunk's bit depth and colour type, no decoding; a few thousand files take well under a
second. The first offending file is named in one sentence, with how many others are alike.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..voc import MASK_MODES, mask_mode_error

SIGNATURE = b"\x89PNG\r\n\x1a\n"
COLOUR_TYPES = {2: "RGB", 3: "P", 4: "LA", 6: "RGBA"}  # 0 (grey) depends on the bit depth: png_mode


def png_mode(path: Path) -> str | None:
    """The mode PIL gives the PNG at ``path``, read from its header; None when it is no PNG."""
    with open(path, "rb") as f:
        head = f.read(26)
    if len(head) < 26 or head[:8] != SIGNATURE or head[12:16] != b"IHDR":
        return None
    depth, colour = head[24], head[25]
    if colour == 0:
        return {1: "1", 16: "I;16"}.get(depth, "L")
    return COLOUR_TYPES.get(colour, f"colour type {colour}")


def check_label_modes(dataset: Any) -> None:
    """Raise ``MalformedDatasetError`` naming the first label file of ``dataset`` (a reader with
    ``label_file(i)``) that is not a class-index PNG; readers without label files pass."""
    label_file = getattr(dataset, "label_file", None)
    if label_file is None:
        return
    bad = []
    for i in range(len(dataset)):
        path = label_file(i)
        mode = png_mode(path)
        if mode not in MASK_MODES:
            bad.append((path, mode))
    if bad:
        path, mode = bad[0]
        more = f" (as have {len(bad) - 1} more of the {len(dataset)} label files)" if len(bad) > 1 else ""
        raise mask_mode_error(path, mode, more)
