"""make conditioning: several backbones in one report, the dense check, and bad input refused first."""
import json
import math

import pytest
import torch

from skipless.analysis.condition_number import Solver
from skipless.eval.conditioning.run import main, run
from skipless.eval.conditioning.spectrum import spectrum_ends
from skipless.models.attention import use_explicit_attention
from skipless.analysis.condition_number import dense_condition
from skipless.analysis.jacobians import network_jacobian_dense
from skipless.config import load_config
from skipless.models import create_vit, load_backbone, save_backbone
from skipless.models.features import embed_tokens
from tests.eval_fixtures import tiny_run

SMALL = ["image_size=32", "jacobian.image_size=32", "num_images=3", "layers=all", "solver.max_iter=400"]


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """Generated images and a 2-block ViT of width 24 (its dense Jacobians fit in a test)."""
    root = tmp_path_factory.mktemp("conditioning")
    data, _ = tiny_run(root, n_train=4, n_val=4, seed=0, img_size=32)
    torch.manual_seed(0)
    run_dir = root / "runs" / "narrow"
    save_backbone(run_dir / "backbone.pt", create_vit("vit_tiny", residual="skip", depth=2, embed_dim=24, num_heads=2,
                                                      img_size=32))
    return root, data, run_dir


def cfg_of(root, data, *extra):
    return load_config("conditioning", [*SMALL, f"roots.default={data}", f"runs_root={root / 'runs'}", *extra])


def test_matrix_free_values_match_the_dense_jacobians_and_the_report_has_every_backbone(small_run):
    root, data, run_dir = small_run
    written = run(cfg_of(root, data, f"ckpt={run_dir} random", "dense_check=true"))
    record = json.loads((run_dir / "eval" / "conditioning.json").read_text())
    assert record["blocks"] == [0, 1] and record["images"] == 3 and record["tokens"] == 5
    for free, dense in [(record["jacobian"], record["dense"]["jacobian"])] + [
            (record["block_jacobians"][b][k], record["dense"]["block_jacobians"][b][k]) for b in "01" for k in ("attn", "mlp")]:
        assert free["converged"] and free["reason"] is None
        assert free["largest"] == pytest.approx(dense["largest"], rel=1e-2)
        assert free["smallest"] == pytest.approx(dense["smallest"], rel=1e-2)
    table = written["table"].read_text()
    assert written["table"] == root / "runs" / "compare" / "conditioning.md"
    assert "| narrow |" in table and "| random |" in table and "Table 6" in table
    assert written["figure"].stat().st_size > 0
    assert list((run_dir / "eval" / "tb" / "conditioning").glob("events.out.tfevents.*"))


def test_the_jacobian_is_of_the_blocks_parameters_at_the_last_blocks_tokens(small_run):
    """J's size: m n d rows, one column per parameter of the blocks (the embedding and final norm excluded)."""
    root, data, run_dir = small_run
    backbone = load_backbone(run_dir / "backbone.pt")
    images = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    jac = network_jacobian_dense(backbone, images)
    assert jac.shape == (2 * 5 * 24, sum(p.numel() for p in backbone.blocks.parameters()))
    assert math.isfinite(dense_condition(jac, gram=True).value)


def test_a_diverged_checkpoint_is_reported_infinite_with_its_reason(small_run, capsys):
    root, data, _ = small_run
    model = create_vit("vit_tiny", residual="skipless", depth=2, embed_dim=24, num_heads=2, img_size=32)
    with torch.no_grad():
        model.blocks[1].mlp.fc1.weight[0, 0] = float("nan")
    save_backbone(root / "runs" / "diverged" / "backbone.pt", model)
    run(cfg_of(root, data, f"ckpt={root / 'runs' / 'diverged'}"))
    assert "non-finite weights (the model diverged)" in capsys.readouterr().out
    record = json.loads((root / "runs" / "diverged" / "eval" / "conditioning.json").read_text())
    assert record["diverged"] and record["jacobian"]["value"] == "inf"
    assert record["jacobian"]["reason"] == "non-finite weights (the model diverged)"
    assert record["embeddings_log_kappa"] is None


@pytest.mark.parametrize("extra, message", [
    (["layers=[5]"], "block 5 is out of range: the backbone has 2 blocks"),
    (["dense_check=true", "dense_max_entries=1000"], "lower jacobian.images, jacobian.image_size or the depth"),
    (["num_images=1"], "num_images must be an integer >= 2, got 1"),
    (["image_size=30"], "not a multiple of the patch size"),
    (["measures=[jacobian,nonsense]"], "measures must be a non-empty list of measures among"),
])
def test_bad_input_is_one_sentence_before_anything_is_written(small_run, extra, message):
    root, data, run_dir = small_run
    out = root / "bad-out"
    with pytest.raises(SystemExit) as exit_info:
        main([*SMALL, f"roots.default={data}", f"runs_root={root / 'runs'}", f"ckpt={run_dir}", f"out={out}", *extra])
    err = str(exit_info.value.code)
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_gaussian_images_are_seeded_noise_and_need_no_data(small_run, tmp_path):
    root, _, run_dir = small_run
    args = [*SMALL, "images=gaussian", f"runs_root={root / 'runs'}", f"ckpt={run_dir}", "measures=[jacobian]",
            "roots.default=/nowhere", "seed=3"]
    written = run(load_config("conditioning", [*args, f"out={tmp_path / 'a'}"]))
    assert written["figure"] is None  # no per-block quantity to draw
    run(load_config("conditioning", [*args, f"out={tmp_path / 'b'}"]))
    first, again = (json.loads((tmp_path / o / "narrow" / "conditioning.json").read_text()) for o in "ab")
    assert first["jacobian"]["converged"] and first["jacobian"]["value"] == again["jacobian"]["value"]
    backbone = load_backbone(run_dir / "backbone.pt")
    noise = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3)).double()
    dense = dense_condition(network_jacobian_dense(backbone, noise), gram=True)
    assert first["jacobian"]["value"] == pytest.approx(dense.value, rel=1e-2)  # measured on exactly that noise


def test_the_spectrum_is_every_singular_value_of_the_sub_block_jacobian(small_run):
    """Seed 003's Figs. 7-8 (spectrum=true): against autograd's Jacobian of u + attn(u) at block 0's normalised tokens
    u = norm1(x) (Eq. 7's K_l + I of a skip block), and the matrix-free kappa's ends (K K^T's extreme eigenvalues are
    the squared extreme singular values)."""
    root, data, run_dir = small_run
    written = run(cfg_of(root, data, f"ckpt={run_dir}", "random_floor=false", "spectrum=true"))
    record = json.loads((run_dir / "eval" / "conditioning.json").read_text())
    attn = torch.tensor(record["spectrum"]["0"]["attn"], dtype=torch.float64)
    assert attn.numel() == 5 * 24 and len(record["spectrum"]["1"]["mlp"]) == 5 * 24
    model = load_backbone(run_dir / "backbone.pt").double().eval()
    images = run.__globals__["_load_images"](cfg_of(root, data), 3, 32).double()
    with torch.no_grad():
        x = embed_tokens(model, images[:1])  # the tokens entering block 0, as every diagnostic embeds them
    block = model.blocks[0]
    jac = torch.autograd.functional.jacobian(lambda u: u + block.ls1(block.attn(u)), block.norm1(x))
    expected = torch.linalg.svdvals(jac.reshape(5 * 24, 5 * 24))
    torch.testing.assert_close(attn, expected, rtol=1e-5, atol=1e-9)  # the JSON keeps 6 significant digits
    assert float(attn[0]) ** 2 == pytest.approx(record["block_jacobians"]["0"]["attn"]["largest"], rel=1e-2)
    assert record["spectrum_kappa"]["0"]["attn"] == pytest.approx(float(expected[0] / expected[-1]), rel=1e-5)
    assert written["spectrum"].stat().st_size > 10_000


def test_the_matrix_free_ends_equal_the_dense_svd_of_the_attention_jacobian():
    """Seeds/003 Figs. 7-8 at a real size are Lanczos' ends: on a tiny skipless and a tiny skip block (weights x8, so
    the spectrum spreads: kappa about 2e4 and 4), float64, the 4 largest and 4 smallest singular values of K + g I
    against torch's SVD of autograd's dense Jacobian, to 1e-8 relative (Lanczos' tolerance 1e-10 on the squares)."""
    image = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    for residual, gain in (("skipless", 0.0), ("skip", 1.0)):
        torch.manual_seed(0)
        model = create_vit("vit_tiny", residual=residual, depth=1, embed_dim=16, num_heads=2, img_size=32).double()
        with torch.no_grad():
            for p in model.blocks.parameters():
                p.mul_(8.0 if p.ndim == 2 else 1.0)
        ends = spectrum_ends(model, image, [0], Solver(tol=1e-10, max_iter=200), 4)["0"]["attn"]
        block = model.blocks[0].eval()
        with torch.no_grad():
            u = block.norm1(embed_tokens(model.eval(), image.double()))
        with use_explicit_attention(block):
            jac = torch.autograd.functional.jacobian(lambda v: gain * v + block.ls1(block.attn(v)), u)
        dense = torch.linalg.svdvals(jac.reshape(80, 80))
        assert ends["converged"] and ends["dim"] == 80 and ends["reason"] is None
        torch.testing.assert_close(torch.tensor(ends["top"], dtype=torch.float64), dense[:4], rtol=1e-8, atol=0)
        torch.testing.assert_close(torch.tensor(ends["bottom"], dtype=torch.float64), dense.flip(0)[:4], rtol=1e-8, atol=0)
        assert ends["kappa"] == pytest.approx(float(dense[0] / dense[-1]), rel=1e-8)
        if residual == "skip":  # not the whole space: Lanczos stopped on its tolerance
            assert ends["products"] < 80


def test_a_spectrum_too_large_to_form_is_matrix_free_and_checked_against_the_dense_where_both_fit(small_run):
    """Above dense_max_entries (here 1000, 5 tokens x 24 = 120 squared) only the matrix-free ends are written, and
    they give spectrum_kappa; where the dense spectrum fits, the ends are recorded beside it with their difference."""
    root, data, run_dir = small_run
    written = run(cfg_of(root, data, f"ckpt={run_dir}", "random_floor=false", "spectrum=true", "dense_max_entries=1000",
                         "spectrum_ends=3", "solver.tol=1e-8", "measures=[embeddings]", "layers=[0]",
                         f"out={root / 'spectrum-out'}"))
    record = json.loads((root / "spectrum-out" / "narrow" / "conditioning.json").read_text())
    assert "spectrum" not in record and record["spectrum_method"] == "matrix-free"
    ends = record["spectrum_ends"]["0"]["attn"]
    assert len(ends["top"]) == len(ends["bottom"]) == 3 and ends["dim"] == 120 and ends["converged"]
    assert record["spectrum_kappa"]["0"]["attn"] == pytest.approx(ends["top"][0] / ends["bottom"][0], rel=1e-5)  # JSON: 6 digits
    assert written["spectrum"].stat().st_size > 5_000
    both = run(cfg_of(root, data, f"ckpt={run_dir}", "random_floor=false", "spectrum=true", "spectrum_ends=3",
                      "solver.tol=1e-8", "measures=[embeddings]", "layers=[0]", f"out={root / 'spectrum-both'}"))
    record = both["results"]["narrow"]
    assert record["spectrum_method"] == "dense" and len(record["spectrum"]["0"]["attn"]) == 120
    assert record["spectrum_ends_vs_dense"]["0"]["attn"] < 1e-6
    assert record["spectrum_kappa"]["0"]["attn"] == pytest.approx(ends["top"][0] / ends["bottom"][0], rel=1e-5)


def test_a_dense_spectrum_too_large_to_form_is_one_sentence_naming_image_size_and_spectrum_ends(small_run):
    root, data, run_dir = small_run
    for bad, words in (("spectrum_ends=null", "image_size for narrow's spectrum, or set spectrum_ends"),
                       ("spectrum_ends=0", "spectrum_ends")):
        with pytest.raises(SystemExit) as exit_info:
            main([*SMALL, f"roots.default={data}", f"runs_root={root / 'runs'}", f"ckpt={run_dir}", "spectrum=true",
                  "dense_max_entries=1000", bad, f"out={root / 'spectrum-bad'}"])
        err = str(exit_info.value.code)
        assert words in err and len(err.strip().splitlines()) == 1
        assert not (root / "spectrum-bad").exists()


# ---- images=run and image_fraction (seeds/003 Fig. 3: "10% validation sets", each run on its own val split) ----
def pil_val_image(path, size, crop_pct=0.875):
    """The run's validation transform written out with PIL alone: shorter side to floor(size / crop_pct) (bicubic),
    centre crop, ImageNet mean and std."""
    import numpy as np
    from PIL import Image

    image = Image.open(path).convert("RGB")
    short = int(size / crop_pct)
    w, h = image.size
    w2, h2 = (short, int(short * h / w)) if w <= h else (int(short * w / h), short)
    image = image.resize((w2, h2), Image.BICUBIC)
    left, top = int(round((w2 - size) / 2)), int(round((h2 - size) / 2))
    a = np.asarray(image.crop((left, top, left + size, top + size)), dtype=np.float32) / 255
    a = (a - np.array([0.485, 0.456, 0.406], dtype=np.float32)) / np.array([0.229, 0.224, 0.225], dtype=np.float32)
    return torch.from_numpy(a).permute(2, 0, 1)


@pytest.fixture(scope="module")
def supervised_run(tmp_path_factory):
    """A make train run folder of a 2-block ViT (16 px, patch 8: 5 tokens) on a 20-image default val split."""
    from omegaconf import OmegaConf

    root = tmp_path_factory.mktemp("conditioning-run")
    data, _ = tiny_run(root, n_train=4, n_val=20, seed=1, img_size=16)
    run_dir = root / "runs" / "trained"
    torch.manual_seed(1)
    save_backbone(run_dir / "backbone.pt", create_vit("vit_tiny", residual="skip", depth=2, embed_dim=24, num_heads=2,
                                                      img_size=16, patch_size=8))
    OmegaConf.save(OmegaConf.create({"data": {"name": "default", "root": str(data)},
                                     "aug": {"image_size": 16, "eval_crop_pct": 0.875, "interpolation": "bicubic"}}),
                   run_dir / "config.yaml")
    return root, data, run_dir


def test_images_run_reads_a_fraction_of_the_runs_own_val_split_evenly_spaced(supervised_run):
    from skipless.analysis.embedding_condition import embedding_conditions
    from skipless.data.classification.registry import classification_split

    root, data, run_dir = supervised_run
    run(load_config("conditioning", ["images=run", "image_fraction=0.25", "image_size=224", "measures=[embeddings]",
                                     "layers=all", f"ckpt={run_dir}", "random_floor=false", f"out={root / 'out'}"]))
    record = json.loads((root / "out" / "trained" / "conditioning.json").read_text())
    files = classification_split("default", data, "val").items  # the scenes the default's val split labels
    count = round(0.25 * len(files))
    assert record["images"] == count and record["image_size"] == 16 and record["tokens"] == 5  # the run's 16 px
    picked = [files[i * len(files) // count] for i in range(count)]  # evenly spaced from the first
    images = torch.stack([pil_val_image(p, 16) for p in picked])
    expected = embedding_conditions(load_backbone(run_dir / "backbone.pt"), images)
    for block in ("0", "1"):
        for name, value in record["embeddings_log_kappa"][block].items():
            assert value == pytest.approx(expected[int(block)][name], rel=1e-3), (block, name)


def test_image_fraction_of_a_folder_spreads_over_its_listing(small_run, tmp_path):
    from skipless.eval.shared.square_images import evenly_spaced, load_images

    assert evenly_spaced(10, 0.1) == [0, 5]  # at least two
    assert evenly_spaced(50, 0.1) == [0, 10, 20, 30, 40] and evenly_spaced(7, 1.0) == list(range(7))
    root, data, _ = small_run
    names = load_images(cfg_of(root, data, "num_images=4"), fraction=0.5).names
    every = load_images(cfg_of(root, data, "num_images=4")).names
    assert names == [every[0], every[2]]


@pytest.mark.parametrize("extra, message", [
    (["image_fraction=0"], "image_fraction must be null or a number in (0, 1], got 0"),
    (["image_fraction=0.5", "images=gaussian"], "expected image_fraction=null with images=gaussian"),
    (["images=run", "ckpt=random"], "random has no file; expected run folders of make train"),
])
def test_bad_image_fraction_or_run_images_is_one_sentence(small_run, extra, message):
    root, data, run_dir = small_run
    out = root / "bad-run-images"
    with pytest.raises(SystemExit) as exit_info:
        main([*SMALL, f"roots.default={data}", f"runs_root={root / 'runs'}", f"ckpt={run_dir}", f"out={out}", *extra])
    err = str(exit_info.value.code)
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_images_run_without_a_run_config_names_the_folder(small_run):
    root, data, run_dir = small_run  # a backbone saved by hand: its folder has no config.yaml
    with pytest.raises(SystemExit) as exit_info:
        main([*SMALL, "images=run", f"ckpt={run_dir}", "random_floor=false", f"out={root / 'no-config'}"])
    assert f"lies in {run_dir}, which has no config.yaml" in str(exit_info.value.code)
