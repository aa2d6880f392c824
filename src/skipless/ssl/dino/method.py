"""DINO (Caron et al. 2021) as a ``skipless.ssl.Method``: the one entry that hands its module, multi-crop
views, rules, collapse monitor and header to ``make pretrain`` (``ssl=dino``, the default)."""
from __future__ import annotations

from collections.abc import Mapping

from omegaconf import DictConfig

from ...summary import number_text
from ...training.trainer import refuse_unsynced_batchnorm
from ..method import Method
from .collapse import DINOCollapse
from .module import DINO
from .multicrop import collate_multicrop, multicrop_from_config
from .schema import RELATIONS, RULES


def header(cfg: Mapping) -> list[str]:
    """``crops 2 x 224 px + 8 x 96 px; head 65536 prototypes, norm_last_layer true; teacher temp 0.04``."""
    d = cfg["dino"]
    temp = f"teacher temp {number_text(d['warmup_teacher_temp'])}"
    if d["warmup_teacher_temp_epochs"]:
        temp += f" -> {number_text(d['teacher_temp'])} over {d['warmup_teacher_temp_epochs']} epochs"
    return [f"crops    2 x {d['global_crop_size']} px + {d['local_crops_number']} x {d['local_crop_size']} px; "
            f"head {d['out_dim']} prototypes, norm_last_layer {number_text(d['norm_last_layer'])}; {temp}"]


def check(cfg: DictConfig) -> None:
    """A BatchNorm head that DDP on the CPU cannot synchronise is refused (``training/trainer.py``)."""
    if cfg.dino.use_bn_in_head:
        refuse_unsynced_batchnorm(cfg, "dino.use_bn_in_head")


METHOD = Method(
    name="dino",
    module=DINO,
    transform=multicrop_from_config,
    collate=collate_multicrop,
    view_size=lambda cfg: int(cfg.dino.global_crop_size),
    rules=RULES,
    relations=RELATIONS,
    header=header,
    callbacks=lambda cfg: [DINOCollapse(cfg.dino.out_dim)],
    check=check,
    exported="teacher",
)
