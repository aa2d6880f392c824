"""The two readings of seed 000's Eq. 11, ``W^Q W^K^T = alpha Z + beta I`` (issue 49, ``model.init_args.qk``):
``head`` (per head, the best rank-d_h factors of an own ``alpha Z_h + beta I``; the ViT default, its weights
bit for bit those of before) and ``layer`` (the whole layer's ``d x d`` product, heads its column blocks)."""
import math

import pytest
import torch
from torch import nn

from skipless.config import ConfigError, load_config
from skipless.errors import ModelArgumentError
from skipless.models import create_vit, extract_features, head_matrices, paper_matrices
from skipless.models.features import embed_tokens
from skipless.models.init import (CUTSKIP_DEFAULTS, cutskip_attention_, cutskip_init_, mimetic_query_key_,
                                  query_key_matrices)
from skipless.ssl import method_of
from skipless.supervised.schema import check_train_config
from skipless.training.schema import check_pretrain_config

D, HEADS = 48, 6
DH = D // HEADS


def _z(seed: int, d: int = D) -> torch.Tensor:
    """The layer reading's first draw, ``Z_ij ~ N(0, 1/d)``, from a generator of its own."""
    return torch.randn(d, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) / math.sqrt(d)


def _cols(h: int) -> slice:
    return slice(h * DH, (h + 1) * DH)


@pytest.mark.parametrize("alpha, beta", [(1.8, 1.0), (2.0, 0.6), (0.0, 0.5), (0.7, -0.3)])
def test_layer_reading_sums_over_heads_to_alpha_z_plus_beta_i(alpha, beta):
    wq, wk = query_key_matrices(D, HEADS, alpha, beta, torch.Generator().manual_seed(7), qk="layer")
    assert wq.dtype == wk.dtype == torch.float64 and wq.shape == wk.shape == (D, D)
    total = sum(wq[:, _cols(h)] @ wk[:, _cols(h)].T for h in range(HEADS))
    target = alpha * _z(7) + beta * torch.eye(D, dtype=torch.float64)
    assert (total - target).abs().max() < 1e-10


def test_layer_reading_at_alpha_zero_has_orthogonal_distinct_heads():
    beta = 0.5  # seed 000's language model (App. A.8)
    wq, wk = query_key_matrices(D, HEADS, 0.0, beta, torch.Generator().manual_seed(3), qk="layer")
    assert (wq - wk).abs().max() < 1e-12  # M = beta I: U = V, so W^Q = W^K = sqrt(beta) U R
    for h in range(HEADS):
        for g in range(HEADS):
            gram = wq[:, _cols(h)].T @ wq[:, _cols(g)]
            expect = beta * torch.eye(DH, dtype=torch.float64) if h == g else torch.zeros(DH, DH, dtype=torch.float64)
            assert (gram - expect).abs().max() < 1e-10, (h, g)
    # not the coordinate blocks: R spreads every head over all d coordinates
    assert (wq[DH:, :DH].abs().max() > 0.1) and (wq[:DH, DH:].abs().max() > 0.1)


def _old_head_reading(d: int, heads: int, alpha: float, beta: float, gen: torch.Generator):
    """The suite's query/key init as it was written before issue 49, per head, written out again here."""
    dh = d // heads
    q_rows, k_rows = [], []
    for _ in range(heads):
        m = alpha * torch.randn(d, d, generator=gen, dtype=torch.float64) / math.sqrt(d) \
            + beta * torch.eye(d, dtype=torch.float64)
        u, s, vt = torch.linalg.svd(m)
        q_rows.append((u[:, :dh] * s[:dh].sqrt()).T)
        k_rows.append((vt[:dh].T * s[:dh].sqrt()).T)
    return torch.cat(q_rows), torch.cat(k_rows)  # qkv.weight[:d], qkv.weight[d:2d]


def test_the_trap_head_reading_at_alpha_zero_gives_every_head_the_same_matrices():
    """Why it is refused: with the old algorithm at alpha 0 every head reads the same d_h directions."""
    q, k = _old_head_reading(D, HEADS, 0.0, 0.5, torch.Generator().manual_seed(0))
    for h in range(1, HEADS):
        assert torch.equal(q[h * DH:(h + 1) * DH], q[:DH]) and torch.equal(k[h * DH:(h + 1) * DH], k[:DH])


def test_default_is_the_head_reading_bit_for_bit_as_before():
    """cutskip_init_ with qk default / head: the weights of before, replayed draw by draw from the same seed."""
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="skipless", init="timm", depth=2)
    cutskip_init_(model, alpha=2.0, beta=0.6, c=3.0, seed=11)
    gen = torch.Generator().manual_seed(11)
    for block in model.blocks:
        d = block.attn.proj.weight.shape[0]
        torch.randn(d, d, generator=gen, dtype=torch.float64)  # W^V, W^O (Sec. 5.1)
        q, k = _old_head_reading(d, block.attn.num_heads, 2.0, 0.6, gen)
        assert torch.equal(block.attn.qkv.weight[:d], q.float())
        assert torch.equal(block.attn.qkv.weight[d:2 * d], k.float())
        for lin in (block.mlp.fc1, block.mlp.fc2):  # SUO: one Gaussian of the larger side each
            torch.randn(max(lin.weight.shape), min(lin.weight.shape), generator=gen, dtype=torch.float64)
    torch.manual_seed(5)
    default = create_vit("vit_tiny", residual="skipless", init="cutskip", depth=2).state_dict()
    torch.manual_seed(5)
    head = create_vit("vit_tiny", residual="skipless", init="cutskip", depth=2, init_args={"qk": "head"})
    assert CUTSKIP_DEFAULTS["qk"] == "head" and head.skipless_args["init_args"]["qk"] == "head"
    assert all(torch.equal(v, head.state_dict()[n]) for n, v in default.items())


def test_layer_reading_lands_in_the_fused_qkv_as_the_papers_matrices():
    attn = create_vit("vit_small", residual="skipless", depth=1).blocks[0].attn
    mimetic_query_key_(attn, 1.8, 1.0, torch.Generator().manual_seed(2), qk="layer")
    wq, wk = query_key_matrices(384, 6, 1.8, 1.0, torch.Generator().manual_seed(2), qk="layer")
    m = paper_matrices(attn)
    assert torch.equal(m["Q"], wq.float()) and torch.equal(m["K"], wk.float())
    for h in range(6):
        hm = head_matrices(attn, h)
        assert torch.equal(hm["Q"], wq[:, h * 64:(h + 1) * 64].float())
        assert torch.equal(hm["K"], wk[:, h * 64:(h + 1) * 64].float())
    assert (attn.qkv.bias[:2 * 384] == 0).all()


def test_layer_reading_at_alpha_zero_gives_each_head_its_own_attention_map():
    """The model's attention maps (explicit path) equal softmax(X W^Q_h (X W^K_h)^T / sqrt(d_h)) from
    head_matrices, and no two heads share one."""
    torch.manual_seed(0)
    model = create_vit("vit_small", residual="skipless", init="cutskip", depth=1,
                       init_args={"alpha": 0.0, "beta": 0.5, "qk": "layer"}).eval()
    attn = model.blocks[0].attn
    x = torch.randn(1, 3, 64, 64)
    maps = extract_features(model, x, layers=[0], kinds=("attn",))[("attn", 0)][0]  # (heads, N, N)
    tokens = model.blocks[0].norm1(embed_tokens(model, x))[0]
    for h in range(6):
        m = head_matrices(attn, h)
        logits = (tokens @ m["Q"]) @ (tokens @ m["K"]).T / math.sqrt(attn.head_dim)
        torch.testing.assert_close(maps[h], torch.softmax(logits, dim=-1), atol=1e-5, rtol=1e-4)
    for h in range(6):
        for g in range(h + 1, 6):
            assert (maps[h] - maps[g]).abs().max() > 1e-2, (h, g)


class _BiasFreeAttention(nn.Module):
    """An attention with timm's layout and no biases, as a language model's is (issue 49)."""

    def __init__(self, d: int, heads: int):
        super().__init__()
        self.num_heads, self.head_dim = heads, d // heads
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)


def test_an_attention_of_the_same_layout_without_biases_takes_the_init():
    attn = _BiasFreeAttention(D, HEADS)
    cutskip_attention_(attn, 0.0, 0.5, 3.0, torch.Generator().manual_seed(4), qk="layer")
    m = paper_matrices(attn)
    torch.testing.assert_close((m["Q"] @ m["K"].T).double(), 0.5 * torch.eye(D, dtype=torch.float64),
                               atol=1e-6, rtol=0)
    s = torch.linalg.svdvals((m["V"] @ m["O"]).double())
    torch.testing.assert_close(s, torch.full_like(s, 9.0), atol=1e-4, rtol=0)  # c^2, Sec. 5.1


def test_head_reading_at_alpha_zero_is_refused_before_anything_is_written():
    with pytest.raises(ModelArgumentError, match=r"qk=head with alpha=0 gives every head the same W\^Q_h = W\^K_h"
                                                 r".*expected qk=layer"):
        create_vit("vit_tiny", residual="skipless", init="cutskip", depth=1, init_args={"alpha": 0.0})
    model = create_vit("vit_tiny", residual="skipless", depth=1)
    before = {n: v.clone() for n, v in model.state_dict().items()}
    with pytest.raises(ModelArgumentError, match="qk=layer"):
        cutskip_init_(model, alpha=0.0, beta=0.5, qk="head", seed=0)
    assert all(torch.equal(v, model.state_dict()[n]) for n, v in before.items())
    with pytest.raises(ModelArgumentError, match="qk=layer"):
        query_key_matrices(D, HEADS, 0.0, 0.5, torch.Generator(), qk="head")
    # the other inits take no init_args: alpha 0 means nothing there
    create_vit("vit_tiny", residual="skipless", init="timm", depth=1, init_args={"alpha": 0.0})


def test_an_unknown_reading_is_refused_listing_both():
    with pytest.raises(ModelArgumentError, match=r"qk='row' is not a reading of Eq. 11; expected one of head, layer"):
        create_vit("vit_tiny", residual="skipless", init="cutskip", depth=1, init_args={"qk": "row"})
    with pytest.raises(ModelArgumentError, match="expected one of head, layer"):
        query_key_matrices(D, HEADS, 1.0, 1.0, torch.Generator(), qk="row")


def _check_pretrain(cfg) -> None:
    method = method_of(cfg)
    check_pretrain_config(cfg, dict(method.rules), method.relations)


@pytest.mark.parametrize("entry, check", [("pretrain", _check_pretrain), ("train", check_train_config)])
def test_the_config_refuses_both_in_one_sentence(entry, check):
    with pytest.raises(ConfigError, match=r"^model.init_args.qk must be null or one of head, layer, got 'row'"):
        check(load_config(entry, ["model=skipless", "model.init_args.qk=row"]))
    with pytest.raises(ConfigError) as err:
        check(load_config(entry, ["model=skipless", "model.init_args.alpha=0"]))
    assert str(err.value).startswith("model.init_args.qk=head with model.init_args.alpha=0 gives every head the same")
    assert "expected model.init_args.qk=layer" in str(err.value) and "\n" not in str(err.value)
    check(load_config(entry, ["model=skipless", "model.init_args.alpha=0", "model.init_args.qk=layer"]))
    check(load_config(entry, ["model=skipless-plain", "model.init_args.alpha=0"]))  # timm's init: args unused
