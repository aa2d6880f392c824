"""The dense probe's datasets: ``interface.py`` (VOC's split and the paired image/mask folders),
``ade20k.py``, ``cocostuff.py``, the views ``seg_views.py`` and the mask-mode check ``label_modes.py``,
listed by name in ``segmentation_datasets.py``."""
