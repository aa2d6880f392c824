"""Seed 000's experiments complete (issue 34): Figure 2 at every exported checkpoint, Tables 3-4 by depth,
Table 2's 200-epoch cells, PCA on the probe's natural images at full scale, the loss curves of Figures 1
and 9 read back from TensorBoard, and Tables 5-6's two protocols, each report table saying which."""
import json
import re
from pathlib import Path

import pytest
import yaml
from torch.utils.tensorboard import SummaryWriter

from paper.experiment import ExperimentError, load_experiment
from paper.jobs import plan, write_marker
from paper.report import write_report
from paper.report_figures import history_epochs
from paper.run_scalars import EPOCH_TAG, epoch_means, read_scalars
from skipless.analysis.condition_number import NUMERICALLY_ZERO, Condition, infinite_condition
from skipless.analysis.diagnostics import Diagnosis, result_to_json
from skipless.config import load_config

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = (DOCS / "paper.md", DOCS / "evaluators.md")  # the papers' numbers beside the commands
EXPORTS_UP_TO_300 = [20, 60, 100, 120, 180, 200, 240, 300]


def _cfg(job):
    return load_config(job.entry, [o for o in job.overrides if not o.startswith(("run.", "out=", "ckpt="))])


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """``{experiment: (jobs, skipped)}`` of table2, figure2 and depth planned once at full scale, with every
    dataset variable set (read when a file is loaded) and paper.exports' checkpoints."""
    base = tmp_path_factory.mktemp("paper") / "full"
    with pytest.MonkeyPatch.context() as patch:
        for var, path in (("IMAGENET_ROOT", "/d/in1k"), ("VOC_ROOT", "/d/voc"), ("COCOSTUFF_ROOT", "/d/cs"),
                          ("ADE20K_ROOT", "/d/ade"), ("COCO_ROOT", "/d/coco")):
            patch.setenv(var, path)
        exports = list(load_config("paper").exports.full)
        return {name: plan(load_experiment(name), "full", base, exports=exports)
                for name in ("table2", "figure2", "depth")}


def test_figure2_at_full_scale_evaluates_every_exported_checkpoint_up_to_300(full):
    jobs, skipped = full["figure2"]
    runs = [j for j in jobs if j.kind == "run"]
    assert len(runs) == 4 and len(jobs) == 4 + 4 * 8 * (6 + 2) and not skipped
    for run in runs:
        cfg = _cfg(run)
        assert (cfg.train.epochs, list(cfg.train.export_epochs), cfg.data.root) == (300, EXPORTS_UP_TO_300,
                                                                                   "/d/in1k/train")
    probes = [j for j in jobs if j.evaluation == "probe"]
    assert sorted({int(j.labels["epoch"]) for j in probes}) == EXPORTS_UP_TO_300
    assert {(j.labels["dataset"], j.labels["multiscale"]) for j in probes} == {
        (d, m) for d in ("voc", "cocostuff", "ade20k") for m in ("0", "1")}
    voc = next(j for j in probes if j.labels["dataset"] == "voc")
    assert _cfg(voc).roots.voc == "/d/voc" and voc.overrides[-2].endswith("backbone-epoch20.pt")
    # the same trainings as Table 2's (one config, one run folder)
    assert {j.config_hash for j in runs} == {j.config_hash for j in full["table2"][0] if j.kind == "run"}


def test_figure2s_paper_numbers_are_table2s_and_figure3s():
    table2 = load_experiment("table2").report
    probe_ref = next(r for r in table2 if r["evaluation"] == "probe")["reference"]
    tokencut_ref = next(r for r in table2 if r["evaluation"] == "tokencut")["reference"]
    figure2 = {r["evaluation"]: r["reference"] for r in load_experiment("figure2").report}
    for label, (at200, at300) in figure2["probe"]["rows"].items():
        dataset, ms, model, optim = label.split("/")
        column = probe_ref["columns"].index(f"{dataset}/{model}")
        assert at300 == probe_ref["rows"][f"{optim}/{ms}"][column]
        assert at200 == probe_ref["epochs"]["200"]["rows"][f"{optim}/{ms}"][column]
    assert len(figure2["probe"]["rows"]) == 24
    for label, (at200, at300) in figure2["tokencut"]["rows"].items():
        assert (at200, at300) == (tokencut_ref["epochs"]["200"]["values"].get(label), tokencut_ref["values"][label])


def test_table2_at_full_scale_draws_pca_on_the_probes_voc12_photos_and_reads_each_dataset_root(full):
    jobs, _ = full["table2"]
    pca = [j for j in jobs if j.evaluation == "pca"]
    assert len(pca) == 8 and all("images=/d/voc/VOCdevkit/VOC2012/JPEGImages" in j.overrides for j in pca)
    roots = {(j.evaluation, j.labels["dataset"]): _cfg(j).roots for j in jobs if j.evaluation in ("probe", "tokencut")}
    assert (roots["probe", "voc"].voc, roots["probe", "cocostuff"].cocostuff, roots["probe", "ade20k"].ade20k) == (
        "/d/voc", "/d/cs", "/d/ade")
    assert (roots["tokencut", "voc12"].voc12, roots["tokencut", "coco20k"].coco20k) == ("/d/voc", "/d/coco")


def _readme_rows(title_regex: str) -> dict[str, list[float | None]]:
    """The rows of the first table of the docs' pages after a line matching ``title_regex``: label -> its cells from
    the third on (numbers, None where empty)."""
    lines = "\n".join(page.read_text() for page in PAGES).splitlines()
    start = next(i for i, l in enumerate(lines) if re.search(title_regex, l))
    rows = {}
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if re.fullmatch(r"\d+", cells[1]):
            rows[cells[0]] = [float(c) if c else None for c in cells[2:]]
    return rows


def test_depth_is_tables_3_and_4_with_the_papers_numbers_at_the_epoch_each_comes_from(full):
    jobs, skipped = full["depth"]
    runs = {j.labels["model"]: j for j in jobs if j.kind == "run"}
    assert len(jobs) == 5 + 5 * 2 * (3 + 2) and not skipped
    assert {m: (_cfg(j).model.residual, _cfg(j).model.depth, _cfg(j).optim.name) for m, j in runs.items()} == {
        "skip-12": ("skip", None, "adamw"), "skipless-12": ("skipless", None, "adamw"),
        "skipless-11": ("skipless", 11, "adamw"), "skipless-10": ("skipless", 10, "adamw"),
        "skipless-9": ("skipless", 9, "adamw")}
    table2 = {tuple(j.labels.values()): j.config_hash for j in full["table2"][0] if j.kind == "run"}
    assert (runs["skip-12"].config_hash, runs["skipless-12"].config_hash) == (table2["skip", "adamw"],
                                                                              table2["skipless", "adamw"])
    assert {j.labels["epoch"] for j in jobs if j.kind == "eval"} == {"200", "300"}
    assert all(_cfg(j).multiscale == 1 for j in jobs if j.evaluation == "probe")
    # the reference blocks against the docs' (docs/paper.md, docs/evaluators.md) table (seeds/000 Tables 3-4) and Table 2 / Figure 3's cells
    readme = _readme_rows(r"^Tables 3 and 4 \(Appendix A.2")
    table3, table4 = (item["reference"] for item in load_experiment("depth").report)
    assert (table3["epoch"], table4["epoch"], list(table3["epochs"]), list(table4["epochs"])) == (200, 200, ["300"], ["300"])
    for model in ("skipless-11", "skipless-10", "skipless-9"):
        assert (table3["rows"][model], table4["rows"][model]) == (readme[model][0:3], readme[model][3:5])
    assert table3["rows"]["skipless-12"] == readme["skipless-12 (Table 3)"][0:3]
    assert table3["epochs"]["300"]["rows"]["skip-12"] == readme["skip-12"][0:3]
    assert table4["epochs"]["300"]["rows"]["skip-12"] == readme["skip-12"][3:5]
    assert table4["epochs"]["300"]["rows"]["skipless-12"] == readme["skipless-12 (Table 4, = Figure 3 at 300)"][3:5]
    table2 = {r["evaluation"]: r["reference"] for r in load_experiment("table2").report if "reference" in r}
    assert table3["epochs"]["300"]["rows"]["skipless-12"] == [table2["probe"]["rows"]["adamw/1"][i] for i in (1, 3, 5)]
    at200 = table2["tokencut"]["epochs"]["200"]["values"]  # Figure 3's, not Table 4's printed 53.5 / 36.5
    assert table4["rows"]["skipless-12"] == [at200["voc12/skipless/adamw"], at200["coco20k/skipless/adamw"]]
    assert "Table 4's skipless-12 row (53.5 / 36.5) is Figure 3's 300-epoch value" in " ".join(
        load_experiment("depth").report[1]["note"].split())


def test_table2s_200_epoch_reference_cells_are_the_readmes():
    readme = _readme_rows(r"^The paper.s numbers \(DINO ViT-S/16, 300 epochs")
    ref = next(r for r in load_experiment("table2").report if r["evaluation"] == "probe")["reference"]
    for row, name in (("adamw/0", "AdamW single"), ("soap/0", "SOAP single"), ("adamw/1", "AdamW multiscale"),
                      ("soap/1", "SOAP multiscale")):
        at300, at200 = ref["rows"][row], ref["epochs"]["200"]["rows"][row]
        assert at200[0::2] == [None] * 3  # the paper evaluates skip at 300 only
        # the docs' columns: skip 300, skipless 300, skipless 200, per dataset
        assert [v for i in range(3) for v in (at300[2 * i], at300[2 * i + 1], at200[2 * i + 1])] == [
            float(v) for v in "\n".join(page.read_text() for page in PAGES).split(f"| {name} | ")[1].split(" | `")[0].split(" | ")]


# ---- the report from results laid out by hand -----------------------------------------------------------
def _by_hand(tmp_path, experiment: dict, scale: str = "demo"):
    (tmp_path / "exps").mkdir(exist_ok=True)
    (tmp_path / "exps" / "hand.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False).replace("'.inf'", ".inf"))
    loaded = load_experiment("hand", tmp_path / "exps")
    base = tmp_path / scale
    jobs, skipped = plan(loaded, scale, base)
    return loaded, base, jobs, skipped, {j.name: j for j in jobs}


def _run_done(base: Path, job, summary: dict | None = None) -> None:
    for output in job.outputs:
        (base / output).parent.mkdir(parents=True, exist_ok=True)
        (base / output).write_bytes(b"x")
    (base / job.run_dir / "summary.json").write_text(json.dumps(summary or {}))
    write_marker(base, job, "done", seconds=1.0)


def _eval_done(base: Path, job, name: str, result: dict) -> None:
    folder = base / Path(job.result).parent.parent / "backbone"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(result))
    write_marker(base, job, "done", seconds=1.0)


def _log_like_a_run(run_dir: Path, points: list[tuple[int, int, float]]) -> None:
    """(step, 0-based epoch, loss) logged as a training run logs them: Lightning hands its logger each step's
    metrics with ``epoch`` added, the runs' ``RunLogger`` writes them (as ``watch/epoch``)."""
    from skipless.training.trainer import RunLogger

    logger = RunLogger(save_dir=str(run_dir), name="", version="tb", default_hp_metric=False)
    for step, epoch, loss in points:
        logger.log_metrics({"train/loss": loss, "epoch": epoch}, step)
    logger.finalize("success")


def test_a_run_scalars_epoch_means_read_back_what_was_written(tmp_path):
    """Figures 1 and 9 from a run's own events: each loss placed in its epoch by the epoch scalar the run's
    logger writes at the same step, each epoch's mean exact; a resumed run's second file continues the first."""
    run = tmp_path / "run"
    _log_like_a_run(run, [(0, 0, 4.0), (1, 0, 3.0), (2, 0, 2.0), (3, 1, 1.5), (4, 1, 0.5)])
    with SummaryWriter(str(run / "tb")) as writer:  # the resumed run: a second events file, the same names
        writer.add_scalar("train/loss", 0.25, 5)
        writer.add_scalar(EPOCH_TAG, 2, 5)
        writer.add_scalar("val/top1", 10.0, 100)  # no epoch scalar at this step: in no epoch
    assert read_scalars(run, ["train/loss", "nothing"]) == {
        "train/loss": [(0, 4.0), (1, 3.0), (2, 2.0), (3, 1.5), (4, 0.5), (5, 0.25)], "nothing": []}
    assert epoch_means(run, ["train/loss", "val/top1"]) == {"train/loss": {1: 3.0, 2: 1.0, 3: 0.25}, "val/top1": {}}
    assert history_epochs(300, [200]) == [1, 75, 150, 200, 225, 300] and history_epochs(2, []) == [1, 2]


HAND = {
    "title": "by hand", "source": "a test",
    "runs": {"entry": "pretrain", "axes": {"model": {"skip": ["model=skip"], "skipless": ["model=skipless"]},
                                           "optim": {"adamw": ["optim=adamw"], "soap": ["optim=soap"]}},
             "scales": {"demo": ["data=default"]}, "epochs": {"demo": [2, 4]}},
    "evaluations": {"probe": {"entry": "probe", "result": "*/probe-*.json", "metric": "miou"},
                    "conditioning": {"entry": "conditioning", "result": "*/conditioning.json", "metric": "jacobian.value"}},
}


def test_a_curve_over_epochs_and_a_loss_history_over_epochs_in_the_report(tmp_path):
    report = [
        {"kind": "curve", "x": "epoch", "title": "Figure 2", "evaluation": "probe", "panels": ["optim"],
         "lines": ["model"], "note": "Hollow squares:\n   the paper's.",
         "reference": {"columns": ["2", "4"], "rows": {"adamw/skipless": [None, 60.0], "soap/skip": [40.0, 50.0]}}},
        {"kind": "history", "title": "Figure 9", "evaluation": "runs", "x": "epoch", "panels": ["optim"]},
    ]
    experiment, base, jobs, skipped, by = _by_hand(tmp_path, {**HAND, "report": report})
    for run in (j for j in jobs if j.kind == "run"):
        _run_done(base, run)
        worse = run.labels["model"] == "skipless"
        _log_like_a_run(base / run.run_dir, [(step, epoch, loss + worse) for step, (loss, epoch) in enumerate(
            ((6.0, 0), (4.0, 0), (3.0, 1), (2.5, 2), (2.0, 3)))])
    for job in (j for j in jobs if j.evaluation == "probe"):
        _eval_done(base, job, "probe-default.json", {"miou": 10.0 * int(job.labels["epoch"])
                                                     + (job.labels["model"] == "skipless")})
    text = write_report(base, experiment, "demo", jobs, skipped, "make paper EXP=hand").read_text()
    assert "Hollow squares: the paper's." in text  # the note, its white space folded
    assert "Epochs 2, 4. Cells: ours (paper, ours - paper), miou." in text and "| optim/model | 2 | 4 |" in text
    assert "| adamw/skipless | 21.0 | 41.0 (60.0, -19.0) |" in text and "| soap/skip | 20.0 (40.0, -20.0) | 40.0 (50.0, -10.0) |" in text
    assert (base / "hand" / "figures" / "00-probe-epochs.png").stat().st_size > 0
    # the loss: each epoch's mean (epoch 1: (6 + 4) / 2), at the first, each quarter and the last epoch
    assert "The mean train/loss of each run over an epoch, at epochs 1, 2, 3, 4:" in text
    assert "| skip/adamw | 5 | 3 | 2.5 | 2 |" in text and "| skipless/soap | 6 | 4 | 3.5 | 3 |" in text
    assert (base / "hand" / "figures" / "01-history.png").stat().st_size > 0


def _kappa(value: float, converged: bool = True) -> Condition:
    return Condition(value, None, value, 1.0, 0.0, 0.0, 50, 6528, converged, "lanczos")


def test_tables5_6_say_which_protocol_made_each_table_and_read_the_runs_diagnostics(tmp_path):
    """Both of Tables 5-6's protocols in one report: the evaluations (after training: the exported teacher,
    Gaussian images) and each run's diagnostics.jsonl (during training: the student, its own images), every
    item saying which; the in-run values beside the paper's, ∞ and lower bounds as in a table."""
    items = load_experiment("tables5-6").report
    assert len(items) == 10
    for item in items:
        protocol = "Protocol: after training" if item["kind"] == "table" else "Protocol: during training"
        assert item["note"].startswith(protocol), item["title"]
    assert {i["kind"] for i in items if "EMA teacher" in i["note"]} == {"table"}
    assert all("The student" in i["note"] for i in items if i["kind"] == "series")
    hand = {**HAND, "runs": {**HAND["runs"], "axes": {"model": HAND["runs"]["axes"]["model"],
                                                      "optim": {"adamw": ["optim=adamw"]}}},
            "report": [items[0], items[5]]}  # Table 5, after and during training
    experiment, base, jobs, skipped, by = _by_hand(tmp_path, hand)
    for run in (j for j in jobs if j.kind == "run"):
        _run_done(base, run)
        skip = run.labels["model"] == "skip"
        measured = [(0, _kappa(99.0)), (2, _kappa(120.0) if skip else infinite_condition(NUMERICALLY_ZERO, 6528)),
                    (4, _kappa(5e5, converged=False))]
        # each line as the run's ConditioningMonitor writes it (skipless/training/diagnostics_callbacks.py)
        (base / run.run_dir / "diagnostics.jsonl").write_text("".join(
            json.dumps({"epoch": epoch, "step": 10 * epoch, **result_to_json(Diagnosis([0], 1, 17, jacobian=kappa))})
            + "\n" for epoch, kappa in measured))
    text = write_report(base, experiment, "demo", jobs, skipped, "make paper EXP=tables5-6").read_text()
    assert "Protocol: after training. `make conditioning` on each exported checkpoint (DINO's EMA teacher," in text
    assert "Protocol: during training. The student, measured by the run itself" in text
    assert "| run | 2 | 4 |" in text  # the epochs the evaluations read
    assert "| skip | 120.0 | >= 5e+05 |" in text and "| skipless | ∞ | >= 5e+05 |" in text
    assert text.count("The paper's table:") == 2 and "| skipless+init | 195.0 | 340.0 | 261.0 |" in text


def test_a_curve_or_history_against_something_else_is_one_sentence(tmp_path):
    for item, message in (({"kind": "curve", "evaluation": "probe", "x": "step"},
                           "a curve is drawn against block or epoch, not 'step'"),
                          ({"kind": "history", "evaluation": "runs", "x": "block"},
                           "a history is drawn against step or epoch, not 'block'"),
                          ({"kind": "curve", "evaluation": "probe", "x": "epoch", "panels": ["colour"]},
                           r"panels: unknown axes \['colour'\]")):
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**HAND, "report": [item]}))
        with pytest.raises(ExperimentError, match=message):
            load_experiment("bad", tmp_path)
