"""Masked autoencoders (He et al. 2022) with the seed's encoder-to-decoder UNet skips (Zhang et al.,
seed 002; SPEC 3b): plain modules and functions, no training loop and no config reading.

- ``masking``: per-sample random masking of patch tokens.
- ``patches``: patchify / unpatchify, the per-patch normalised pixel target.
- ``loss``: the masked MSE and the mean-patch baseline a trained MAE must beat.
- ``skips``: which encoder block feeds which decoder block, and one skip's layers.
- ``decoder``: MAE's decoder.
- ``model``: ``MaskedAutoencoder`` around a suite ViT.
- ``reconstruction``: the Figure 2 panel.
"""
from .decoder import MAEDecoder
from .loss import masked_mse, mean_patch_baseline, reconstruction_target
from .masking import random_masking, visible_count
from .model import EncoderOutput, MAEOutput, MaskedAutoencoder
from .patches import normalized_target, patchify, unpatchify
from .reconstruction import reconstruction_panel, reconstruction_rows
from .skips import EncoderSkip, check_skip_pairs, mirror_skip_pairs

__all__ = [
    "MAEDecoder", "masked_mse", "mean_patch_baseline", "reconstruction_target", "random_masking", "visible_count",
    "EncoderOutput", "MAEOutput", "MaskedAutoencoder", "normalized_target", "patchify", "unpatchify",
    "reconstruction_panel", "reconstruction_rows", "EncoderSkip", "check_skip_pairs", "mirror_skip_pairs",
]
