"""The ViT family of skipless: residual modes, initialisations, the feature API, backbone files."""
from .attention import SoftmaxAttention, flash_attn_available, use_explicit_attention
from .block import RESIDUAL_MODES, ResidualBlock
from .decay import DECAY_BRANCHES, DECAY_INDEXINGS, DEFAULT_ALPHA_MIN, decayed_gains
from .checkpoint import BackboneLoadError, load_backbone, save_backbone
from .features import KINDS, FeatureRequestError, extract_features, patch_features, patch_grid, resolve_layers
from .init import CUTSKIP_DEFAULTS, INITS, cutskip_init_, head_matrices, osa_init_, paper_matrices, stiefel, suo_
from .osa import OrthogonalAttention
from .pos_embed import POS_EMBED_INTERPS
from .timm_weights import load_timm_backbone
from .vit import (ARCHS, ATTENTIONS, POS_EMBEDS, SkiplessViT, applicable_args, backbone_args, create_vit, drop_path_rates,
                  freeze_for_eval)

__all__ = [
    "ARCHS", "ATTENTIONS", "CUTSKIP_DEFAULTS", "DECAY_BRANCHES", "DECAY_INDEXINGS", "DEFAULT_ALPHA_MIN", "INITS",
    "KINDS", "POS_EMBED_INTERPS", "POS_EMBEDS", "RESIDUAL_MODES",
    "BackboneLoadError", "FeatureRequestError", "OrthogonalAttention", "ResidualBlock", "SkiplessViT",
    "SoftmaxAttention",
    "applicable_args", "backbone_args", "create_vit", "cutskip_init_", "decayed_gains", "drop_path_rates",
    "extract_features", "flash_attn_available", "freeze_for_eval", "head_matrices", "load_backbone",
    "load_timm_backbone", "osa_init_", "paper_matrices", "patch_features", "patch_grid", "resolve_layers",
    "save_backbone", "stiefel", "suo_", "use_explicit_attention",
]
