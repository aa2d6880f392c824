"""``make paper`` on SLURM, without a cluster: submitit's real SLURM executor writes its sbatch scripts
and calls an ``sbatch`` of ours that records them (so the test reads the scripts a cluster would get:
resources, the evaluations' dependency on their training run, the report after everything), and
submitit's debug executor runs the same job functions here, in dependency order."""
import json
import os
import stat
from pathlib import Path

import pytest

from paper.__main__ import run
from paper.slurm import submit_slurm
from paper.experiment import load_experiment
from paper.jobs import is_done, plan
from skipless.config import load_config

from test_paper_run import tiny_experiment

FAKE_SBATCH = """#!/bin/sh
# records each submission script and answers as sbatch does
n=$(cat "{folder}/next" 2>/dev/null || echo 1000)
echo $((n + 1)) > "{folder}/next"
cp "$1" "{folder}/job-$n.sh"
echo "Submitted batch job $n"
"""


@pytest.fixture()
def fake_sbatch(tmp_path, monkeypatch):
    folder = tmp_path / "sbatch"
    folder.mkdir()
    script = tmp_path / "bin" / "sbatch"
    script.parent.mkdir()
    script.write_text(FAKE_SBATCH.format(folder=folder))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    srun = script.parent / "srun"  # submitit looks for it; our scripts are only read, never run
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(srun.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return folder


def _sbatch_lines(text: str) -> dict[str, str]:
    lines = [l[len("#SBATCH --"):] for l in text.splitlines() if l.startswith("#SBATCH --")]
    return dict(l.split("=", 1) if "=" in l else (l, "") for l in lines)


def test_submission_scripts_hold_the_resources_and_the_dependencies(tmp_path, fake_sbatch, capsys):
    tiny_experiment(tmp_path / "exps", tmp_path / "data")
    args = ["exp=tiny", f"experiments={tmp_path / 'exps'}", f"root={tmp_path / 'paper'}", "slurm.partition=gpu",
            "slurm.nodes=2", "slurm.gpus_per_node=4"]  # cluster=auto finds our sbatch
    result = run(load_config("paper", args))
    ids = result["slurm"]
    jobs = {j.name: j for j in result["jobs"]}
    assert list(ids) == [*jobs, "report"]  # every job, in dependency order, then the report
    scripts = {p.stem.split("-")[1]: p.read_text() for p in fake_sbatch.glob("job-*.sh")}
    for name, job in jobs.items():
        flags = _sbatch_lines(scripts[ids[name]])
        assert flags["partition"] == "gpu" and flags["job-name"] == name
        if job.kind == "run":
            assert (flags["nodes"], flags["gpus-per-node"], flags["ntasks-per-node"]) == ("2", "4", "4")
            assert "train.devices=4" in job.overrides and "train.num_nodes=2" in job.overrides
            assert "dependency" not in flags
        else:
            assert (flags["nodes"], flags["gpus-per-node"], flags["ntasks-per-node"]) == ("1", "1", "1")
            assert flags["dependency"] == f"afterok:{ids[job.depends[0]]}"
        marker = json.loads((tmp_path / "paper" / "demo" / job.marker).read_text())
        assert marker["status"] == "submitted" and marker["slurm_job"] == ids[name]
    report = _sbatch_lines(scripts[ids["report"]])
    assert report["dependency"] == "afterany:" + ":".join(ids[n] for n in jobs)
    assert "submitted" in capsys.readouterr().out


@pytest.mark.slow
def test_the_debug_executor_runs_the_same_jobs_in_dependency_order(tmp_path):
    tiny_experiment(tmp_path / "exps", tmp_path / "data")
    experiment = load_experiment("tiny", tmp_path / "exps")
    base = (tmp_path / "paper" / "demo").resolve()
    settings = load_config("paper", ["slurm.partition=gpu", "slurm.gpus_per_node=1"]).slurm
    jobs, _ = plan(experiment, "demo", base, [])
    default_cells = [j for j in jobs if j.kind == "run" or j.labels.get("dataset") == "default"]
    submitted = submit_slurm(base, default_cells, settings, cluster="debug", say=lambda _: None)
    for job in default_cells:  # the debug executor runs a job when its result is asked for
        assert submitted[job.name].result() == 0
        assert is_done(base, job)
    assert submit_slurm(base, default_cells, settings, cluster="debug", say=lambda _: None) == {}  # all done


def test_a_fine_tuning_evaluation_gets_a_trainings_nodes_gpus_and_time(tmp_path):
    from paper.slurm import _resources, run_overrides

    settings = load_config("paper", ["slurm.partition=gpu", "slurm.nodes=2", "slurm.gpus_per_node=4"]).slurm
    jobs, _ = plan(load_experiment("graying-mae"), "full", tmp_path, run_overrides(settings))
    tunings = [j for j in jobs if j.entry == "finetune"]
    assert len(tunings) == 2
    for job in tunings:
        assert "train.devices=4" in job.overrides and "train.num_nodes=2" in job.overrides
        r = _resources(job, settings)
        assert (r["nodes"], r["gpus_per_node"], r["timeout_min"]) == (2, 4, int(settings.run_minutes))
