"""kappa of a CNN block's Jacobian with and without its shortcut (issue 38, item 5): the maps against the blocks
they come from, the shortcut's exact share of the Jacobian, Lanczos against numpy's singular values, the
ResNet's zero-initialised branches, and make conditioning on CNN backbones with its refusals."""
import json
import math

import numpy as np
import pytest
import torch
from torch.autograd.functional import jacobian

from skipless.eval.conditioning.run import main
from skipless.analysis.condition_number import NUMERICALLY_ZERO, Solver
from skipless.analysis.conv_block_conditioning import block_inputs, block_maps, conv_block_conditions
from skipless.models.checkpoint import save_backbone
from skipless.models.decay import block_gains
from skipless.models.timm_family import create_timm_backbone, feature_blocks

TINY_RESNET = {"layers": [1, 1, 2, 1], "channels": [8, 8, 16, 16], "stem_width": 8}  # 5 blocks; the stem gives 64
# channels, so each stage's first block is a projection and block 3 the one identity block
TINY_MIXER = {"dim": 6, "depth": 2, "kernel_size": 3, "patch_size": 4}


def _moved(model, seed=0):
    """``model`` with its weights and batch-norm statistics moved off their init (a zero branch hides nothing)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for tensor in [*model.parameters(), *(b for n, b in model.named_buffers() if "running" in n)]:
            tensor.add_(0.2 * torch.randn_like(tensor).abs())
    return model.double().eval()


def _resnet(alpha_min=0.6, moved=True):
    torch.manual_seed(1)
    model = create_timm_backbone("resnet18", 32, 16, residual="decayed", alpha_min=alpha_min, timm_args=TINY_RESNET)
    return _moved(model) if moved else model.double().eval()


def _mixer(residual):
    torch.manual_seed(2)
    return _moved(create_timm_backbone("convmixer", 16, 16, residual=residual, timm_args=TINY_MIXER))


def _image(size):
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def _jac(f, x):
    with torch.no_grad():
        rows = f(x).numel()
    return jacobian(f, x).reshape(rows, x.numel())


def test_block_inputs_are_the_features_each_block_reads():
    model = _mixer("skip")
    x = _image(16)
    inputs = block_inputs(model, x, [0, 1])
    with torch.no_grad():
        first = model.stem(x)
        assert torch.equal(inputs[0], first) and torch.allclose(inputs[1], model.blocks[0](first))


def test_a_resnet_block_is_read_before_its_last_relu_and_its_shortcut_is_g_times_s():
    model = _resnet()
    blocks = feature_blocks(model)
    gains = block_gains(5, 0.6).tolist()
    inputs = block_inputs(model, _image(32), range(5))
    for i, block in enumerate(blocks):
        maps, x = block_maps(block), inputs[i]
        with torch.no_grad():
            assert torch.allclose(torch.relu(maps.block(x)), block(x))  # the block, before its ReLU
            shortcut = maps.block(x) - maps.branch(x)
        assert maps.gain == pytest.approx(gains[i])
        if block.downsample.__class__.__name__ == "ShortcutGain":
            assert not maps.projection and torch.allclose(shortcut, gains[i] * x)
            diff = _jac(maps.block, x) - _jac(maps.branch, x)  # the Jacobians differ by g I exactly
            assert torch.allclose(diff, gains[i] * torch.eye(x.numel(), dtype=x.dtype), atol=1e-12)
        else:  # the stage's projection (conv, BN), scaled by g
            with torch.no_grad():
                projected = block.downsample[1](block.downsample[0](x))
            assert maps.projection and torch.allclose(shortcut, gains[i] * projected)
    assert [block_maps(b).projection for b in blocks] == [True, True, True, False, True]


def test_a_convmixer_without_skips_has_no_identity_in_its_block_jacobian():
    skip, skipless = _mixer("skip"), _mixer("skipless")
    skipless.load_state_dict(skip.state_dict())
    x = block_inputs(skip, _image(16), [1])[1]
    with_skip, without = block_maps(feature_blocks(skip)[1]), block_maps(feature_blocks(skipless)[1])
    assert (with_skip.gain, without.gain) == (1.0, 0.0)
    branch = _jac(with_skip.branch, x)
    assert torch.allclose(_jac(with_skip.block, x) - branch, torch.eye(x.numel(), dtype=x.dtype), atol=1e-12)
    assert torch.allclose(_jac(without.block, x), branch, atol=1e-12)  # no identity path left
    assert torch.allclose(_jac(without.branch, x), branch, atol=1e-12)


def _numpy_kappa(matrix):
    s = np.linalg.svd(matrix.numpy(), compute_uv=False)
    return (s[0] / s[-1]) ** 2


@pytest.mark.parametrize("build, size", [(_resnet, 32), (lambda: _mixer("skip"), 16), (lambda: _mixer("skipless"), 16)])
def test_lanczos_kappa_matches_numpys_singular_values(build, size):
    model = build()
    image = _image(size)
    depth = len(feature_blocks(model))
    result = conv_block_conditions(model, image, range(depth), Solver(tol=1e-6, max_iter=600))
    inputs = block_inputs(model, image, range(depth))
    checked = 0
    for i, c in result.items():
        maps = block_maps(feature_blocks(model)[i])
        for which in ("branch", "block"):
            free, dense = getattr(c, which), _jac(getattr(maps, which), inputs[i])
            if dense.shape[0] > dense.shape[1]:  # a tall Jacobian: A A^T is singular
                assert free.reason == NUMERICALLY_ZERO
                continue
            expected = _numpy_kappa(dense)
            if expected > 1e9:  # past what float64 Lanczos resolves at this size: only the verdict is compared
                assert free.reason == NUMERICALLY_ZERO or free.value > 1e6
                continue
            assert free.converged and free.value == pytest.approx(expected, rel=1e-3)
            checked += 1
    assert checked >= 3


def test_at_initialisation_a_resnet_branch_is_zero_and_an_identity_block_has_kappa_one():
    """timm's zero_init_last zeroes each branch's last BatchNorm (seeds/002 Sec. 3.2): K = 0, A = g I."""
    result = conv_block_conditions(_resnet(moved=False), _image(32), [3])
    for c in result.values():
        assert c.branch.reason == NUMERICALLY_ZERO and c.branch.value == math.inf
        assert c.block.converged and c.block.value == pytest.approx(1.0, abs=1e-9)


def _saved(folder, model):
    save_backbone(folder / "backbone.pt", model.float())
    return folder


COMMON = ["image_size=32", "images=gaussian", "layers=all", "random_floor=false"]


def test_make_conditioning_measures_cnn_blocks_with_and_without_their_shortcut(tmp_path, capsys):
    runs = tmp_path / "runs"
    resnet, mixer = _saved(runs / "resnet", _resnet()), _saved(runs / "mixer", _mixer("skipless"))
    main([f"ckpt={resnet} {mixer}", f"runs_root={runs}", *COMMON, "dense_check=true"])
    out = capsys.readouterr().out
    assert "jacobian, embeddings, effective_rank read ViT tokens and are not taken for a CNN" in out
    record = json.loads((resnet / "eval" / "conditioning.json").read_text())
    assert sorted(record["blocks"]) == ["0", "1", "2", "3", "4"]
    assert [record["blocks"][b]["gain"] for b in "01234"] == pytest.approx(block_gains(5, 0.6).tolist())
    for b in "3":  # the identity block, well conditioned with the shortcut: Lanczos against the dense value
        free, dense = record["blocks"][b]["block"], record["dense"][b]["block"]
        assert free["converged"] and free["value"] == pytest.approx(dense["value"], rel=1e-2)
    mixed = json.loads((mixer / "eval" / "conditioning.json").read_text())
    assert all(v["gain"] == 0.0 and v["branch"]["value"] == v["block"]["value"] for v in mixed["blocks"].values())
    table = (runs / "compare" / "conditioning.md").read_text()
    assert "| resnet block (g s + f) |" in table and "| mixer branch (f) |" in table
    assert "| resnet gain g | 1 (proj.) | 0.9 (proj.) | 0.8 (proj.) | 0.7 | 0.6 (proj.) |" in table
    assert (runs / "compare" / "conditioning.png").stat().st_size > 0
    assert list((resnet / "eval" / "tb" / "conditioning").glob("events.out.tfevents.*"))


@pytest.mark.parametrize("extra, says", [
    (["measures=[jacobian]"], r"measures=\['jacobian'\] has no 'blocks', the one measure of a CNN backbone"),
    (["spectrum=true"], r"spectrum=true draws a ViT's attention and MLP Jacobian spectra; expected spectrum=false"),
    (["layers=[11]"], r"block 11 is out of range: the backbone has 5 blocks .* in resnet; layers=all or layers=paper"),
    (["ckpt_vit"], r"ckpt mixes ViT backbones \(init-skip\) and CNN backbones \(resnet\), whose conditioning measures differ .*; "
                    r"expected one family per call"),
])
def test_settings_a_cnn_cannot_use_are_refused_in_one_sentence_before_anything_is_written(tmp_path, extra, says):
    runs = tmp_path / "runs"
    resnet = _saved(runs / "resnet", _resnet())
    ckpt = f"{resnet} init:skip" if extra == ["ckpt_vit"] else f"{resnet}"
    extra = [] if extra == ["ckpt_vit"] else extra
    with pytest.raises(SystemExit, match="^error: " + says):
        main([f"ckpt={ckpt}", f"runs_root={runs}", *COMMON, *extra])
    assert not (resnet / "eval").exists() and not (runs / "compare").exists()
