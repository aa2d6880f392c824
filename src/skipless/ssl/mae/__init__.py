"""Masked autoencoders (He et al. 2022) with the seed's encoder-to-decoder UNet skips (Zhang et al., seed
002; SPEC 3b), in four files: ``autoencoder.py`` (the view, masking, patches, the loss and
``MaskedAutoencoder``: the paper's mathematics as plain modules), ``decoder.py`` (MAE's decoder and the
skips' wiring), ``module.py`` (the LightningModule, the Figure 2 reconstructions and its ``METHOD`` entry
for ``make pretrain SSL=mae``), ``schema.py`` (its config rules).
"""
from .autoencoder import (EncoderOutput, MAEOutput, MaskedAutoencoder, masked_mse, mean_patch_baseline,
                          normalized_target, patchify, random_masking, reconstruction_target, unpatchify,
                          visible_count)
from .decoder import EncoderSkip, MAEDecoder, check_skip_pairs, mirror_skip_pairs
from .module import reconstruction_panel, reconstruction_rows

__all__ = [
    "MAEDecoder", "masked_mse", "mean_patch_baseline", "reconstruction_target", "random_masking", "visible_count",
    "EncoderOutput", "MAEOutput", "MaskedAutoencoder", "normalized_target", "patchify", "unpatchify",
    "reconstruction_panel", "reconstruction_rows", "EncoderSkip", "check_skip_pairs", "mirror_skip_pairs",
]
