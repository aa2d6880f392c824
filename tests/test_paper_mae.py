"""The MAE experiments of seed 002 (``configs/experiments/mae-*.yaml``): at full scale the seed's matrix on
ImageNet-100 / ImageNet-1k with its recipe and probe, at demo scale a few cells of the MAE CPU demo; one
training per config across them; their reference numbers are the docs' (docs/paper.md, docs/evaluators.md)."""
import re
from pathlib import Path

import pytest

from paper.__main__ import run
from paper.experiment import load_experiment
from paper.jobs import plan
from skipless.config import load_config

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = (DOCS / "paper.md", DOCS / "evaluators.md")  # the papers' numbers beside the commands
MAE = ("mae-table2", "mae-table3", "mae-table4", "mae-figure3", "mae-figure5", "mae-zero-init", "mae-figure2",
       "mae-instability")


def _cfg(job):
    return load_config(job.entry, [o for o in job.overrides if not o.startswith(("run.", "out=", "ckpt="))])


def test_mae_table2_full_dry_run_lists_the_seeds_jobs_with_the_imagenet100_recipe(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("IMAGENET100_ROOT", "/data/in100")
    result = run(load_config("paper", ["exp=mae-table2", "scale=full", "dry_run=true", "cluster=local",
                                       f"root={tmp_path / 'paper'}"]))
    out = capsys.readouterr().out
    jobs = {j.name: j for j in result["jobs"]}
    runs = [j for j in jobs.values() if j.kind == "run"]
    assert len(runs) == 14 and not result["skipped"] and out.count("[to run]") == len(jobs) == 14 * 3
    assert not (tmp_path / "paper").exists()
    b06, s10, base = jobs["pretrain-vit_base-0.6"], jobs["pretrain-vit_small-1.0"], jobs["pretrain-vit_base-mae"]
    for word in ("ssl=mae", "model=decayed", "model.alpha_min=0.6", "model.arch=vit_base", "data=imagenet",
                 "data.root=/data/in100/train"):
        assert word in b06.overrides and word in b06.shown()
    assert "model.arch=vit_small" in s10.overrides and "model.alpha_min=1.0" in s10.overrides
    assert {"model=skip", "mae.unet_skips=false"} <= set(base.overrides)
    cfg = _cfg(b06)
    assert (cfg.ssl, cfg.choices.recipe, cfg.model.arch, cfg.model.residual, cfg.model.alpha_min) == (
        "mae", "paper", "vit_base", "decayed", 0.6)
    assert (cfg.train.epochs, cfg.optim.lr, cfg.optim.warmup_epochs, cfg.mae.unet_skips) == (800, 1.5e-4, 40, True)
    assert {100, 200, 400, 800} <= set(cfg.train.export_epochs)  # Figure 5's checkpoints, from paper.exports
    base_cfg = _cfg(base)
    assert (base_cfg.model.residual, base_cfg.mae.unet_skips) == ("skip", False)
    probe = jobs["linear-vit_base-0.6-800"]
    assert {"linear-preset=zhang", "dataset=imagenet", "root=/data/in100"} <= set(probe.overrides)
    assert f"ckpt={tmp_path.resolve() / 'paper' / 'full' / b06.run_dir}/backbone-epoch800.pt" in probe.overrides
    pcfg = _cfg(probe)
    assert (pcfg.choices["linear-preset"], list(pcfg.inputs), pcfg.epochs, pcfg.batch_size, list(pcfg.lrs)) == (
        "zhang", ["last_cls"], 200, 1024, [1.0e-2])
    assert "knn-vit_small-mae-800" in jobs


def test_mae_demo_is_a_few_cells_of_the_cpu_demo_on_the_default(tmp_path):
    jobs, skipped = plan(load_experiment("mae-table2"), "demo", tmp_path)
    runs = {j.name: _cfg(j) for j in jobs if j.kind == "run"}
    assert sorted(runs) == ["pretrain-vit_base-0.6", "pretrain-vit_base-1.0", "pretrain-vit_base-mae"]
    assert all((c.choices.recipe, c.data.name, c.model.arch) == ("demo", "default", "vit_tiny")
               for c in runs.values())
    evals = [j for j in jobs if j.kind == "eval"]
    assert {j.labels["epoch"] for j in evals} == {"20"} and len(evals) == 6
    assert all("dataset=default" in j.overrides for j in evals)
    assert len([c for c in skipped if c["kind"] == "run"]) == 11


def test_mae_experiments_share_one_training_per_config_at_every_scale(tmp_path):
    for scale in ("demo", "quick", "full"):
        exports = list(load_config("paper").exports[scale])
        runs = {}
        for name in MAE:
            jobs, _ = plan(load_experiment(name), scale, tmp_path / scale, exports=exports)
            for job in jobs:
                if job.kind == "run":
                    runs.setdefault(job.config_hash, set()).add((name, job.labels.get("arch", "vit_base"),
                                                                 job.labels.get("alpha_min", job.labels.get("config"))))
        shared = next(cells for cells in runs.values() if ("mae-table2", "vit_base", "0.6") in cells)
        expected = {"mae-table2", "mae-table3", "mae-figure3", "mae-figure5", "mae-zero-init", "mae-instability"}
        if scale != "full":  # ImageNet-1k is Table 4's own data at full scale; the demo has one dataset
            expected.add("mae-table4")
        assert {c[0] for c in shared} == expected, scale
        assert ("mae-table3", "vit_base", "both") in shared
    # full: 14 of Table 2, 5 more ablations, 3 without the zero-init, 4 on ImageNet-1k, 2 with the plain pixel loss,
    # 2 at the unstable alpha_min (Sec. 4.3)
    assert len(runs) == 30


def test_the_zero_init_ablation_and_figure2_train_what_the_seed_describes(tmp_path, monkeypatch):
    monkeypatch.delenv("IMAGENET100_ROOT", raising=False)
    jobs, _ = plan(load_experiment("mae-zero-init"), "full", tmp_path)
    runs = {j.name: _cfg(j) for j in jobs if j.kind == "run"}
    assert sorted(runs) == [f"pretrain-{a}-{z}" for a in ("0.5", "0.6", "0.7") for z in ("off", "on")]
    for name, cfg in runs.items():
        assert (cfg.model.residual, cfg.model.init, cfg.model.arch, cfg.choices.recipe) == (
            "decayed", "mae", "vit_base", "paper")
        assert cfg.model.decay.zero_init is name.endswith("-on") and cfg.diagnostics.signals_every_n_steps > 0
    history = next(r for r in load_experiment("mae-zero-init").report if r["kind"] == "history")
    assert "watch/signals/token_norm/block11" in history["tags"]
    jobs, _ = plan(load_experiment("mae-figure2"), "full", tmp_path)
    runs = {j.name: _cfg(j) for j in jobs if j.kind == "run"}
    assert sorted(runs) == ["pretrain-decayed", "pretrain-mae"]
    assert all(c.mae.norm_pix_loss is False and c.mae.reconstructions_every_n_epochs > 0 for c in runs.values())
    assert (runs["pretrain-mae"].model.residual, runs["pretrain-mae"].mae.unet_skips) == ("skip", False)
    assert runs["pretrain-decayed"].model.alpha_min == 0.6 and runs["pretrain-decayed"].data.name == "imagenet"
    # Sec. 4.2: the reconstructions are ImageNet-100's (the root's default when $IMAGENET100_ROOT is unset)
    assert all(str(c.data.root) == "data/imagenet100/train" for c in runs.values())


def test_the_instability_cells_are_table2s_vit_b_runs_and_two_lower_alpha_mins_with_their_norm_histories(tmp_path):
    """Sec. 4.3: alpha_min 0.4 and 0.3 beside Table 2's 0.6 and 0.5 (the same trainings), with the curves that
    show instability: the loss, the first and last blocks' gradient norms, the last block's token norm."""
    jobs, _ = plan(load_experiment("mae-instability"), "full", tmp_path)
    runs = {j.labels["alpha_min"]: j for j in jobs if j.kind == "run"}
    assert sorted(runs) == ["0.3", "0.4", "0.5", "0.6"]
    for alpha, job in runs.items():
        cfg = _cfg(job)
        assert (cfg.model.arch, cfg.model.residual, cfg.model.alpha_min, cfg.train.epochs) == (
            "vit_base", "decayed", float(alpha), 800) and cfg.diagnostics.signals_every_n_steps > 0
    table2, _ = plan(load_experiment("mae-table2"), "full", tmp_path)
    shared = {j.run_dir for j in table2 if j.kind == "run"} & {j.run_dir for j in runs.values()}
    assert shared == {runs["0.6"].run_dir, runs["0.5"].run_dir}
    tags = [t for item in load_experiment("mae-instability").report if item["kind"] == "history" for t in item["tags"]]
    assert tags == ["train/loss", "watch/signals/grad_norm/block0", "watch/signals/grad_norm/block11",
                    "watch/signals/token_norm/block11"]


def test_run_images_stand_side_by_side_with_the_newest_of_each_run(tmp_path):
    from paper.report_figures import images_section

    records = []
    for name in ("decayed", "mae"):
        run = tmp_path / "runs" / name
        (run / "reconstructions").mkdir(parents=True)
        for epoch in (0, 5, 20):
            (run / "reconstructions" / f"epoch{epoch:03d}.png").write_bytes(b"png")
        records.append({"evaluation": "runs", "state": "done", "labels": {"model": name}, "collapsed": None,
                        "file": run / "summary.json", "job": f"pretrain-{name}"})
    item = {"kind": "images", "evaluation": "runs", "images": "reconstructions/epoch*.png", "epoch": "last"}
    text = images_section(item, records, tmp_path / "mae-figure2")
    head, rule, row = text.strip().splitlines()
    assert head == "| decayed (epoch020) | mae (epoch020) |" and rule == "|---|---|"
    assert row == "| ![decayed](../runs/decayed/reconstructions/epoch020.png) | ![mae](../runs/mae/reconstructions/epoch020.png) |"
    assert images_section({**item, "epoch": "all"}, records, tmp_path / "x").count("![") == 6


def test_figure5_reads_several_checkpoints_and_the_runs_rank_files(tmp_path):
    experiment = load_experiment("mae-figure5")
    assert experiment.epochs["full"] == [100, 200, 300, 400, 500, 600, 700, 800]
    series = next(r for r in experiment.report if r["kind"] == "series")
    assert (series["file"], series["metric"]) == ("rank.jsonl", "rho")
    jobs, _ = plan(experiment, "demo", tmp_path, exports=list(load_config("paper").exports.demo))
    assert sorted({j.labels["epoch"] for j in jobs if j.kind == "eval"}, key=int) == ["2", "4", "20"]
    cfg = _cfg(next(j for j in jobs if j.kind == "run"))
    assert list(cfg.train.export_epochs) == [1, 2, 3, 4, 20] and cfg.diagnostics.rank_images > 0


def _readme_table(title_regex: str) -> dict[str, list]:
    """label -> the numbers of the first table of the docs' pages after a line matching ``title_regex`` ("-": None)."""
    lines = "\n".join(page.read_text() for page in PAGES).splitlines()
    start = next(i for i, l in enumerate(lines) if re.search(title_regex, l))
    rows, inside = {}, False
    for line in lines[start + 1:]:
        if line.startswith("|"):
            inside = True
            cells = [c.strip() for c in line.strip("|").split("|")]
            values = [float(c) if re.fullmatch(r"\d+\.\d", c) else None for c in cells[1:]]
            if any(v is not None for v in values):
                rows[cells[0].strip("`")] = values
        elif inside:
            break
    return rows


def test_mae_reference_numbers_are_the_readmes():
    table2 = _readme_table(r"^Seed 002, Table 2")
    ref = next(r for r in load_experiment("mae-table2").report if r["evaluation"] == "linear")["reference"]
    assert ref["columns"] == ["vit_base", "vit_small"]
    assert {k: list(v) for k, v in ref["rows"].items()} == {k: table2[k] for k in ref["rows"]} and len(ref["rows"]) == 6
    fig5 = load_experiment("mae-figure5").report[1]["reference"]["rows"]
    assert {k: v[0] for k, v in fig5.items()} == {k: table2[k][0] for k in fig5}
    table3 = _readme_table(r"^Seed 002, Table 3")
    ref = load_experiment("mae-table3").report[0]["reference"]["rows"]
    assert {k: v[0] for k, v in ref.items()} == {k: table3[k][-1] for k in ref} and len(ref) == 6
    table4 = _readme_table(r"^Seed 002, Table 4")
    ref = load_experiment("mae-table4").report[0]["reference"]
    assert ref["columns"] == ["zhang", "mae"]
    assert {k: list(v) for k, v in ref["rows"].items()} == {k: table4[k] for k in ref["rows"]} and len(ref["rows"]) == 4


@pytest.mark.slow
def test_mae_figure5_at_quick_scale_runs_end_to_end_and_reports_rank_and_probe_per_epoch(tmp_path):
    """SCALE=quick for real: two MAE trainings of 2 x 4 steps, the zhang probe of epochs 1 and 2 of each,
    the report with each run's rank.jsonl and the probe per epoch. 2-4 minutes on 2 CPU cores (3 min 40 s
    with the cores shared; each job is its own process), hence slow."""
    result = run(load_config("paper", ["exp=mae-figure5", "scale=quick", "cluster=local", f"root={tmp_path}"]))
    assert set(result["state"].values()) == {"done"} and len(result["state"]) == 6
    report = (tmp_path / "quick" / "mae-figure5" / "report.md").read_text()
    assert "| run | 1 | 2 |" in report and "| alpha_min | 1 | 2 |" in report and "Scale: **quick**" in report
    assert re.search(r"\| 0\.6 \| \d+\.\d \| \d+\.\d \|", report)  # the probe (one decimal) of both checkpoints
    assert (tmp_path / "quick" / "mae-figure5" / "figures" / "00-series.png").stat().st_size > 0


def test_mae_table4_probes_with_the_seeds_imagenet1k_protocol_at_full_scale_and_one_random_view_at_demo(tmp_path):
    """Table 1's 67.3 / 72.3 (App. 8.1): AdamW, 20 warm-up epochs, batch 5120, 3 random views + the centre crop;
    the demo draws between the centre crop and one random view; MAE's probe reads one centre crop at every scale."""
    full = {j.name: _cfg(j) for j in plan(load_experiment("mae-table4"), "full", tmp_path)[0] if j.entry == "linear"}
    zhang, mae = full["linear-0.6-800-zhang"], full["linear-0.6-800-mae"]
    assert (zhang.choices["linear-preset"], zhang.views, zhang.warmup_epochs, zhang.batch_size, zhang.lr_batch,
            zhang.epochs, zhang.optimizer.name, list(zhang.lrs), list(zhang.inputs)) == (
        "zhang-in1k", 4, 20, 5120, 5120, 200, "adamw", [1e-2], ["last_cls"])
    assert (mae.choices["linear-preset"], mae.views) == ("mae", 1)
    assert zhang.features.n_last_blocks == mae.features.n_last_blocks == 1 and zhang.dataset == "imagenet"
    for scale in ("demo", "quick"):
        cells = {j.name: _cfg(j) for j in plan(load_experiment("mae-table4"), scale, tmp_path)[0] if j.entry == "linear"}
        assert {c.views for n, c in cells.items() if n.endswith("-zhang")} == {2}
        assert {c.views for n, c in cells.items() if n.endswith("-mae")} == {1}
