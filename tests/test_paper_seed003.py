"""Seed 003's Fig. 4 at its ViT-Tiny (graying-fig4), Table 4's ViT-S rows (graying-families) and Table 1's
training days beside each ViT-B run's own (graying-eps): the cells planned at each scale and the report items
drawn from a hand-laid results tree."""
import json

import pytest

from paper.experiment import load_experiment
from paper.jobs import plan, write_marker
from paper.report import write_report
from skipless.config import load_config

EPS = ["none", "svd-0.9", "svd-0.8", "svd-0.7", "svd-0.6", "svd-0.5",
       "dct-0.97", "dct-0.95", "dct-0.93", "dct-0.9", "dct-0.85"]


def _runs(name, scale, base):
    jobs, _ = plan(load_experiment(name), scale, base)
    return {tuple(j.labels.values()): j for j in jobs if j.kind == "run"}


def _cfg(job):
    return load_config(job.entry, [o for o in job.overrides if not o.startswith(("run.", "out=", "ckpt="))])


def test_figure4_trains_vit_tiny_on_tiny_imagenet_at_each_eps_measuring_itself(tmp_path):
    runs = _runs("graying-fig4", "full", tmp_path)
    assert [label for (label,) in runs] == EPS
    for (label,), job in runs.items():
        cfg = _cfg(job)
        method, _, eps = label.partition("-")
        assert (cfg.model.arch, cfg.model.residual, cfg.data.name, cfg.aug.image_size, cfg.model.patch_size) == (
            "vit_tiny", "skip", "tiny-imagenet", 64, 8)
        assert (cfg.model.token_graying.method, cfg.model.token_graying.eps) == (method, float(eps) if eps else None)
        assert (cfg.diagnostics.every_n_epochs, cfg.diagnostics.layers, cfg.diagnostics.jacobian_images) == (5, "all", 0)


@pytest.mark.parametrize("scale", ["demo", "quick"])
def test_figure4_at_the_small_scales_is_graying_eps_own_runs(tmp_path, scale):
    """The same demo cells, so the same configs and run folders: graying-eps' runs serve both reports."""
    fig4, eps = _runs("graying-fig4", scale, tmp_path), _runs("graying-eps", scale, tmp_path)
    assert list(fig4) == list(eps) and len(fig4) == 11
    assert [j.config_hash for j in fig4.values()] == [j.config_hash for j in eps.values()]
    assert [j.run_dir for j in fig4.values()] == [j.run_dir for j in eps.values()]


@pytest.mark.parametrize("scale,arch", [("full", "vit_small"), ("quick", "vit_tiny"), ("demo", "vit_tiny")])
def test_table4s_vit_s_rows_are_the_suites_vit_with_skips_without_and_with_dct(tmp_path, scale, arch):
    runs = _runs("graying-families", scale, tmp_path)
    for graying, eps in (("none", None), ("dct", 0.95)):
        cfg = _cfg(runs[("vit-s", graying)])
        assert (cfg.model.family, cfg.model.arch, cfg.model.residual, cfg.model.drop_path_rate) == ("vit", arch, "skip", 0.0)
        assert (cfg.model.token_graying.method, cfg.model.token_graying.eps) == (graying, eps)
        assert cfg.data.name == ("imagenet" if scale == "full" else "default")
    assert len(runs) == 8


def _done_run(base, job, summary, diagnostics=None):
    folder = base / job.run_dir
    folder.mkdir(parents=True, exist_ok=True)
    for output in job.outputs:  # backbone.pt and the like: a done run's marker needs them
        (base / output).parent.mkdir(parents=True, exist_ok=True)
        (base / output).write_bytes(b"")
    (folder / "summary.json").write_text(json.dumps(summary))
    if diagnostics is not None:
        (folder / "diagnostics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in diagnostics))
    write_marker(base, job, "done", seconds=1.0)


def test_figure4_and_table1_are_drawn_from_the_runs_files(tmp_path):
    """graying-eps' demo runs (graying-fig4's too): Table 1's days beside the paper's, the hardware, Fig. 4's curve."""
    base = tmp_path / "demo"
    eps = load_experiment("graying-eps")
    jobs, skipped = plan(eps, "demo", base)
    days = {"none": 0.5, "svd-0.9": 2.5, "dct-0.95": 0.625}
    for job in jobs:
        if job.kind == "run":
            label = job.labels["graying"]
            wall = {"seconds": 1.0, "hours": 12.0, "days": days.get(label, 0.25), "hardware": "8 x NVIDIA H200"}
            _done_run(base, job, {"status": "finished", "epochs_done": 10, "val": {"top1": 50.0}, "wall": wall},
                      [{"epoch": e, "embeddings_mean_log_kappa": {"attn+skip": 4.0 + e / 8 + (label == "none")}}
                       for e in (0, 1, 2)])
    text = write_report(base, eps, "demo", jobs, skipped, "make paper EXP=graying-eps").read_text()
    table1 = text.split("## Table 1: training time")[1].split("## ")[0].split("The paper's table")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in table1.splitlines() if line.startswith("| ")}
    assert "0.5 (0.723, -0.2)" in rows["none"] and "2.5 (4.55, -2.1)" in rows["svd-0.9"]
    assert "0.625 (0.732, -0.1)" in rows["dct-0.95"] and "| 0.25 |" in rows["svd-0.5"] + " "
    hardware = text.split("## Table 1's runs")[1].split("## ")[0]
    assert hardware.count("8 x NVIDIA H200") == 11 and "12.0" in hardware

    fig4 = load_experiment("graying-fig4")
    jobs, skipped = plan(fig4, "demo", base)
    text = write_report(base, fig4, "demo", jobs, skipped, "make paper EXP=graying-fig4").read_text()
    curve = text.split("## Fig. 4")[1].split("## ")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in curve.splitlines() if line.startswith("| ")}
    assert rows["none"].split(" | ")[1:] == ["5", "5.12", "5.25 |"] and rows["dct-0.85"].endswith("| 4.25 |")
    assert (base / "graying-fig4" / "figures").is_dir()
