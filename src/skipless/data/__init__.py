"""Datasets: readers of the real layouts users already have, and the embedded default, in groups.

At this level, what every group shares: ``voc.py`` reads the PASCAL VOC layout, which the generated
default (``generator/synthetic.py``, drawn by ``generator/scene_render.py``) also uses, so the default
and real VOC share one code path; ``image_folder.py`` reads ImageNet-style folders for pretraining;
``errors.py`` gives one clear error, pointing at data/README.md, when a dataset is missing;
``conventions.py`` the values every reader, transform and metric shares. The groups:

- ``segmentation/``: the dense probe's datasets (``interface.py``, ``ade20k.py``, ``cocostuff.py``,
  ``seg_views.py``, ``label_modes.py``), listed by name in ``segmentation_datasets.py``;
- ``discovery/``: the object-discovery datasets (VOC's detection reader and ``coco.py``), listed in
  ``discovery_datasets.py``;
- ``classification/``: labelled images for supervised training and the k-NN / linear evaluators
  (``imagenet.py``, ``cifar.py``, ``tiny_imagenet.py``, ``mnist.py`` with the IDX format in ``idx.py``,
  ``digits.py``) as a ``LabelledImages`` (``labelled.py``), listed by name in ``registry.py``; the
  builder of ImageNet subsets (``imagenet_subset.py``, ``make data DATA=imagenet100`` or ``DATA=imagenet10``);
- ``generator/``: the embedded default (``synthetic.py``, ``scene_render.py``); fake datasets in the real
  layouts, for the pre-flight and the readers' tests (``fake_layouts.py``).

The readers import no torch: they are plain map-style datasets. ``batched_augment.py`` is the one module
here that does (and the package does not import it): DINO's colour augmentation of a whole batch of images on
their device (``data.augment_on=device``).

``synthetic`` is imported on first use only, so that ``python -m skipless.data.generator.synthetic``
does not find itself already imported by this package.
"""
from typing import Any

from .discovery.discovery_datasets import DISCOVERY_DATASETS, build_discovery
from .errors import CorruptImageWarning, DatasetNotFoundError, MalformedDatasetError, UnknownDatasetError
from .image_folder import ImageFolderDataset
from .segmentation.segmentation_datasets import SEGMENTATION_DATASETS, build_split
from .voc import VOCClassification, VOCDetection, VOCImages, VOCSegmentation

__all__ = [
    "CLASSES", "DISCOVERY_DATASETS", "SEGMENTATION_DATASETS", "CorruptImageWarning", "DatasetNotFoundError",
    "ImageFolderDataset", "MalformedDatasetError", "UnknownDatasetError", "VOCClassification", "VOCDetection",
    "VOCImages", "VOCSegmentation", "build_discovery", "build_split", "ensure_default", "generate",
]


def __getattr__(name: str) -> Any:
    if name in ("CLASSES", "ensure_default", "generate"):
        from .generator import synthetic
        return getattr(synthetic, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
