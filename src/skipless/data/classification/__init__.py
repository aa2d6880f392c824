"""Labelled images for supervised training and the k-NN / linear evaluators: ``imagenet.py``, ``cifar.py``,
``tiny_imagenet.py`` and ``digits.py`` read a ``LabelledImages`` (``labelled.py``), listed by name in
``registry.py``."""
