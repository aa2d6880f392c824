"""The ViT family of skipless: residual modes, initialisations, the feature API, backbone files; and the causal
language model built from the same residual block (seeds/000 App. A.8)."""
from .attention import SoftmaxAttention, flash_attn_available, use_explicit_attention
from .block import RESIDUAL_MODES, ResidualBlock
from .causal_lm import (LM_ARCHS, LM_FAMILY, CausalLM, causal_lm_from_args, create_causal_lm, lm_parameter_count,
                        next_token_log_probs, next_token_loss)
from .decay import DECAY_BRANCHES, DECAY_INDEXINGS, DEFAULT_ALPHA_MIN, decayed_gains
from .checkpoint import BackboneLoadError, load_backbone, save_backbone
from .features import KINDS, FeatureRequestError, extract_features, patch_features, patch_grid, resolve_layers
from .lm_init import LM_CUTSKIP_DEFAULTS, LM_INITS, lm_cutskip_init_
from .init import CUTSKIP_DEFAULTS, INITS, cutskip_init_, head_matrices, osa_init_, paper_matrices, stiefel, suo_
from .osa import OrthogonalAttention
from .pos_embed import POS_EMBED_INTERPS
from .timm_weights import load_timm_backbone
from .vit import (ARCHS, ATTENTIONS, POS_EMBEDS, SkiplessViT, applicable_args, backbone_args, create_vit, drop_path_rates,
                  freeze_for_eval)

__all__ = [
    "ARCHS", "ATTENTIONS", "CUTSKIP_DEFAULTS", "DECAY_BRANCHES", "DECAY_INDEXINGS", "DEFAULT_ALPHA_MIN", "INITS",
    "KINDS", "LM_ARCHS", "LM_CUTSKIP_DEFAULTS", "LM_FAMILY", "LM_INITS", "POS_EMBED_INTERPS", "POS_EMBEDS",
    "RESIDUAL_MODES",
    "BackboneLoadError", "CausalLM", "FeatureRequestError", "OrthogonalAttention", "ResidualBlock", "SkiplessViT",
    "SoftmaxAttention",
    "applicable_args", "backbone_args", "causal_lm_from_args", "create_causal_lm", "create_vit", "cutskip_init_",
    "decayed_gains", "drop_path_rates", "extract_features", "flash_attn_available", "freeze_for_eval",
    "head_matrices", "lm_cutskip_init_", "lm_parameter_count", "load_backbone", "load_timm_backbone",
    "next_token_log_probs", "next_token_loss", "osa_init_", "paper_matrices", "patch_features", "patch_grid",
    "resolve_layers", "save_backbone", "stiefel", "suo_", "use_explicit_attention",
]
