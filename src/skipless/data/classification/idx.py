"""The IDX file format of MNIST's four distributed files, read and written (both ways here so that the
format is written down once; the writer serves the tests and the stand-in files of ``generator/fake_layouts.py``).

The format, as the MNIST page states it (LeCun, Cortes and Burges, "The MNIST database of handwritten
digits", section "FILE FORMATS FOR THE MNIST DATABASE"):

    magic number   4 bytes: 0x00, 0x00, the data type (0x08 = unsigned byte), the number of dimensions
    dimensions     one big-endian (MSB first) 32-bit integer per dimension
    data           the values, unsigned bytes here, the last dimension changing fastest (C order)

so MNIST's image files start with ``0x00000803`` (unsigned bytes, 3 dimensions: images x rows x columns)
and its label files with ``0x00000801`` (1 dimension: one label per image). Only unsigned-byte files are
read: MNIST has no other. A file whose name ends in ``.gz`` is read (and written) through gzip, the
form in which MNIST is distributed; any other is read as it is (torchvision keeps both after unpacking).

A file that breaks the format (another magic number, fewer bytes than its header or its dimensions
announce, bytes left over, a damaged gzip stream) is one ``MalformedDatasetError`` sentence that names
the file and what was expected.
"""
from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import numpy as np

from ..errors import README, MalformedDatasetError

UBYTE = 0x08          # the data-type byte of unsigned bytes
WHAT = {1: "labels", 3: "images"}  # what MNIST keeps in an IDX file of each number of dimensions


def magic(ndim: int) -> int:
    """The magic number of an unsigned-byte IDX file of ``ndim`` dimensions (3: ``0x00000803``)."""
    return (UBYTE << 8) | ndim


def _expected(ndim: int) -> str:
    return (f"an IDX file of MNIST {WHAT.get(ndim, 'values')} (magic number 0x{magic(ndim):08X}: unsigned bytes, "
            f"{ndim} big-endian dimension{'s' if ndim > 1 else ''}; see {README})")


def _raw_bytes(path: Path) -> bytes:
    """The file's bytes, through gzip when its name ends in ``.gz``."""
    if path.suffix != ".gz":
        return path.read_bytes()
    try:
        return gzip.decompress(path.read_bytes())
    except (OSError, EOFError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
        raise MalformedDatasetError(
            f"{path} is not a readable gzip file ({type(error).__name__}: {error}); "
            "expected MNIST's gzipped IDX file as distributed, or the file unpacked without .gz") from error


def read_idx(path: str | Path, ndim: int) -> np.ndarray:
    """The unsigned-byte array of ``ndim`` dimensions stored in the IDX file ``path`` (plain or ``.gz``).

    Raises:
        MalformedDatasetError: another magic number, a header or data shorter or longer than the
            dimensions say, or a damaged gzip stream; the sentence names the file.
    """
    path = Path(path)
    data = _raw_bytes(path)
    header = 4 + 4 * ndim
    if len(data) < header:
        raise MalformedDatasetError(f"{path} is truncated: {len(data)} bytes, fewer than the {header}-byte header of "
                                    f"{_expected(ndim)}")
    found = int.from_bytes(data[:4], "big")
    if found != magic(ndim):
        raise MalformedDatasetError(f"{path} starts with the magic number 0x{found:08X}, not 0x{magic(ndim):08X}; "
                                    f"expected {_expected(ndim)}")
    shape = tuple(int(d) for d in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    need = int(np.prod(shape, dtype=np.int64))
    if len(data) - header != need:
        state = "is truncated" if len(data) - header < need else "has bytes left over"
        dims = " x ".join(map(str, shape)) + (f" = {need}" if ndim > 1 else "")
        raise MalformedDatasetError(f"{path} {state}: its header announces {dims} values but {len(data) - header} "
                                    f"bytes follow it; expected {_expected(ndim)}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


def write_idx(path: str | Path, array: np.ndarray) -> Path:
    """Write ``array`` (unsigned bytes, any number of dimensions) as an IDX file at ``path``, gzipped when
    the name ends in ``.gz`` (with a fixed time stamp, so that the same array gives the same bytes)."""
    path = Path(path)
    array = np.ascontiguousarray(array)
    if array.dtype != np.uint8:
        raise ValueError(f"write_idx writes unsigned bytes; got {array.dtype}")
    content = (magic(array.ndim).to_bytes(4, "big") + np.asarray(array.shape, dtype=">u4").tobytes()
               + array.tobytes())
    if path.suffix == ".gz":
        content = gzip.compress(content, mtime=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path
