"""Datasets: readers of the real layouts users already have, and the embedded default.

``voc.py`` reads the PASCAL VOC layout, which the generated default (``synthetic.py``) also uses,
so the default and real VOC share one code path; ``image_folder.py`` reads ImageNet-style folders
for pretraining; ``errors.py`` gives one clear error, pointing at data/README.md, when a dataset is
missing. Nothing here imports torch: the readers are plain map-style datasets.

``synthetic`` is imported on first use only, so that ``python -m skipless.data.synthetic`` does not
find itself already imported by this package.
"""
from typing import Any

from .errors import CorruptImageWarning, DatasetNotFoundError, MalformedDatasetError
from .image_folder import ImageFolderDataset
from .voc import VOCClassification, VOCDetection, VOCImages, VOCSegmentation

__all__ = [
    "CLASSES", "CorruptImageWarning", "DatasetNotFoundError", "ImageFolderDataset",
    "MalformedDatasetError", "VOCClassification", "VOCDetection", "VOCImages", "VOCSegmentation",
    "ensure_default", "generate",
]


def __getattr__(name: str) -> Any:
    if name in ("CLASSES", "ensure_default", "generate"):
        from . import synthetic
        return getattr(synthetic, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
