"""The report of ``make paper`` from result files laid out by hand: tables beside the paper's numbers
(∞, lower bounds, cells not at this scale), the runs' own metrics, and TensorBoard histories."""
import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import yaml
from torch.utils.tensorboard import SummaryWriter

from paper.experiment import load_experiment
from paper.jobs import is_done, job_state, marker_status, plan, read_marker, write_marker
from paper.report import write_report
from paper.report_cells import number

EXPERIMENT = {
    "title": "by hand", "source": "a test",
    "runs": {"entry": "train", "axes": {"model": {"skip": ["model=skip"], "skipless": ["model=skipless"]}},
             "scales": {"demo": ["data=default"]}, "epochs": {"demo": [1]}},
    "evaluations": {"cond": {"entry": "conditioning", "result": "*/conditioning.json", "metric": "jacobian.value",
                             "axes": {"size": {"small": ["image_size=32"], "large": {"full": ["image_size=224"]}}}}},
    "report": [
        {"kind": "table", "title": "kappa", "evaluation": "cond", "rows": ["model"], "columns": ["size"],
         "reference": {"columns": ["small", "large"], "rows": {"skip": [127, 130], "skipless": [".inf", ".inf"]}}},
        {"kind": "table", "title": "top-1", "evaluation": "runs", "metric": "val.top1", "rows": ["model"],
         "reference": {"columns": ["val.top1"], "rows": {"skip": [80.3]}}},
        {"kind": "history", "title": "curves", "evaluation": "runs", "tags": ["train/loss"]},
    ],
}


def _done(base: Path, job, result: dict | None = None) -> None:
    for output in job.outputs:
        (base / output).parent.mkdir(parents=True, exist_ok=True)
        (base / output).write_bytes(b"x")
    if job.result:
        folder = base / Path(job.result).parent.parent / "backbone"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "conditioning.json").write_text(json.dumps(result))
    write_marker(base, job, "done", seconds=1.0)


def _by_hand(tmp_path):
    """EXPERIMENT planned at the demo scale under ``tmp_path``: (experiment, scale folder, jobs, skipped, jobs by name)."""
    exps = tmp_path / "exps"
    exps.mkdir()
    (exps / "hand.yaml").write_text(yaml.safe_dump(EXPERIMENT, sort_keys=False).replace("'.inf'", ".inf"))
    experiment = load_experiment("hand", exps)
    base = tmp_path / "demo"
    jobs, skipped = plan(experiment, "demo", base)
    return experiment, base, jobs, skipped, {j.name: j for j in jobs}


def test_the_report_puts_ours_beside_the_papers_and_says_why_a_cell_is_empty(tmp_path):
    experiment, base, jobs, skipped, by = _by_hand(tmp_path)
    for model, loss in (("skip", [2.0, 1.5]), ("skipless", [2.3, 2.2])):
        run = by[f"train-{model}"]
        _done(base, run)
        (base / run.run_dir / "summary.json").write_text(json.dumps({"val": {"top1": 75.4 if model == "skip" else 60.0}}))
        with SummaryWriter(str(base / run.run_dir / "tb")) as writer:
            for step, value in enumerate(loss):
                writer.add_scalar("train/loss", value, step)
    _done(base, by["cond-skip-1-small"], {"jacobian": {"value": 150.0, "converged": True, "reason": None}})
    _done(base, by["cond-skipless-1-small"], {"jacobian": {"value": "inf", "converged": True, "reason": "zero"}})
    path = write_report(base, experiment, "demo", jobs, skipped, "make paper EXP=hand")
    text = path.read_text()
    assert "| skip | 150.0 (127.0, +23.0) | not at this scale |" in text
    assert "| skipless | ∞ (∞) | not at this scale |" in text
    assert "| skip | 75.4 (80.3, -4.9) |" in text and "Epoch None" not in text and "| skipless | 60.0 |" in text
    assert "The paper's table:" in text and "| skip | 127.0 | 130.0 |" in text
    assert "| skip | 1.5 |" in text and "| skipless | 2.2 |" in text  # the last point of each history
    assert (path.parent / "figures" / "02-history.png").stat().st_size > 0


def test_a_cell_whose_training_collapsed_is_marked_with_the_reason_under_the_table(tmp_path):
    """A run's summary.json says ``collapsed`` (skipless/training/collapse.py): its own cells and the
    evaluations of its backbone read "collapsed" beside the number; a healthy run's do not."""
    experiment, base, jobs, skipped, by = _by_hand(tmp_path)
    reason = "validation loss 2.301 is at chance 2.302"
    for model, collapsed in (("skip", None), ("skipless", reason)):
        run = by[f"train-{model}"]
        _done(base, run)
        (base / run.run_dir / "summary.json").write_text(json.dumps({"val": {"top1": 10.0}, "collapsed": collapsed}))
        _done(base, by[f"cond-{model}-1-small"], {"jacobian": {"value": 150.0, "converged": True, "reason": None}})
    text = write_report(base, experiment, "demo", jobs, skipped, "make paper EXP=hand").read_text()
    assert "| skip | 150.0 (127.0, +23.0) | not at this scale |" in text
    assert "| skipless | 150.0 (∞) collapsed | not at this scale |" in text
    assert "| skip | 10.0 (80.3, -70.3) |" in text and "| skipless | 10.0 collapsed |" in text
    assert text.count(f"- collapsed: train-skipless: {reason}") == 3  # under both tables and the history
    assert "| skipless collapsed |" in text  # the history's run


def test_a_condition_number_that_did_not_converge_is_a_lower_bound(tmp_path):
    from paper.report_cells import cell_text as _cell_text

    record = {"state": "done", "result": {"jacobian": {"value": 3.2e5, "converged": False, "reason": None}}}
    assert _cell_text(record, "jacobian.value", None) == ">= 3.2e+05"
    assert number(1.0512) == "1.05" and number(56.3) == "56.3" and number(float("inf")) == "∞"


def test_an_evaluation_whose_result_is_a_figure_is_embedded_not_parsed(tmp_path):
    experiment = load_experiment("table2")
    base = tmp_path / "demo"
    jobs, skipped = plan(experiment, "demo", base)
    pca = next(j for j in jobs if j.evaluation == "pca")
    _done(base, next(j for j in jobs if j.name == pca.depends[0]))
    figure = base / Path(pca.result).parent.parent / "backbone-epoch4" / "pca-blocks.png"
    figure.parent.mkdir(parents=True)
    figure.write_bytes(b"\x89PNG\r\n\x1a\n")  # not UTF-8, not JSON
    write_marker(base, pca, "done", seconds=1.0)
    text = write_report(base, experiment, "demo", jobs, skipped, "make paper EXP=table2").read_text()
    assert str(figure.relative_to(base / "table2")) in text


def test_a_job_whose_process_is_gone_is_interrupted_not_running(tmp_path):
    experiment = load_experiment("table2")
    base = tmp_path / "demo"
    jobs, skipped = plan(experiment, "demo", base)
    alive, killed = jobs[0], jobs[1]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that no longer exists (as the process of a killed make paper)
    write_marker(base, alive, "running", host=socket.gethostname(), pid=os.getpid())
    write_marker(base, killed, "running", host=socket.gethostname(), pid=gone.pid)
    assert marker_status(read_marker(base, alive)) == "running"
    assert marker_status(read_marker(base, killed)) == "interrupted"
    assert marker_status({"status": "running", "host": "a-slurm-node", "pid": gone.pid}) == "running"
    text = write_report(base, experiment, "demo", jobs, skipped, "make paper EXP=table2").read_text()
    assert f"| {alive.name} | running |" in text and f"| {killed.name} | interrupted |" in text


def test_job_state_trusts_only_this_configs_marker_and_existing_outputs(tmp_path):
    experiment = load_experiment("table2")
    base = tmp_path / "demo"
    jobs, _ = plan(experiment, "demo", base)
    job = next(j for j in jobs if j.kind == "run" and j.outputs)
    assert job_state(base, job) is None  # never run
    write_marker(base, job, "done", seconds=1.0)
    assert job_state(base, job) is None and not is_done(base, job)  # marked done, outputs gone
    for output in job.outputs:
        (base / output).parent.mkdir(parents=True, exist_ok=True)
        (base / output).write_text("{}")
    assert job_state(base, job) == "done" and is_done(base, job)
    edited = replace(job, config_hash="0" * len(job.config_hash))  # the same job name, an edited recipe
    assert job_state(base, edited) is None and not is_done(base, edited)
    write_marker(base, job, "failed", error="error: boom")
    assert job_state(base, job) == "failed" and job_state(base, edited) is None


def test_a_table_over_epochs_is_one_table_and_a_series_reads_each_runs_jsonl(tmp_path):
    """Seed 002's Figure 5: the probe of every checkpoint in one table (epochs in number order, the paper's
    number at its epoch) and each run's rank.jsonl at those epochs, in a figure and a table."""
    experiment = {
        "title": "over training", "source": "a test",
        "runs": {"entry": "train", "axes": {"model": {"skip": ["model=skip"], "skipless": ["model=skipless"]}},
                 "scales": {"demo": ["data=default"]}, "epochs": {"demo": [2, 10]}},
        "evaluations": {"lin": {"entry": "linear", "result": "*/linear.json", "metric": "groups.last_cls.top1"}},
        "report": [
            {"kind": "table", "title": "probe", "evaluation": "lin", "rows": ["model"], "columns": ["epoch"],
             "epoch": "all", "reference": {"columns": ["10"], "rows": {"skip": [80.0]}}},
            {"kind": "series", "title": "rank", "evaluation": "runs", "file": "rank.jsonl", "metric": "rho"},
        ],
    }
    (tmp_path / "exps").mkdir()
    (tmp_path / "exps" / "fig5.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False))
    loaded = load_experiment("fig5", tmp_path / "exps")
    base = tmp_path / "demo"
    jobs, skipped = plan(loaded, "demo", base)
    by = {j.name: j for j in jobs}
    for model, rho in (("skip", [3.1, 2.5]), ("skipless", [3.4, 2.0])):
        run = by[f"train-{model}"]
        _done(base, run)
        (base / run.run_dir / "summary.json").write_text("{}")
        lines = [{"epoch": e, "step": 10 * e, "rho": r} for e, r in zip((2, 5, 10), (rho[0], 9.9, rho[1]))]
        (base / run.run_dir / "rank.jsonl").write_text("\n".join(json.dumps(l) for l in lines) + "\n{\"epo")
        for epoch, top1 in (("2", 50.0), ("10", 70.0 if model == "skip" else 60.0)):
            job = by[f"lin-{model}-{epoch}"]
            folder = base / Path(job.result).parent.parent / "backbone"
            folder.mkdir(parents=True)
            (folder / "linear.json").write_text(json.dumps({"groups": {"last_cls": {"top1": top1}}}))
            write_marker(base, job, "done", seconds=1.0)
    text = write_report(base, loaded, "demo", jobs, skipped, "make paper EXP=fig5").read_text()
    assert text.count("| model | 2 | 10 |") == 1 and "Epochs 2, 10. " in text
    assert "| skip | 50.0 | 70.0 (80.0, -10.0) |" in text and "| skipless | 50.0 | 60.0 |" in text
    assert "| run | 2 | 10 |" in text  # the evaluated epochs only (rank.jsonl also has epoch 5)
    assert "| skip | 3.1 | 2.5 |" in text and "| skipless | 3.4 | 2 |" in text
    assert (base / "fig5" / "figures" / "01-series.png").stat().st_size > 0


def test_a_series_reads_the_runs_and_names_its_file(tmp_path):
    import pytest

    from paper.experiment import ExperimentError

    base = {"title": "t", "runs": {"entry": "train", "axes": {"model": {"skip": ["model=skip"]}}},
            "evaluations": {"lin": {"entry": "linear", "result": "*/linear.json"}}}
    for item, message in (({"kind": "series", "evaluation": "runs"}, "a series names the JSON-lines file"),
                          ({"kind": "series", "evaluation": "lin", "file": "rank.jsonl"},
                           "a series reads the training runs' curves: evaluation: runs")):
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**base, "report": [item]}))
        with pytest.raises(ExperimentError, match=message):
            load_experiment("bad", tmp_path)
