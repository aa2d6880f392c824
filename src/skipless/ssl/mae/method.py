"""MAE with decayed shortcuts (Zhang et al., seeds/002, on He et al. 2022) as a ``skipless.ssl.Method``:
the one entry that hands its module, view, rules, monitors and header to ``make pretrain SSL=mae``."""
from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import lightning.pytorch as pl
from omegaconf import DictConfig
from torch.utils.data import default_collate

from ...models.decay import DEFAULT_ALPHA_MIN
from ...models.vit import ARCHS
from ...summary import number_text
from ...training.data import diagnostic_images
from ..method import Method
from .callbacks import Reconstructions
from .module import MAE
from .schema import RELATIONS, RULES
from .skips import mirror_skip_pairs
from .transform import view_from_config


# Zhang et al. Sec 4.3: alpha_min <= 0.4 trained unstably with ViT-B; the header says so before such a run.
UNSTABLE_ALPHA_MIN = 0.4


def header(cfg: Mapping) -> list[str]:
    """``mae      224 px, mask 0.75, norm-pix target; decoder 8 x 512 (16 heads), U-Net skips 1->7, 3->6 ...``."""
    m = cfg["mae"]
    d = m["decoder"]
    skips = "no encoder-decoder skips"
    if m["unet_skips"]:
        depth = cfg["model"]["depth"] or ARCHS[cfg["model"]["arch"]]["depth"]
        pairs = m["skip_pairs"] if m["skip_pairs"] is not None else mirror_skip_pairs(int(depth), int(d["depth"]))
        skips = "U-Net skips (encoder->decoder block) " + ", ".join(f"{e}->{k}" for e, k in pairs)
    target = "norm-pix target" if m["norm_pix_loss"] else "pixel target"
    model = cfg["model"]
    alpha_min = DEFAULT_ALPHA_MIN if model.get("alpha_min") is None else float(model["alpha_min"])
    unstable = ([f"note     alpha_min {number_text(alpha_min)} <= {number_text(UNSTABLE_ALPHA_MIN)}: the seed found these "
                 "unstable for ViT-B (Sec 4.3); a run that diverges stops with its last good checkpoint"]
                if model["residual"] == "decayed" and alpha_min <= UNSTABLE_ALPHA_MIN else [])
    return [f"mae      {m['input_size']} px, crop scale {list(m['crop_scale'])}, mask {number_text(m['mask_ratio'])}, "
            f"{target}; decoder {d['depth']} x {d['dim']} ({d['heads']} heads), {skips}", *unstable]


def callbacks(cfg: DictConfig) -> list[pl.Callback]:
    every = int(cfg.mae.reconstructions_every_n_epochs)
    if not every:
        return []
    images = partial(diagnostic_images, cfg, int(cfg.mae.input_size), int(cfg.mae.reconstruction_images), "val")
    return [Reconstructions(images, every, int(cfg.run.seed))]


METHOD = Method(
    name="mae",
    module=MAE,
    transform=view_from_config,
    collate=default_collate,
    view_size=lambda cfg: int(cfg.mae.input_size),
    rules=RULES,
    relations=RELATIONS,
    header=header,
    callbacks=callbacks,
    run_prefix="mae-",
    exported="encoder",
)
