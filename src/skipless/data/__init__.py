"""Datasets: readers of the real layouts users already have, and the embedded default.

``voc.py`` reads the PASCAL VOC layout, which the generated default (``synthetic.py``) also uses,
so the default and real VOC share one code path; ``image_folder.py`` reads ImageNet-style folders
for pretraining; ``segmentation.py``, ``ade20k.py``, ``cocostuff.py`` and ``seg_views.py`` read
the dense probe's datasets, listed by name in ``segmentation_datasets.py``; ``voc.py`` and
``coco.py`` read the object-discovery datasets, listed in ``discovery_datasets.py``; ``imagenet.py``,
``cifar.py`` and ``tiny_imagenet.py`` read labelled images for supervised training and the k-NN /
linear evaluators as a ``LabelledImages`` (``labelled.py``), listed by name in ``classification.py``; ``errors.py`` gives one clear error, pointing at data/README.md, when a dataset is
missing. Nothing here imports torch: the readers are plain map-style datasets.

``synthetic`` is imported on first use only, so that ``python -m skipless.data.synthetic`` does not
find itself already imported by this package.
"""
from typing import Any

from .discovery_datasets import DISCOVERY_DATASETS, build_discovery
from .errors import CorruptImageWarning, DatasetNotFoundError, MalformedDatasetError, UnknownDatasetError
from .image_folder import ImageFolderDataset
from .segmentation_datasets import SEGMENTATION_DATASETS, build_split
from .voc import VOCClassification, VOCDetection, VOCImages, VOCSegmentation

__all__ = [
    "CLASSES", "DISCOVERY_DATASETS", "SEGMENTATION_DATASETS", "CorruptImageWarning", "DatasetNotFoundError",
    "ImageFolderDataset", "MalformedDatasetError", "UnknownDatasetError", "VOCClassification", "VOCDetection",
    "VOCImages", "VOCSegmentation", "build_discovery", "build_split", "ensure_default", "generate",
]


def __getattr__(name: str) -> Any:
    if name in ("CLASSES", "ensure_default", "generate"):
        from . import synthetic
        return getattr(synthetic, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
