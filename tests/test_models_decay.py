"""The backbone knobs of the MAE tables (seeds/002, issue 29): the decay's indexing and branches (Eq. 5,
Table 3b), the fixed-scale shortcuts of Table 3b, MAE's fixed sin-cos position table, and their config keys."""
import numpy as np
import pytest
import torch

from skipless.config import ConfigError, load_config
from skipless.models import (
    DECAY_BRANCHES, DECAY_INDEXINGS, INITS, create_vit, decayed_gains, load_backbone, save_backbone,
)
from skipless.models.from_config import vit_args, vit_from_config
from skipless.optim.param_groups import param_groups
from skipless.reports.summary import describe_model
from skipless.supervised.schema import check_train_config
from skipless.training.schema import RULES, check_pretrain_config

S = 0.5 ** 0.5  # Table 3b's constant, written independently of block.SQRT_HALF


# --- the decay's gains, against seeds/002 Eq. 5 computed here with numpy ----------------------------

def eq5(depth: int, alpha_min: float) -> np.ndarray:
    """Eq. 5 as printed: alpha_l = 1 - delta l, delta = (1 - alpha_min) / L, l = 0 .. L-1."""
    delta = (1 - alpha_min) / depth
    return np.array([1 - delta * l for l in range(depth)])


def per_sub_block(depth: int, alpha_min: float) -> np.ndarray:
    """The suite's default: Eq. 5's line over the 2L sub-blocks, ending at alpha_min, as (L, 2)."""
    k = np.arange(2 * depth)
    return (1 - k / (2 * depth - 1) * (1 - alpha_min)).reshape(depth, 2)


@pytest.mark.parametrize("depth, alpha_min", [(12, 0.6), (12, 0.5), (6, 0.9), (1, 0.7), (3, 1.0), (4, 0.0)])
def test_layer_indexing_is_eq5_on_both_shortcuts_of_each_block(depth, alpha_min):
    g = decayed_gains(depth, alpha_min, indexing="layer").numpy()
    want = eq5(depth, alpha_min)
    np.testing.assert_allclose(g, np.stack([want, want], axis=1), rtol=0, atol=1e-7)


def test_layer_indexing_ends_short_of_alpha_min_and_the_default_reaches_it():
    assert decayed_gains(12, 0.6, indexing="layer")[-1].tolist() == pytest.approx([1 - 11 * 0.4 / 12] * 2)
    assert decayed_gains(12, 0.6, indexing="layer")[-1, 1].item() == pytest.approx(0.6333, abs=1e-4)
    assert decayed_gains(12, 0.6)[-1, 1].item() == pytest.approx(0.6)


@pytest.mark.parametrize("depth, alpha_min", [(12, 0.6), (2, 0.5), (1, 0.7), (5, 1.0)])
def test_sub_block_indexing_runs_over_the_2L_sub_blocks(depth, alpha_min):
    g = decayed_gains(depth, alpha_min).numpy()
    np.testing.assert_allclose(g, per_sub_block(depth, alpha_min), rtol=0, atol=1e-7)
    torch.testing.assert_close(decayed_gains(depth, alpha_min), decayed_gains(depth, alpha_min, "sub_block", "both"))


@pytest.mark.parametrize("indexing", DECAY_INDEXINGS)
def test_one_branch_decays_by_the_both_schedule_and_the_other_keeps_gain_one(indexing):
    both = {"sub_block": per_sub_block(12, 0.6), "layer": np.stack([eq5(12, 0.6)] * 2, axis=1)}[indexing]
    attn = decayed_gains(12, 0.6, indexing, "attn").numpy()
    mlp = decayed_gains(12, 0.6, indexing, "mlp").numpy()
    np.testing.assert_allclose(attn[:, 0], both[:, 0], atol=1e-7)
    np.testing.assert_allclose(mlp[:, 1], both[:, 1], atol=1e-7)
    assert (attn[:, 1] == 1).all() and (mlp[:, 0] == 1).all()


@pytest.mark.parametrize("indexing, branches", [("layer", "both"), ("sub_block", "attn"), ("layer", "mlp")])
def test_the_blocks_carry_the_chosen_gains_and_start_as_their_product(indexing, branches):
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual="decayed", depth=3, alpha_min=0.5, decay_indexing=indexing,
                       decay_branches=branches).eval()
    gains = decayed_gains(3, 0.5, indexing, branches)
    for blk, g in zip(model.blocks, gains):
        torch.testing.assert_close(blk.shortcut_gains, g)
    x = torch.randn(2, 7, 192)
    with torch.no_grad():
        h = x
        for blk in model.blocks:
            h = blk(h)
    torch.testing.assert_close(h, x * float(np.prod(gains.numpy())))  # zeroed output projections


@pytest.mark.parametrize("alpha_min", [0.5, 0.6, 1.0])
@pytest.mark.parametrize("init", ["timm", "cutskip", "xavier"])
def test_decayed_zeroes_the_output_projections_for_every_alpha_min_and_reading(alpha_min, init):
    """Seeds/002 Sec. 3.2: the last layer of each branch starts at zero, one rule for every alpha_min (1.0 too)."""
    for indexing in DECAY_INDEXINGS:
        for branches in DECAY_BRANCHES:
            model = create_vit("vit_tiny", residual="decayed", depth=2, init=init, alpha_min=alpha_min,
                               decay_indexing=indexing, decay_branches=branches)
            for blk in model.blocks:
                for lin in (blk.attn.proj, blk.mlp.fc2):
                    assert not lin.weight.any() and not lin.bias.any()


@pytest.mark.parametrize("residual", ["skip", "skipless", "scaled-sum"])
def test_decay_settings_are_refused_where_nothing_decays(residual):
    with pytest.raises(ValueError, match="expected residual=decayed"):
        create_vit("vit_tiny", residual=residual, depth=1, decay_branches="attn")
    with pytest.raises(ValueError, match="expected residual=decayed"):
        create_vit("vit_tiny", residual=residual, depth=1, decay_indexing="layer")
    create_vit("vit_tiny", residual=residual, depth=1, decay_indexing="sub_block", decay_branches="both")


@pytest.mark.parametrize("kwargs, needle", [
    (dict(decay_indexing="per_layer"), "sub_block, layer"),
    (dict(decay_branches="ffn"), "both, attn, mlp"),
    (dict(pos_embed="rope"), "learned, sincos"),
    (dict(residual="half"), "scaled-branch, scaled-sum"),
])
def test_unknown_choices_list_the_valid_ones(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        create_vit("vit_tiny", depth=1, **{"residual": "decayed", **kwargs})


# --- Table 3b's fixed-scale shortcuts, against the block's sub-modules ------------------------------

def by_hand(blk, x, residual):
    a = blk.attn(blk.norm1(x))
    x = x + S * a if residual == "scaled-branch" else S * (x + a)
    m = blk.mlp(blk.norm2(x))
    return x + S * m if residual == "scaled-branch" else S * (x + m)


@pytest.mark.parametrize("residual", ["scaled-branch", "scaled-sum"])
@pytest.mark.parametrize("init", ["timm", "cutskip"])
def test_scaled_modes_compute_table_3b_forms(residual, init):
    torch.manual_seed(0)
    model = create_vit("vit_tiny", residual=residual, depth=2, init=init).eval()
    assert model.blocks[0].attn.proj.weight.any()  # no zero-init: that belongs to the decayed mode
    x = torch.randn(2, 9, 192)
    with torch.no_grad():
        h, want = x, x
        for blk in model.blocks:
            h, want = blk(h), by_hand(blk, want, residual)
    torch.testing.assert_close(h, want, rtol=1e-6, atol=1e-6)


def test_scaled_modes_keep_drop_path_on_both_branches():
    from skipless.models import drop_path_rates

    for residual in ("scaled-branch", "scaled-sum"):
        rates = drop_path_rates(create_vit("vit_tiny", residual=residual, depth=2, drop_path_rate=0.2))
        assert rates[1] == pytest.approx((0.2, 0.2))


# --- MAE's fixed 2-D sin-cos position table ------------------------------------------------------------

def mae_table(dim: int, rows: int, cols: int) -> np.ndarray:
    """MAE's get_2d_sincos_pos_embed (cls_token=True), written out: per half of D/2 channels the 1-D code
    [sin(p w_k), cos(p w_k)], w_k = 1 / 10000^(k / (D/4)), k < D/4; the x (column) coordinate's half first."""
    k = np.arange(dim // 4, dtype=np.float64)
    omega = 1.0 / 10000 ** (k / (dim / 4))
    table = np.zeros((1 + rows * cols, dim))
    for r in range(rows):
        for c in range(cols):
            x, y = c * omega, r * omega
            table[1 + r * cols + c] = np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)])
    return table


@pytest.mark.parametrize("arch, img_size, patch, grid", [
    ("vit_tiny", 224, 16, (14, 14)), ("vit_micro", (16, 24), 4, (4, 6))])
def test_sincos_pos_embed_is_maes_closed_form(arch, img_size, patch, grid):
    model = create_vit(arch, depth=1, pos_embed="sincos", img_size=img_size, patch_size=patch)
    got = model.pos_embed.detach()
    assert got.dtype == torch.float32 and got.shape == (1, 1 + grid[0] * grid[1], model.embed_dim)
    np.testing.assert_allclose(got[0].numpy(), mae_table(model.embed_dim, *grid), rtol=0, atol=1e-6)


@pytest.mark.parametrize("init, attention", [("timm", "softmax"), ("cutskip", "softmax"), ("xavier", "softmax"),
                                             ("osa", "osa"), ("mae", "softmax")])
@pytest.mark.parametrize("residual", ["skip", "decayed"])
def test_no_init_overwrites_the_sincos_table(init, attention, residual):
    assert set(INITS) == {"timm", "cutskip", "xavier", "osa", "mae"}
    torch.manual_seed(0)
    model = create_vit("vit_tiny", depth=1, residual=residual, init=init, attention=attention, pos_embed="sincos")
    np.testing.assert_allclose(model.pos_embed[0].detach().numpy(), mae_table(192, 14, 14), atol=1e-6)
    assert not model.pos_embed.requires_grad


def test_the_config_factory_keeps_the_table_too():
    cfg = load_config("pretrain", ["data=imagenet", "model=decayed", "model.arch=vit_tiny", "model.depth=1",
                                   "model.pos_embed=sincos"])
    model = vit_from_config(cfg.model)
    np.testing.assert_allclose(model.pos_embed[0].detach().numpy(), mae_table(192, 14, 14), atol=1e-6)


def test_sincos_table_is_frozen_gets_no_grad_and_stays_out_of_the_optimizer():
    torch.manual_seed(0)
    model = create_vit("vit_tiny", depth=1, residual="decayed", pos_embed="sincos")
    before = model.pos_embed.detach().clone()
    model(torch.randn(2, 3, 48, 64)).square().sum().backward()  # a non-native crop: the resample runs too
    assert model.pos_embed.grad is None and model.cls_token.grad is not None
    groups = param_groups(model)
    grouped = [p for g in groups for p in g["params"]]
    assert not any(p is model.pos_embed for p in grouped)
    assert len(grouped) == sum(1 for p in model.parameters() if p.requires_grad) == len(list(model.parameters())) - 1
    opt = torch.optim.AdamW(groups, lr=1.0)
    opt.step()
    assert torch.equal(model.pos_embed, before) and "pos_embed" in model.state_dict()


def test_param_groups_leave_out_every_frozen_parameter():
    model = create_vit("vit_tiny", depth=1)
    frozen = [model.pos_embed, model.blocks[0].attn.qkv.weight, model.blocks[0].norm1.bias]
    for p in frozen:
        p.requires_grad_(False)
    groups = {g["name"]: g["params"] for g in param_groups(model)}
    grouped = groups["decay"] + groups["no_decay"]
    assert not any(p is f for p in grouped for f in frozen)
    assert len(grouped) == len(list(model.parameters())) - len(frozen)
    assert any(p is model.blocks[0].attn.proj.weight for p in groups["decay"])
    assert any(p is model.blocks[0].norm1.weight for p in groups["no_decay"])


def test_a_learned_table_still_trains():
    model = create_vit("vit_tiny", depth=1)
    assert model.pos_embed.requires_grad and model.skipless_args["pos_embed"] == "learned"
    assert any(p is model.pos_embed for g in param_groups(model) for p in g["params"])


# --- backbone files and the evaluators' builder -----------------------------------------------------------

def _trained(model):
    with torch.no_grad():
        for blk in model.blocks:  # decayed starts with zero outputs; make them matter
            blk.attn.proj.weight.normal_(0, 0.02)
            blk.mlp.fc2.weight.normal_(0, 0.02)
    return model.eval()


def test_sincos_and_decay_survive_save_and_load(tmp_path):
    torch.manual_seed(0)
    model = _trained(create_vit("vit_tiny", residual="decayed", depth=2, alpha_min=0.5, decay_indexing="layer",
                                decay_branches="mlp", pos_embed="sincos"))
    path = save_backbone(tmp_path / "backbone.pt", model)
    assert "pos_embed" in torch.load(path, weights_only=True)["state_dict"]
    loaded = load_backbone(path).eval()
    assert loaded.skipless_args == model.skipless_args
    assert not loaded.pos_embed.requires_grad and torch.equal(loaded.pos_embed, model.pos_embed)
    for a, b in zip(loaded.blocks, model.blocks):
        torch.testing.assert_close(a.shortcut_gains, b.shortcut_gains)
    x = torch.randn(2, 3, 48, 80)  # another crop size: the fixed table is resampled as a learned one is
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


def test_the_evaluators_builder_loads_the_file_and_its_random_floor(tmp_path):
    from skipless.eval.shared.backbones import load_spec, resolve_backbones

    torch.manual_seed(0)
    model = _trained(create_vit("vit_tiny", residual="scaled-sum", depth=2, pos_embed="sincos"))
    run = tmp_path / "mae"
    save_backbone(run / "backbone.pt", model)
    spec, floor = resolve_backbones(f"{run} random", runs_root=tmp_path)
    loaded, rand = load_spec(spec), load_spec(floor, seed=0)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
    for m in (loaded, rand):
        assert m.skipless_args["pos_embed"] == "sincos" and m.skipless_args["residual"] == "scaled-sum"
        np.testing.assert_allclose(m.pos_embed[0].numpy(), mae_table(192, 14, 14), atol=1e-6)


def test_a_backbone_file_without_the_new_arguments_loads_as_before(tmp_path):
    """Files written before decay_indexing, decay_branches and pos_embed existed: today's gains, a learned table."""
    torch.manual_seed(0)
    model = _trained(create_vit("vit_tiny", residual="decayed", depth=3, alpha_min=0.7))
    path = save_backbone(tmp_path / "old.pt", model)
    payload = torch.load(path, weights_only=True)
    for key in ("decay_indexing", "decay_branches", "pos_embed"):
        del payload["args"][key]
    torch.save(payload, path)
    loaded = load_backbone(path).eval()
    args = loaded.skipless_args
    assert (args["decay_indexing"], args["decay_branches"], args["pos_embed"]) == ("sub_block", "both", "learned")
    assert loaded.pos_embed.requires_grad
    gains = torch.stack([blk.shortcut_gains for blk in loaded.blocks])
    np.testing.assert_allclose(gains.numpy(), per_sub_block(3, 0.7), atol=1e-7)
    x = torch.randn(1, 3, 48, 64)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)


# --- config keys ------------------------------------------------------------------------------------

TINY = ["model.arch=vit_tiny", "model.depth=2"]


@pytest.mark.parametrize("entry", ["pretrain", "train"])
def test_config_keys_reach_create_vit(entry):
    cfg = load_config(entry, ["model=decayed", *TINY, "model.decay.indexing=layer", "model.decay.branches=attn",
                              "model.pos_embed=sincos"])
    args = vit_args(cfg.model)
    assert (args["decay_indexing"], args["decay_branches"], args["pos_embed"]) == ("layer", "attn", "sincos")
    model = create_vit(args.pop("arch"), **args)
    torch.testing.assert_close(model.blocks[1].shortcut_gains, decayed_gains(2, 0.6, "layer", "attn")[1])
    default = vit_args(load_config(entry, ["model=decayed", *TINY]).model)
    assert (default["decay_indexing"], default["decay_branches"], default["pos_embed"]) == \
        ("sub_block", "both", "learned")


@pytest.mark.parametrize("key, value, message", [
    ("model.decay.indexing", "per_layer", "model.decay.indexing must be one of sub_block, layer, got 'per_layer'"),
    ("model.decay.branches", "ffn", "model.decay.branches must be one of both, attn, mlp, got 'ffn'"),
    ("model.pos_embed", "rope", "model.pos_embed must be one of learned, sincos, got 'rope'"),
])
@pytest.mark.parametrize("entry, check", [("pretrain", check_pretrain_config), ("train", check_train_config)])
def test_bad_config_values_are_one_sentence(key, value, message, entry, check):
    cfg = load_config(entry, ["model=decayed", f"{key}={value}"])
    with pytest.raises(ConfigError) as err:
        check(cfg)
    assert str(err.value) == message


def test_schema_choices_are_the_models():
    def accepted(key, values):
        return [v for v in values if RULES[key].check(v)]

    assert accepted("model.decay.indexing", [*DECAY_INDEXINGS, "x"]) == list(DECAY_INDEXINGS)
    assert accepted("model.decay.branches", [*DECAY_BRANCHES, "x"]) == list(DECAY_BRANCHES)
    assert accepted("model.pos_embed", ["learned", "sincos", "x"]) == ["learned", "sincos"]


def test_the_summary_names_settings_off_their_default():
    cfg = load_config("pretrain", ["model=decayed", "model.decay.indexing=layer", "model.decay.branches=attn",
                                   "model.pos_embed=sincos"])
    line = describe_model(cfg.model)
    assert "alpha_min 0.6, decay per layer, decay attn only" in line and "pos-embed sincos" in line
    plain = describe_model(load_config("pretrain", ["model=decayed"]).model)
    assert "decay" not in plain.replace("residual decayed", "") and "pos-embed" not in plain
    args = create_vit("vit_tiny", residual="decayed", depth=1, decay_branches="mlp", pos_embed="sincos").skipless_args
    assert "decay mlp only" in describe_model(args) and "pos-embed sincos" in describe_model(args)
    assert "decay per layer" not in describe_model(args)
