"""analysis.diagnostics: which blocks are measured, and one naming for the evaluator and the callback."""
import math

import pytest
import torch

from skipless.analysis.diagnostics import DiagnosticSettings, diagnose, diagnosed_blocks, paper_blocks, scalars
from skipless.models import FeatureRequestError, create_vit


def test_paper_blocks_are_table_6s_and_scale_with_depth():
    assert paper_blocks(12) == [0, 4, 7, 11]
    assert paper_blocks(2) == [0, 1] and paper_blocks(1) == [0] and paper_blocks(24) == [0, 8, 15, 23]
    assert diagnosed_blocks("paper", 6) == [0, 2, 3, 5]  # 4*5/11 -> 2, 7*5/11 -> 3 and diagnosed_blocks([-1, 0], 6) == [0, 5]
    with pytest.raises(FeatureRequestError, match="block 9 is out of range"):
        diagnosed_blocks([9], 6)


def test_a_diverged_model_is_infinite_everywhere_and_skips_the_embedding_measures():
    model = create_vit("vit_tiny", residual="skipless", depth=2, embed_dim=24, num_heads=2, img_size=32).eval()
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight[0, 0] = float("nan")
    d = diagnose(model, torch.randn(3, 3, 32, 32), DiagnosticSettings(layers="all"))
    assert d.diverged and d.embeddings is None and d.effective_rank is None
    values = scalars(d)
    assert set(values) == {"kappa_JJt", "kappa_attn/block0", "kappa_mlp/block0", "kappa_attn/block1", "kappa_mlp/block1"}
    assert all(math.isinf(v) for v in values.values())
