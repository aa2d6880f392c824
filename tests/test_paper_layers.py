"""Seed 003's per-layer condition numbers in make paper (issue 50): the ``layers`` report item from results laid
out by hand, Figs. 1b, 3 and 5 of the real experiment files, and their conditioning evaluations at each scale."""
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from paper.experiment import ExperimentError, load_experiment
from paper.jobs import plan, write_marker
from paper.report import write_report

KINDS = ("in", "attn", "attn+skip", "mlp", "mlp+skip")
HAND = {
    "title": "by hand", "source": "a test",
    "runs": {"entry": "train", "axes": {"model": {"skip": ["model=skip"], "mlp-skip": ["model=mlp-skip"]},
                                        "data": {"a": ["data=default"], "b": {"full": ["data=cifar10"]}}},
             "scales": {"demo": []}},
    "evaluations": {"cond": {"entry": "conditioning", "result": "*/conditioning.json", "metric": "x",
                             "scales": {"demo": ["measures=[embeddings]", "layers=all"]}}},
    "report": [{"kind": "layers", "title": "fig 1b", "evaluation": "cond", "metric": "embeddings_log_kappa",
                "curves": {"SA": "attn", "SA + skip": "attn+skip"}, "select": {"model": ["skip"]}, "panels": ["data"],
                "reference": {"values": {"SA": 6.0, "b: SA + skip": 3.0}}},
               {"kind": "layers", "title": "all", "evaluation": "cond", "metric": "embeddings_log_kappa",
                "curves": {"SA": "attn"}}],
}


def per_block(blocks, value):
    """make conditioning's embeddings_log_kappa: {block: {kind: ln kappa}}, ``value(block, kind)``."""
    return {str(b): {k: value(b, k) for k in KINDS} for b in range(blocks)}


def mark_done(base: Path, job, result) -> None:
    folder = base / Path(job.result).parent.parent / "backbone"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conditioning.json").write_text(json.dumps(result))
    write_marker(base, job, "done", seconds=1.0)


def planned(tmp_path, experiment_file):
    exps = tmp_path / "exps"
    exps.mkdir(exist_ok=True)
    (exps / "hand.yaml").write_text(yaml.safe_dump(experiment_file, sort_keys=False))
    experiment = load_experiment("hand", exps)
    jobs, skipped = plan(experiment, "demo", tmp_path / "demo")
    return experiment, tmp_path / "demo", jobs, skipped


def test_a_layers_item_is_a_curve_per_block_with_the_mean_beside_the_papers_level(tmp_path):
    experiment, base, jobs, skipped = planned(tmp_path, HAND)
    by = {j.name: j for j in jobs}
    mark_done(base, by["cond-skip-a-last"], {"embeddings_log_kappa": per_block(3, lambda b, k: b + (2.0 if k == "attn" else 1.0))})
    mark_done(base, by["cond-mlp-skip-a-last"], {"embeddings_log_kappa": {
        "0": {k: 1.0 for k in KINDS}, "1": {**{k: 2.0 for k in KINDS}, "attn": "inf"}, "2": {k: 0.5 for k in KINDS}}})
    path = write_report(base, experiment, "demo", jobs, skipped, "make paper EXP=hand")
    text = path.read_text()
    fig1b = text.split("## fig 1b")[1].split("## all")[0]
    assert "| data | mean | L0 | L1 | L2 |" in fig1b
    assert "| a: SA | 3.00 (6.00, -3.00) | 2.00 | 3.00 | 4.00 |" in fig1b  # mean of 2, 3, 4 against the text's 6
    assert "| a: SA + skip | 2.00 | 1.00 | 2.00 | 3.00 |" in fig1b  # no paper level for panel a
    assert "| b:" not in fig1b and "mlp-skip" not in fig1b  # b is not run at this scale; select keeps the skip model
    everything = text.split("## all")[1].split("## Jobs")[0]
    assert "| mlp-skip/a: SA | ∞ | 1.00 | ∞ | 0.50 |" in everything  # a rank-deficient block: ∞, and so the mean
    assert "| skip/a: SA | 3.00 | 2.00 | 3.00 | 4.00 |" in everything
    for i in (0, 1):
        assert (path.parent / "figures" / f"{i:02d}-cond-layers.png").stat().st_size > 5_000


@pytest.mark.parametrize("change, message", [
    ({"select": {"model": ["nope"]}}, "select maps an axis to a list of its values; model: ['nope']"),
    ({"select": {"size": ["a"]}}, "select maps an axis to a list of its values; size"),
    ({"curves": ["attn"]}, "curves are a mapping {label: key of each block's entry}"),
    ({"evaluation": "runs"}, "a layers item reads an evaluation's {block: ...} mapping"),
])
def test_a_bad_layers_item_is_one_sentence(tmp_path, change, message):
    bad = {**HAND, "report": [{**HAND["report"][0], **change}]}
    with pytest.raises(ExperimentError, match=r"report\[0\]") as err:
        planned(tmp_path, bad)
    assert message in str(err.value) and len(str(err.value).splitlines()) == 1


FIGURES = {  # experiment: (the title's start of each new item, the rows of its table at demo scale)
    "skip-ablation": ("Fig. 1b", ["cifar10: (1) SA", "cifar10: (3)+(4) MLP + skip"]),
    "graying": ("Fig. 3", ["linear: SA", "softmax: SA + skip", "linear: X_in"]),
    "graying-eps": ("Fig. 5", ["none: SAB output", "dct-0.85: SAB output"]),
}


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_seed003_per_layer_figures_render_from_fake_conditioning_results(tmp_path, name):
    experiment = load_experiment(name)
    base = tmp_path / "demo"
    jobs, skipped = plan(experiment, "demo", base)
    for job in jobs:
        if job.evaluation == "conditioning":  # 12 blocks, the attention without a skip worse
            mark_done(base, job, {"embeddings_log_kappa": per_block(12, lambda b, k: 6.0 if k == "attn" else 3.0)})
    text = write_report(base, experiment, "demo", jobs, skipped, f"make paper EXP={name}").read_text()
    title, rows = FIGURES[name]
    section = next(s for s in text.split("\n## ")[1:] if s.startswith(title))
    assert "| mean | L0 |" in section and "| L11 |" in section
    for row in rows:
        assert f"| {row} | " in section, row
    if name == "skip-ablation":
        assert "| cifar10: (1) SA | 6.00 (6.00, +0.00) |" in section
    if name == "graying-eps":
        assert "| none: SAB output | 3.00 (6.74, -3.74) |" in section  # Table 3's kappa_out: the mean of Fig. 5
        assert "svd-0.5" not in section  # Fig. 5: with and without DCT only


@pytest.mark.parametrize("name", sorted(FIGURES))
@pytest.mark.parametrize("scale", ["demo", "quick", "full"])
def test_the_conditioning_evaluation_reads_every_block_of_each_run_on_a_tenth_of_its_val_split(tmp_path, name, scale):
    """One evaluation per training run, after it, on its own backbone; 10% of its val split at demo and full scale
    (seeds/003 Fig. 3), the quick scale's 4 images; and the runs' hashes are those of the file without evaluations
    (an evaluation is no run: adding one moves no run folder)."""
    experiment = load_experiment(name)
    jobs, _ = plan(experiment, scale, tmp_path)
    runs = {j.name: j for j in jobs if j.kind == "run"}
    evals = [j for j in jobs if j.evaluation == "conditioning"]
    assert len(evals) == len(runs) and {e.depends for e in evals} == {(r,) for r in runs}
    for job in evals:
        words = list(job.overrides)
        assert {"measures=[embeddings]", "layers=all", "images=run"} <= set(words)
        assert next(w for w in words if w.startswith("ckpt=")).startswith(f"ckpt={tmp_path.resolve() / runs[job.depends[0]].run_dir}/")
        fractions = [w for w in words if w.startswith("image_fraction=")]
        assert fractions[-1] == ("image_fraction=null" if scale == "quick" else "image_fraction=0.1")
    bare, _ = plan(replace(experiment, evaluations={}, report=[]), scale, tmp_path)
    assert [(j.name, j.config_hash, j.run_dir) for j in bare] == [(j.name, j.config_hash, j.run_dir) for j in runs.values()]
