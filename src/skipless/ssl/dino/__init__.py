"""DINO (Caron et al. 2021): head, loss, multi-crop augmentation, collapse rule, schema and the
LightningModule; ``method.METHOD`` hands them to ``make pretrain`` (``skipless.ssl.METHODS``)."""
from .method import METHOD
from .module import DINO

__all__ = ["DINO", "METHOD"]
