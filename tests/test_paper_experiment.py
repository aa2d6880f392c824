"""``make paper``: the experiment files, the jobs they mean at each scale, their reference numbers
against the docs' (docs/paper.md, docs/evaluators.md), and one sentence for every file or setting that cannot run."""
import re
from pathlib import Path

import pytest
import yaml

from paper.__main__ import main, run
from paper.experiment import ExperimentError, known_experiments, load_experiment
from paper.jobs import plan
from skipless.config import load_config

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = (DOCS / "paper.md", DOCS / "evaluators.md")  # the papers' numbers beside the commands


@pytest.mark.parametrize("name", known_experiments())
@pytest.mark.parametrize("scale", ["demo", "quick", "full"])
def test_every_experiment_plans_runs_before_the_evaluations_that_read_them(tmp_path, name, scale):
    """Every file loads and plans at every scale (each job's config loaded: a key that does not exist fails)."""
    experiment = load_experiment(name)
    jobs, skipped = plan(experiment, scale, tmp_path, exports=list(load_config("paper").exports[scale]))
    runs = [j for j in jobs if j.kind == "run"]
    assert runs and jobs[:len(runs)] == runs  # every training run comes first
    seen = set()
    for job in jobs:
        assert all(d in seen for d in job.depends)
        seen.add(job.name)
        if job.kind == "eval" and job.entry == "finetune":  # a training from the run's backbone (test_paper_finetune)
            run = next(r for r in runs if r.name == job.depends[0])
            ckpt = next(o for o in job.overrides if o.startswith("finetune.ckpt="))
            assert ckpt.startswith(f"finetune.ckpt={tmp_path.resolve() / run.run_dir}/backbone")
            assert any(o.startswith("run.root=") for o in job.overrides)
        elif job.kind == "eval":
            run = next(r for r in runs if r.name == job.depends[0])
            ckpt = next(o for o in job.overrides if o.startswith("ckpt="))
            assert ckpt.startswith(f"ckpt={tmp_path.resolve() / run.run_dir}/backbone")
            assert any(o.startswith("out=") for o in job.overrides)
            # one backbone per job, no random floor added: the experiment's own cells name the random ones
            assert job.overrides[0] == "random_floor=false"
    assert len({j.config_hash for j in runs}) == len(runs)  # distinct cells, distinct runs


def test_table2_at_demo_scale_is_the_cpu_demo_on_the_default_and_at_full_scale_the_papers_recipe(tmp_path):
    experiment = load_experiment("table2")
    demo, skipped = plan(experiment, "demo", tmp_path)
    full, _ = plan(experiment, "full", tmp_path)
    runs = {j.name: j for j in demo if j.kind == "run"}
    assert sorted(runs) == ["pretrain-skip-adamw", "pretrain-skip-soap", "pretrain-skipless-adamw",
                            "pretrain-skipless-soap"]
    cfg = load_config("pretrain", [o for o in runs["pretrain-skip-soap"].overrides if not o.startswith("run.")])
    assert (cfg.choices.recipe, cfg.data.name, cfg.model.residual, cfg.optim.name) == ("demo", "default", "skip", "soap")
    assert list(cfg.train.export_epochs) == experiment.epochs["demo"]
    full_run = next(j for j in full if j.name == "pretrain-skip-soap")
    cfg = load_config("pretrain", [o for o in full_run.overrides if not o.startswith("run.")])
    assert (cfg.choices.recipe, cfg.train.epochs, list(cfg.train.export_epochs)) == ("paper", 300, [200, 300])
    # the probe: VOC stands in as the default at demo scale, COCO-Stuff and ADE20K are full scale only
    demo_probes = [j for j in demo if j.evaluation == "probe"]
    assert {j.labels["dataset"] for j in demo_probes} == {"voc"}
    assert all("dataset=default" in j.overrides for j in demo_probes)
    assert {j.labels["dataset"] for j in full if j.evaluation == "probe"} == {"voc", "cocostuff", "ade20k"}
    assert {c["dataset"] for c in skipped if c["kind"] == "probe"} == {"cocostuff", "ade20k"}


def _readme_rows(title_regex: str) -> dict[str, list[float]]:
    """The rows of the first table of the docs' pages after a line matching ``title_regex``: label -> numbers."""
    lines = "\n".join(page.read_text() for page in PAGES).splitlines()
    start = next(i for i, l in enumerate(lines) if re.search(title_regex, l))
    rows, inside = {}, False
    for line in lines[start:]:
        if line.startswith("|"):
            inside = True
            cells = [c.strip() for c in line.strip("|").split("|")]
            numbers = [float(c) for c in cells[1:] if re.fullmatch(r"\d+\.\d", c)]
            if numbers:
                rows[cells[0]] = numbers
        elif inside:
            break
    return rows


def test_table2_reference_numbers_are_the_readmes():
    readme = _readme_rows(r"^The paper.s numbers \(DINO ViT-S/16, 300 epochs")
    # the docs' (docs/paper.md, docs/evaluators.md) columns per dataset: skip 300, skipless 300, skipless 200 (tests/test_paper_seed000.py)
    readme = {row: [v for i, v in enumerate(values) if i % 3 != 2] for row, values in readme.items()}
    ours = {}
    report = next(r for r in load_experiment("table2").report if r["evaluation"] == "probe")
    for row, values in report["reference"]["rows"].items():
        optim, ms = row.split("/")
        ours[f"{'AdamW' if optim == 'adamw' else 'SOAP'} {'single' if ms == '0' else 'multiscale'}"] = values
    assert report["reference"]["columns"] == ["voc/skip", "voc/skipless", "cocostuff/skip", "cocostuff/skipless",
                                              "ade20k/skip", "ade20k/skipless"]
    assert ours == {k: readme[k] for k in ours} and len(ours) == 4


def test_figure3_reference_numbers_are_the_readmes():
    readme = _readme_rows(r"Reference CorLoc")
    report = next(r for r in load_experiment("table2").report if r["evaluation"] == "tokencut")
    values = report["reference"]["values"]
    for model in ("skip", "skipless"):
        for optim, name in (("adamw", "AdamW"), ("soap", "SOAP")):
            voc, coco = readme[f"{model}, {name}, 300 ep"]
            assert (values[f"voc12/{model}/{optim}"], values[f"coco20k/{model}/{optim}"]) == (voc, coco)


def _write(folder: Path, name: str, data: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))


GOOD = {"title": "t", "runs": {"entry": "pretrain", "axes": {"model": {"skip": ["model=skip"]}}},
        "evaluations": {"tc": {"entry": "tokencut", "result": "*/tokencut-*.json", "metric": "corloc"}}}


@pytest.mark.parametrize("change, message", [
    ({"colour": 1}, r"unknown keys \['colour'\]"),
    ({"runs": {"entry": "finetune"}}, r"runs.entry: unknown entry 'finetune'; expected one of pretrain, train"),
    ({"runs": {"entry": "pretrain", "axes": {"model": {"skip": "model=skip"}}}}, r"expected a list of key=value"),
    ({"runs": {"entry": "pretrain", "axes": {"model": {"skip": {"tiny": ["model=skip"]}}}}},
     r"unknown scales \['tiny'\]; expected demo, quick and/or full"),
    ({"report": [{"kind": "table", "evaluation": "tc", "rows": ["colour"]}]}, r"unknown axes \['colour'\]"),
    ({"report": [{"kind": "pie", "evaluation": "tc"}]}, r"unknown kind 'pie'"),
    ({"report": [{"kind": "table", "evaluation": "probe"}]}, r"unknown evaluation 'probe'; expected one of tc, runs"),
])
def test_a_bad_experiment_file_is_one_sentence(tmp_path, change, message):
    _write(tmp_path, "bad", {**GOOD, **change})
    with pytest.raises(ExperimentError, match=message):
        load_experiment("bad", tmp_path)


def test_an_unknown_experiment_lists_the_known_ones(tmp_path, capsys):
    _write(tmp_path, "mine", GOOD)
    assert main([f"experiments={tmp_path}", "exp=theirs"]) == 2
    assert "error: unknown experiment 'theirs'; expected one of: mine" in capsys.readouterr().err
    assert main(["exp=table9"]) == 2
    assert "expected one of: " + ", ".join(known_experiments()) in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["exp=table2", "scale=huge"], "scale=huge is not a scale; expected one of demo, quick, full"),
    (["exp=table2", "cluster=slurm"], "cluster=slurm needs a partition"),
    (["exp=table2", "local.parallel=0"], "local.parallel=0 is neither a positive number nor gpus"),
])
def test_bad_settings_are_one_sentence_and_write_nothing(tmp_path, capsys, args, message):
    assert main([*args, f"root={tmp_path / 'paper'}"]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "paper").exists()


def test_a_dry_run_lists_the_jobs_and_writes_nothing(tmp_path, capsys):
    result = run(load_config("paper", ["exp=table2", "dry_run=true", f"root={tmp_path / 'paper'}"]))
    out = capsys.readouterr().out
    assert len(result["jobs"]) == out.count("[to run]") and "python -m skipless.pretrain data=default model=skip optim=adamw" in out
    assert not (tmp_path / "paper").exists()


def test_table1_and_table5_reference_numbers_are_the_readmes():
    table1 = _readme_rows(r"^Table 1 \(supervised")
    report = load_experiment("table1").report[0]["reference"]
    assert report["columns"] == ["adamw", "soap"]
    assert {k: v for k, v in report["rows"].items()} == {k: table1[k] for k in ("skip", "skipless", "skipless+init")}
    table5 = _readme_rows(r"^Table 5 \(kappa")
    report = next(r for r in load_experiment("tables5-6").report if r.get("metric") is None)["reference"]
    assert report["columns"] == ["20", "60", "120", "180", "240", "300"]
    assert report["rows"]["skip"] == table5["skip"] and report["rows"]["skipless+init"] == table5["skipless+init"]
    assert report["rows"]["skipless"] == [float("inf")] * 6


def test_experiments_of_a_scale_share_their_training_runs(tmp_path):
    exports = load_config("paper").exports
    for scale in ("demo", "full"):
        table2, _ = plan(load_experiment("table2"), scale, tmp_path, exports=list(exports[scale]))
        tables56, _ = plan(load_experiment("tables5-6"), scale, tmp_path, exports=list(exports[scale]))
        skip_adamw = {j.run_dir for j in table2 + tables56 if j.kind == "run" and j.labels == {"model": "skip",
                                                                                                 "optim": "adamw"}}
        assert len(skip_adamw) == 1  # one training serves Table 2 and Tables 5-6
        cfg = load_config("pretrain", [o for o in table2[0].overrides if not o.startswith("run.")])
        assert set(load_experiment("tables5-6").epochs[scale]) <= set(cfg.train.export_epochs)


def test_a_run_started_under_another_cell_name_is_reused_not_trained_again(tmp_path):
    exports = list(load_config("paper").exports["demo"])
    table2, _ = plan(load_experiment("table2"), "demo", tmp_path, exports=exports)
    for job in table2:
        if job.kind == "run":
            (tmp_path / job.run_dir).mkdir(parents=True)
    tables56, _ = plan(load_experiment("tables5-6"), "demo", tmp_path, exports=exports)
    in_table2 = {tuple(j.labels.values()): j for j in table2 if j.kind == "run"}
    in_tables56 = {tuple(j.labels.values()): j for j in tables56 if j.kind == "run"}
    # the same config (model=skipless optim=adamw) is "skipless" in Table 2 and "skipless+init" in Tables 5-6
    shared, first = in_tables56[("skipless+init", "adamw")], in_table2[("skipless", "adamw")]
    assert shared.config_hash == first.config_hash
    assert (shared.run_dir, shared.marker) == (first.run_dir, first.marker)
    # Tables 5-6's "skipless" (model=skipless-plain) is a config no Table 2 run has: a folder of its own
    plain = in_tables56[("skipless", "adamw")]
    assert plain.config_hash not in {j.config_hash for j in in_table2.values()}
    assert plain.run_dir not in {j.run_dir for j in in_table2.values()}


def test_a_key_added_later_keeps_the_hash_of_jobs_that_leave_it_at_its_old_meaning():
    """``LATER_KEYS``: the hash of a config whose later key holds its "as before" value is the hash of the same
    values without the key (what the job hashed before the key existed); any other value is a new job."""
    import hashlib
    import json

    from skipless.config import leaf_values, load_config
    from paper.jobs import LATER_KEYS, PLACE_KEYS, config_hash

    assert LATER_KEYS == {"model.init_args.qk": None, "image_fraction": None, "views": 1, "spectrum_ends": None,
                          "optim.lr_drops": []}
    values = {k: v for k, v in leaf_values(load_config("pretrain", [])).items() if k not in PLACE_KEYS}
    assert values.pop("model.init_args.qk") is None
    before = hashlib.sha256(f"pretrain\n{json.dumps(values, sort_keys=True, default=str)}".encode()).hexdigest()[:8]
    assert config_hash("pretrain", []) == before
    assert config_hash("pretrain", ["model.init_args.qk=layer"]) != before
    values = {k: v for k, v in leaf_values(load_config("train", [])).items() if k not in PLACE_KEYS}
    assert values.pop("optim.lr_drops") == []  # issue 50: the step schedule; [] the cosine every run had
    assert values.pop("model.init_args.qk") is None
    before = hashlib.sha256(f"train\n{json.dumps(values, sort_keys=True, default=str)}".encode()).hexdigest()[:8]
    assert config_hash("train", []) == before
    assert config_hash("train", ["optim.lr_drops=[100]"]) != before
    values = {k: v for k, v in leaf_values(load_config("conditioning", [])).items() if k not in PLACE_KEYS}
    assert values.pop("image_fraction") is None  # issue 50: the conditioning evaluations of before keep their hash
    assert values.pop("spectrum_ends") is None  # issue 50 (seeds/003 Figs. 7-8 matrix-free): likewise
    before = hashlib.sha256(f"conditioning\n{json.dumps(values, sort_keys=True, default=str)}".encode()).hexdigest()[:8]
    assert config_hash("conditioning", []) == before != config_hash("conditioning", ["image_fraction=0.1"])
    assert config_hash("conditioning", ["spectrum_ends=16"]) != before
    # make linear's views (issue 50): 1, the one centre crop of before, hashes as the config without the key
    values = {k: v for k, v in leaf_values(load_config("linear", ["linear-preset=zhang"])).items() if k not in PLACE_KEYS}
    assert values.pop("views") == 1
    before = hashlib.sha256(f"linear\n{json.dumps(values, sort_keys=True, default=str)}".encode()).hexdigest()[:8]
    assert config_hash("linear", ["linear-preset=zhang"]) == before
    assert config_hash("linear", ["linear-preset=zhang", "views=4"]) != before
