"""DINO (Caron et al. 2021) in three files: ``self_distillation.py`` (multi-crop, head, loss: the paper's
mathematics as plain modules), ``module.py`` (the LightningModule, its collapse rule and its ``METHOD``
entry for ``make pretrain``), ``schema.py`` (its config rules)."""
from .module import DINO, METHOD

__all__ = ["DINO", "METHOD"]
