"""``make paper EXP=table7`` (seed 000, App. A.8, Table 7; issue 49 item 6): the language model's runs and their
zero-shot scores planned at each scale, the dry run's steps and tokens, the report's metrics tables (a column per
metric, the best lr per model) and a diverged run's step, and the pre-flight's refusal."""
from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from lm_fixtures import TINY
from paper.__main__ import run
from paper.gpu_hours import estimate
from paper.experiment import ExperimentError, load_experiment
from paper.jobs import REPO, plan
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


def test_the_preflight_runs_each_language_model_two_steps_in_one_process_and_scores_its_backbone(tmp_path):
    out = run(load_config("paper", ["exp=table7", "scale=full", "preflight.enabled=true", "dry_run=true",
                                    f"preflight.root={tmp_path / 'pf'}"]))
    checks = out["checks"]
    assert not (tmp_path / "pf").exists() and len(checks) == 24  # a dry run writes nothing
    for run_check, score in zip(checks[::2], checks[1::2]):
        assert (run_check.job.entry, score.job.entry) == ("lm", "zeroshot") and run_check.batch == 2
        words = run_check.command[run_check.command.index(str(run_check.meter)) + 1:]
        assert run_check.command[2] == "lm" and {"train.max_steps=2", "train.batch_size_per_device=2",
                                                 "train.devices=1", "train.global_batch=null"} <= set(words)
        assert not any(w.startswith(("train.limit_train_batches", "train.export_epochs")) for w in words)
        cfg = load_config("lm", words)
        assert (cfg.model.arch, cfg.train.steps, cfg.data.name, cfg.data.shards) == ("lm_110m", 20000, "c4", 32)
        assert f"ckpt={run_check.run_dir / 'backbone.pt'}" in score.command and "dataset=lm-val" in score.command


def test_the_language_models_estimate_is_steps_times_sequences_times_its_flops():
    """3 x the forward's matrix products per sequence, counted by hand: per block the 4 d^2 + 3 d h weights and the
    T x T scores and mixing, and the tied head."""
    settings = OmegaConf.to_container(load_config("paper").preflight, resolve=True)
    cfg = load_config("lm", ["data=c4", "recipe=paper", "model=skipless"])
    got = estimate("lm", cfg, settings, vocab=50_257)
    d, blocks, h, vocab, t = 768, 12, 2048, 50_257, 2048
    forward = blocks * (2 * t * (4 * d * d + 3 * d * h) + 2 * 2 * t * t * d) + 2 * t * d * vocab
    assert got.flop_per_image == 3 * forward and (got.unit, got.passes) == ("sequence", "steps")
    assert (got.epochs, got.train_images, got.mfu) == (20_000, 128, settings["mfu"]["lm"])
    assert got.hours == pytest.approx(20_000 * 128 * 3 * forward / (989.5e12 * got.mfu) / 3600)
    assert got.counts_text() == "20,000 steps x 128 sequences"
    assert estimate("lm", cfg, settings).startswith("no estimate: the run's tokenizer")


@pytest.mark.slow
def test_a_tiny_language_model_experiment_preflights_end_to_end(tmp_path, capsys):
    """A tiny LM on the fake C4 (its own BPE trained there) and its zero-shot scores on the fake tasks."""
    import yaml

    exps = tmp_path / "exps"
    exps.mkdir()
    (exps / "lmtiny.yaml").write_text(yaml.safe_dump({
        "title": "tiny lm", "source": "a test",
        "runs": {"entry": "lm", "axes": {"model": {"skip": ["model=skip"], "skipless+init": ["model=skipless"]}},
                 "scales": {"full": TINY}},
        "evaluations": {"zeroshot": {"entry": "zeroshot", "scales": {"full": ["dataset=lm-val", "device=cpu", "too_long=skip"]},
                                     "result": "*/zeroshot-*.json", "metric": "mean"}}}))
    out = run(load_config("paper", ["exp=lmtiny", f"experiments={exps}", "scale=full", "preflight.enabled=true",
                                    f"preflight.root={tmp_path / 'pf'}"]))
    said = capsys.readouterr().out
    assert set(out["state"].values()) == {"done"} and len(out["state"]) == 4, said
    assert "fake C4 (2 train shards" in said and "fake zero-shot tasks (8 items each" in said
    train = out["checks"][0]
    assert [s["images"] for s in train.steps] == [2, 2] and train.estimate.unit == "sequence"
    assert train.estimate.epochs == 6 and train.estimate.train_images == 4  # TINY's steps and sequences per step
    folder = next((tmp_path / "pf").iterdir())
    assert not list(folder.rglob("*.pt")) and not list(folder.rglob("*.ckpt"))
    table = (folder / "preflight.md").read_text()
    assert "| lm-skip | passed |" in table and "| zeroshot-skip-last | passed |" in table and "6 x 4 sequences" in table
    assert "its MFU (30%) is an assumption" in table


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


def test_the_history_gives_the_steps_the_initialised_model_needs_to_reach_the_baselines_last_loss(tmp_path):
    """Seed 000's "1x steps": per lr, the first validation step at which skipless+init's val/loss is at most skip's
    last one, over skip's steps; a run that never gets there, and a panel without its baseline, say so."""
    from torch.utils.tensorboard import SummaryWriter

    from paper.report_figures import first_step_at_most, history_section

    assert first_step_at_most([(0, 9.0), (10, float("nan")), (20, 4.0), (30, 3.0)], 4.0) == 20
    assert first_step_at_most([(0, 9.0)], 4.0) is None
    experiment = load_experiment("table7")
    item = next(i for i in experiment.report if i.get("reach"))
    curves = {("skip", "1e-3"): [8.0, 6.0, 5.0, 4.5], ("skipless+init", "1e-3"): [8.0, 5.5, 4.4, 4.0],
              ("skip", "3e-3"): [8.0, 6.0, 5.0, 4.0], ("skipless+init", "3e-3"): [8.0, 7.0, 6.0, 5.0],
              ("skipless+init", "5e-4"): [8.0, 7.0, 6.0, 5.0]}
    records = []
    for (model, lr), values in curves.items():
        run_dir = tmp_path / f"{model}-{lr}"
        with SummaryWriter(str(run_dir / "tb")) as writer:
            for k, value in enumerate(values):
                writer.add_scalar("val/loss", value, 40 * k)
                writer.add_scalar("val/perplexity", 2.0 ** value, 40 * k)
        records.append({"evaluation": "runs", "state": "done", "file": run_dir / "summary.json", "run_dir": run_dir,
                        "labels": {"model": model, "lr": lr}, "job": f"lm-{model}-{lr}", "collapsed": None})
    diverged = tmp_path / "plain"  # a run that stopped: its curve up to the stop, its label says where
    with SummaryWriter(str(diverged / "tb")) as writer:
        writer.add_scalar("val/loss", 8.0, 0)
        writer.add_scalar("val/loss", 7.5, 40)
    records.append({"evaluation": "runs", "state": "failed", "run_dir": diverged, "collapsed": None,
                    "error": "error: training diverged at step 57 (loss nan) for model skipless-plain",
                    "labels": {"model": "skipless-plain", "lr": "1e-3"}, "job": "lm-plain"})
    records.append({"evaluation": "runs", "state": "failed", "run_dir": tmp_path / "never", "collapsed": None,
                    "error": "error: x", "labels": {"model": "skipless-plain", "lr": "3e-3"}, "job": "lm-never"})
    (tmp_path / "table7").mkdir()
    text = history_section(item, records, experiment, tmp_path, 2)
    assert "The steps skipless+init needs to reach skip's last val/loss (the dotted line):" in text
    assert "| 1e-3 | 4.5 | 120 | 80 | 0.67x | holds (1x steps or fewer) |" in text
    assert "| 3e-3 | 4 | 120 | - | - | not reached by step 120 |" in text
    assert "| 5e-4 | - | - | - | - | no skip run with a finite last val/loss |" in text
    assert "| skipless-plain/1e-3 (diverged at step 57) | 7.5 |" in text and "skipless-plain/3e-3" not in text
    assert (tmp_path / "table7" / "figures" / "02-history.png").stat().st_size > 0


def test_a_reach_that_names_no_axis_value_or_tag_of_its_item_is_refused(tmp_path):
    import yaml

    node = yaml.safe_load((REPO / "configs" / "experiments" / "table7.yaml").read_text())
    item = next(i for i in node["report"] if i.get("reach"))
    for bad, message in (({"line": "skipless"}, r"reach.line: 'skipless' is no value of the axis model"),
                         ({"tag": "train/loss"}, r"reach.tag: 'train/loss' is not one of the item's tags"),
                         ({"axis": "depth"}, r"reach.axis: unknown runs axis 'depth'")):
        item["reach"] = {"axis": "model", "line": "skipless+init", "baseline": "skip", "tag": "val/loss", **bad}
        (tmp_path / "t7.yaml").write_text(yaml.safe_dump(node))
        with pytest.raises(ExperimentError, match=message):
            load_experiment("t7", tmp_path)
