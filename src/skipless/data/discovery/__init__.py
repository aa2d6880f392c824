"""The object-discovery datasets: ``coco.py`` (COCO20k) beside VOC's detection reader (``data/voc.py``),
listed by name in ``discovery_datasets.py``."""
