"""bench/: the table writer, and the TokenCut solver benchmark on a tiny generated set (speed is never asserted)."""
import pytest
import torch

from bench.table import markdown_table
from bench.tokencut_solvers import bench_tokencut
from skipless.data.synthetic import generate
from skipless.models import create_vit, save_backbone


def test_one_table_writer_formats_every_section_alike():
    table = markdown_table([{"a": 1.23456, "b": None}, {"a": "x|y"}], ["a", "b"])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1.23 | - |", "| x\\|y | - |"]


def test_tokencut_solvers_agree_where_the_ncut_vector_is_unique(tmp_path):
    data = generate(tmp_path / "data", n_train=1, n_val=2, seed=3, workers=1)
    torch.manual_seed(0)
    save_backbone(tmp_path / "runs" / "tiny" / "backbone.pt", create_vit("vit_tiny", residual="skipless", depth=2))
    r = bench_tokencut(str(tmp_path / "runs" / "tiny"), root=str(data), n_images=2, device="cpu")
    assert r["images"] == 2 and r["blocks"] == 2 and r["graphs"] == 4
    assert set(r["median_seconds_per_image"]) == {"torch_float64", "torch_float32", "lapack_float64", "scipy_dense",
                                                  "scipy_subset"}
    assert r["identical_boxes_where_unique"]["lapack_float64"] in (None, pytest.approx(1.0))


def test_conditioning_bench_compares_the_matrix_free_kappa_with_the_dense_one():
    from bench.conditioning import dense_vs_free

    r = dense_vs_free()
    assert r["shape_of_J"][0] == 2 * 5 * 48
    assert r["largest_rel_gap"] < 1e-2 and r["smallest_rel_gap"] < 1e-2
    assert r["kappa_matrix_free"] == pytest.approx(r["kappa_dense"], rel=2e-2)


def test_supervised_step_bench_reports_a_consistent_row_and_the_ratios():
    from bench.pretrain_step import with_ratios
    from bench.train_step import bench_train_step

    tiny = ["model.arch=vit_tiny", "model.depth=1", "aug.image_size=32", "train.batch_size_per_device=4"]
    rows = with_ratios([bench_train_step(m, o, tiny, steps=2, warmup=1) for m in ("skip", "skipless")
                        for o in ("adamw", "soap")])
    by = {(r["model"], r["optim"]): r for r in rows}
    for r in rows:
        assert r["batch"] == 4 and r["image_px"] == 32 and r["step_s"] > 0
        assert r["images_per_s"] == pytest.approx(4 / r["step_s"])
        assert r["backbone_tflops_per_s"] > 0 and r["mfu"] is None  # no GPU peak on a CPU
    assert by[("skip", "soap")]["soap_over_adamw"] == pytest.approx(by[("skip", "soap")]["step_s"]
                                                                     / by[("skip", "adamw")]["step_s"])
    assert by[("skip", "adamw")]["skipless_over_skip"] == pytest.approx(by[("skipless", "adamw")]["step_s"]
                                                                        / by[("skip", "adamw")]["step_s"])
