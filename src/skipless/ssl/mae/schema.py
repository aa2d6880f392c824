"""What each key of MAE's ``mae:`` section may hold, and how it meets the shared keys.

The shared keys are ``training/schema.py``'s; these rules join them when ``ssl=mae``
(``skipless.ssl.Method.rules``), so a bad value is refused in one sentence before anything is written
(``mae.mask_ratio must be a number in (0, 1), got 1.0``). A skip to a block the encoder or decoder does
not have is refused by ``skips_exist`` in the same way.
"""
from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from ...config import CONFIG_DIR
from ...config.rules import Rule, is_int, number, optional
from ...models.vit import ARCHS
from ...training.schema import BOOL, COUNT, CROP_SCALE, POSITIVE_INT, tiles_patches
from .decoder import check_skip_pairs

PAIRS = Rule(lambda v: isinstance(v, (list, tuple)) and all(
    isinstance(p, (list, tuple)) and len(p) == 2 and all(is_int(i) for i in p) for p in v),
    "a list of [encoder block, decoder block] pairs, e.g. [[1, 7], [3, 6]], or null for the U-Net mirror")

RULES: dict[str, Rule] = {
    "mae.mask_ratio": number(0, 1, low_open=True),  # (0, 1): some patches masked, some seen
    "mae.norm_pix_loss": BOOL,
    "mae.input_size": POSITIVE_INT,
    "mae.crop_scale": CROP_SCALE,
    "mae.decoder.dim": POSITIVE_INT,
    "mae.decoder.depth": POSITIVE_INT,
    "mae.decoder.heads": POSITIVE_INT,
    "mae.unet_skips": BOOL,
    "mae.skip_pairs": optional(PAIRS),
    "mae.reconstructions_every_n_epochs": COUNT,
    "mae.reconstruction_images": POSITIVE_INT,
}


def skips_exist(v: dict[str, Any]) -> str | None:
    """Each explicit skip names an encoder block and a decoder block that exist, one skip per decoder block."""
    if not v["mae.unet_skips"] or v["mae.skip_pairs"] is None:
        return None
    depth = v["model.depth"] or ARCHS.get(v["model.arch"], {}).get("depth")
    if depth is None:
        return None
    try:
        check_skip_pairs([tuple(p) for p in v["mae.skip_pairs"]], int(depth), int(v["mae.decoder.depth"]))
    except ValueError as err:
        return f"mae.skip_pairs: {err}; expected pairs [encoder block, decoder block] of existing blocks"
    return None


def heads_divide(v: dict[str, Any]) -> str | None:
    dim, heads = v["mae.decoder.dim"], v["mae.decoder.heads"]
    if dim % heads:
        return (f"mae.decoder.dim={dim} is not divisible by mae.decoder.heads={heads}; expected a width that "
                f"splits into the heads, e.g. mae.decoder.dim={dim // heads * heads or heads}")
    return None


def preset_init_kept(v: dict[str, Any]) -> str | None:
    """The MAE recipes set ``model.init=mae`` (He et al.'s init) and merge after the model preset, so a preset
    that names its own init (``model=skipless``: the paper's cutskip; ``model=osa``) would silently lose it:
    refused, with the two ways to say which is meant."""
    preset = CONFIG_DIR / "model" / f"{v['model.name']}.yaml"
    own = OmegaConf.select(OmegaConf.load(preset), "model.init") if preset.is_file() else None
    if own is None or own == v["model.init"] or v["model.init"] != "mae":
        return None
    return (f"model={v['model.name']} names its own init {own}, which the MAE recipe's model.init=mae would replace; "
            f"expected ARGS=\"model.init={own}\" to keep the preset's, or a preset without an init of its own "
            f"(skip, decayed, skipless-plain) for MAE's")


RELATIONS = (tiles_patches("mae.input_size"), skips_exist, heads_divide, preset_init_kept)
