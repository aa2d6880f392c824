"""``make paper EXP=table7`` (seed 000, App. A.8, Table 7; issue 49 item 6): the language model's runs and their
zero-shot scores planned at each scale, the dry run's steps and tokens, the report's metrics tables (a column per
metric, the best lr per model) and a diverged run's step, and the pre-flight's refusal."""
from __future__ import annotations

import pytest

from paper.__main__ import run
from paper.experiment import ExperimentError, load_experiment
from paper.jobs import plan
from paper.report_cells import NOT_AT_SCALE, cell_text, metrics_table
from skipless.config import ConfigError, load_config
from skipless.models.causal_lm import LM_ARCHS
from skipless.devices.world import global_batch

MODELS = {"skip": ("skip", "fla"), "skipless-plain": ("skipless", "fla"), "skipless+init": ("skipless", "cutskip")}


def _cfg(job):
    return load_config(job.entry, [o for o in job.overrides if not o.startswith(("run.", "out=", "ckpt="))])


def test_full_scale_is_twelve_c4_runs_of_20000_steps_of_262144_tokens_each_scored_on_the_real_tasks(tmp_path):
    jobs, skipped = plan(load_experiment("table7"), "full", tmp_path)
    runs, evals = [j for j in jobs if j.kind == "run"], [j for j in jobs if j.kind == "eval"]
    assert len(runs) == 12 and len(evals) == 12 and len(skipped) == 6  # the demo's two lrs x 3 models
    cells = set()
    for job in runs:
        cfg = _cfg(job)
        context = int(cfg.model.context or LM_ARCHS[cfg.model.arch]["context"])
        assert (cfg.data.name, cfg.model.arch, cfg.train.steps, context) == ("c4", "lm_110m", 20000, 2048)
        assert global_batch(cfg, 8) * context == global_batch(cfg, 1) * context == 262_144
        assert (cfg.model.residual, cfg.model.init) == MODELS[job.labels["model"]]
        assert cfg.optim.name == "adamw" and cfg.optim.lr == float(job.labels["lr"])
        cells.add((job.labels["model"], job.labels["lr"]))
    assert cells == {(m, lr) for m in MODELS for lr in ("1e-4", "3e-4", "5e-4", "7e-4")}
    assert all(_cfg(j).dataset == "lm-val" and j.entry == "zeroshot" for j in evals)


def test_demo_is_six_bible_runs_three_models_at_two_lrs_scored_on_the_demo_tasks(tmp_path):
    jobs, _ = plan(load_experiment("table7"), "demo", tmp_path)
    runs, evals = [j for j in jobs if j.kind == "run"], [j for j in jobs if j.kind == "eval"]
    assert len(runs) == 6 and len(evals) == 6
    assert {(j.labels["model"], j.labels["lr"]) for j in runs} == {(m, lr) for m in MODELS for lr in ("1e-3", "3e-3")}
    for job in runs:
        cfg = _cfg(job)
        assert (cfg.data.name, cfg.model.arch, cfg.train.steps) == ("default", "lm_demo", 160)
        assert cfg.optim.lr == float(job.labels["lr"]) and not any("export_epochs" in o for o in job.overrides)
    assert all(_cfg(j).dataset == "demo" for j in evals)


def test_the_dry_run_shows_the_steps_tokens_and_the_accumulation_on_8_gpus(tmp_path):
    said = []
    result = run(load_config("paper", ["exp=table7", "scale=full", "dry_run=true", "cluster=local",
                                       f"root={tmp_path}"]), say=said.append)
    assert len([j for j in result["jobs"] if j.kind == "run"]) == 12
    batch = [line for line in said if "global batch" in line]
    assert len(batch) == 12 and all(
        "128 sequences (16/device x 1 device x 8 accumulation steps) x 2,048 tokens = 262,144 tokens per step, "
        "20,000 steps on this machine" in line and "(16/device x 8 devices, no accumulation)" in line for line in batch)


def test_preflight_refuses_the_language_model_in_one_sentence():
    with pytest.raises(ConfigError, match=r"PREFLIGHT=1 does not cover the entries lm, zeroshot of table7"):
        run(load_config("paper", ["exp=table7", "scale=full", "preflight.enabled=true"]))


def test_an_lm_experiment_with_epochs_or_a_bad_best_is_refused(tmp_path):
    import yaml

    base = {"title": "t", "source": "s", "runs": {"entry": "lm", "axes": {"model": {"skip": ["model=skip"]}}}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({**base, "runs": {**base["runs"], "epochs": {"demo": [1]}}}))
    with pytest.raises(ExperimentError, match="counts optimizer steps, not epochs"):
        load_experiment("a", tmp_path)
    item = {"kind": "table", "evaluation": "runs", "rows": ["model"], "metrics": {"loss": "val.loss"}, "best": "lr"}
    (tmp_path / "b.yaml").write_text(yaml.safe_dump({**base, "report": [item]}))
    with pytest.raises(ExperimentError, match=r"report\[0\].best: best names one of the table's rows axes"):
        load_experiment("b", tmp_path)


def _record(model, lr, state="done", result=None, error=None):
    return {"evaluation": "zeroshot", "labels": {"model": model, "lr": lr, "epoch": "last"}, "state": state,
            "result": result or {}, "error": error, "collapsed": None, "job": f"zeroshot-{model}-{lr}-last"}


def test_the_metrics_table_has_a_column_per_metric_and_the_best_lr_of_each_model():
    experiment = load_experiment("table7")
    item = next(i for i in experiment.report if i["evaluation"] == "zeroshot")
    scores = lambda mean: {"mean": mean, "tasks": {t: {"value": mean} for t in
                                                   ("piqa", "hellaswag", "winogrande", "arc_easy", "arc_challenge")}}
    records = [_record("skip", "1e-3", result=scores(0.41)), _record("skip", "3e-3", result=scores(0.45)),
               _record("skipless-plain", "1e-3", "blocked"), _record("skipless-plain", "3e-3", "blocked"),
               _record("skipless+init", "1e-3", result=scores(0.44)), _record("skipless+init", "3e-3", result=scores(0.4)),
               _record("skip", "1e-4", NOT_AT_SCALE)]
    text = metrics_table(item, records, experiment)
    assert "| model/lr | PIQA acc | HellaSwag acc_norm | WinoGrande acc | ARC-e acc | ARC-c acc_norm | mean |" in text
    assert "| skip/3e-3 | 0.45 | 0.45 | 0.45 | 0.45 | 0.45 | 0.45 |" in text and "skip/1e-4" not in text
    assert "| skipless-plain/1e-3 | blocked |" in text
    best = text.split("The best lr of each model, by mean (highest):")[1]
    assert "| skip (lr 3e-3) | 0.45" in best and "| skipless+init (lr 1e-3) | 0.44" in best
    assert "| skipless-plain (lr: none finished) | - |" in best


def test_a_diverged_run_reads_the_step_it_stopped_at():
    error = ("error: training diverged at step 37 (loss nan) for model skipless-plain (residual skipless, init fla) "
             "at peak lr 0.0003; lower model.lr.adamw")
    assert cell_text({"state": "failed", "error": error}, "val.loss", None) == "diverged at step 37"
    assert cell_text({"state": "failed", "error": "error: something else"}, "val.loss", None) == "failed"
