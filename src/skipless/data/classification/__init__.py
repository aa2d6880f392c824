"""Labelled images for supervised training and the k-NN / linear evaluators: ``imagenet.py``, ``cifar.py``,
``tiny_imagenet.py``, ``mnist.py`` (MNIST's IDX files, the format in ``idx.py``) and ``digits.py`` read a
``LabelledImages`` (``labelled.py``), listed by name in ``registry.py``. ``imagenet_subset.py`` builds CMC's
ImageNet-100 and Imagenette's 10 classes from ImageNet as links (``make data DATA=imagenet100`` or
``DATA=imagenet10``); ``generator/fake_layouts.py`` writes tiny stand-ins in the real layouts, for tests and
the pre-flight."""
