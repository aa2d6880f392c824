"""How the training readers decode an image file, and what they do with one that cannot be used.

One bad file in a million must not end a week of training, whatever is wrong with it: empty, truncated,
a text file named ``.jpg``, or a header that claims a size no machine should decode (a 20000 x 20000
JPEG is 1.2 GB of RGB: a "decompression bomb", which PIL refuses with ``DecompressionBombError``, an
``Exception`` outside the ``OSError`` family that was not caught before and killed the DataLoader
worker). ``READ_ERRORS`` is every exception PIL raised for such files (tests/test_bad_images.py writes
each kind, and a fuzz of truncated and byte-flipped JPEG, PNG, BMP and WebP files raised nothing else),
plus this module's ``OversizedImageError``.

The pixel limit (``data.max_image_pixels``) is checked by the reader itself on the header, after PIL's
lazy ``Image.open`` and before any pixel is decoded, in whichever process decodes (each DataLoader
worker too: the reader carries the value). PIL's own ``Image.MAX_IMAGE_PIXELS`` is set to the same
value in that process, so PIL's other checks (GIF frames, crops) use the same scale, and PIL's
warning for images between 1 and 2 times its limit is silenced there: every such image is refused
and named by the reader, so the warning would only say it a second time, from every worker.

Images smaller than ``data.min_image_side`` on a side are read and trained on, but the reader tells its
``on_small`` hook (a training loader's ``SkipTally`` names each once, as it names unreadable ones).
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Callable

from PIL import Image, UnidentifiedImageError

from .errors import warn_unreadable


class OversizedImageError(ValueError):
    """An image whose header claims more pixels than the reader's limit; nothing of it was decoded."""


# What PIL raises on a bad file (measured, module docstring), and the reader's own refusal of a large one.
READ_ERRORS = (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError,
               OversizedImageError)

# The kinds an unreadable file is named with (``unreadable_kind``), in the order of their flag codes.
UNREADABLE_KINDS = ("truncated or corrupt", "empty file", "not an image PIL can identify", "cannot be opened",
                    "over the pixel limit")
_QUIET_BOMBS = ("ignore", None, Image.DecompressionBombWarning, None, 0)  # a warnings.filters entry


def limit_pixels(max_pixels: int) -> None:
    """Make ``max_pixels`` PIL's limit in this process, its warning quiet (module docstring). Called before
    every decode: a DataLoader worker (forked or spawned) gets it from the reader it was handed."""
    if Image.MAX_IMAGE_PIXELS != max_pixels:
        Image.MAX_IMAGE_PIXELS = max_pixels
    if _QUIET_BOMBS not in warnings.filters:  # looked up, not added each time: adding resets every
        warnings.filterwarnings("ignore", category=Image.DecompressionBombWarning)  # warning's "once" memory


def decode_rgb(path: str | os.PathLike, max_pixels: int | None = None) -> Image.Image:
    """The image at ``path`` as RGB, decoded fully (a truncated file fails here, not in a worker later).

    With ``max_pixels``, an image whose header claims more pixels raises ``OversizedImageError`` before
    any of it is decoded; None leaves PIL's limits as they are (the evaluators' reads)."""
    if max_pixels is not None:
        limit_pixels(max_pixels)
    with Image.open(path) as image:  # reads the header only
        width, height = image.size
        if max_pixels is not None and width * height > max_pixels:
            raise OversizedImageError(f"{width} x {height} = {width * height:,} pixels, more than the limit of "
                                      f"{max_pixels:,}")
        return image.convert("RGB")


def unreadable_kind(path: object, error: BaseException) -> str:
    """Which of ``UNREADABLE_KINDS`` the failed read of ``path`` was: said beside the file's name."""
    if isinstance(error, (OversizedImageError, Image.DecompressionBombError)):
        return "over the pixel limit"
    try:
        if os.path.getsize(path) == 0:  # type: ignore[arg-type]
            return "empty file"
    except (OSError, TypeError):
        pass
    if isinstance(error, UnidentifiedImageError):
        return "not an image PIL can identify"
    if isinstance(error, OSError) and error.errno is not None:  # missing, no permission: the file system said so
        return "cannot be opened"
    return "truncated or corrupt"


class UnreadableSkips:
    """What a reader that skips unreadable images keeps, and how it says so.

    Attributes:
        skipped: how many reads failed in this process (each worker process counts its own).
        on_unreadable: None, or ``f(index, path, error)``, called instead of the warning the first time
            this process meets an unreadable file (a training loader's ``SkipTally`` sets it, to say
            each file once over every worker and rank).
        on_small: None, or ``f(index, path, (width, height))``, called when a file read is smaller than
            ``min_side`` on a side (a ``SkipTally`` sets it; without one such images pass quietly).
        max_pixels, min_side: the limits of ``limit_reads``; None and 0 (PIL's limits, no size check) until set.
    """

    def _start_skips(self) -> None:
        self.skipped = 0
        self.on_unreadable: Callable[[int, object, Exception], None] | None = None
        self.on_small: Callable[[int, object, tuple[int, int]], None] | None = None
        self.max_pixels: int | None = None
        self.min_side = 0
        self._reported: set[int] = set()

    def limit_reads(self, max_pixels: int | None, min_side: int | None) -> "UnreadableSkips":
        """Refuse images of more than ``max_pixels`` pixels (``data.max_image_pixels``) and tell ``on_small``
        of those under ``min_side`` px on a side (``data.min_image_side``; 0 or None: no check); returns self."""
        self.max_pixels, self.min_side = max_pixels, int(min_side or 0)
        return self

    def _decode(self, index: int, path: object) -> Image.Image:
        """The RGB image of file ``path`` (sample ``index``) under this reader's limits; raises one of
        ``READ_ERRORS``."""
        image = decode_rgb(path, self.max_pixels)  # type: ignore[arg-type]
        if self.min_side and min(image.size) < self.min_side and self.on_small is not None:
            self.on_small(index, path, image.size)
        return image

    def _first_readable(self, index: int, read: Callable[[int], Any], path_of: Callable[[int], object],
                        none: Callable[[], Exception]) -> Any:
        """``read(i)`` of the first readable sample from ``index`` on, wrapping around (each failure skipped,
        counted and said once); raises ``none()`` when no sample of the reader can be read."""
        n = len(self)  # type: ignore[arg-type]
        for step in range(n):
            i = (index + step) % n
            try:
                return read(i)
            except READ_ERRORS as error:
                self._skip(i, path_of(i), error)
        raise none()

    def _skip(self, index: int, path: object, error: Exception) -> None:
        """Count a failed read of the file ``path`` (sample ``index``) and say it, once per process."""
        self.skipped += 1
        if index in self._reported:
            return
        self._reported.add(index)
        if self.on_unreadable is not None:
            self.on_unreadable(index, path, error)
        else:
            warn_unreadable(path, error)
