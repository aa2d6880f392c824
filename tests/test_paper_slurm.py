"""``make paper`` on SLURM, without a cluster: submitit's real SLURM executor writes its sbatch scripts
and calls an ``sbatch`` of ours that records them (so the test reads the scripts a cluster would get:
resources, the evaluations' dependency on their training run, the report after everything), and
submitit's debug executor runs the same job functions here, in dependency order."""
import json

import pytest
from submitit.core.utils import DelayedSubmission

from paper.__main__ import run
from paper.slurm import submit_slurm
from paper.slurm_task import SlurmTask
from paper.experiment import load_experiment
from paper.jobs import is_done, plan
from skipless.config import load_config

from fake_slurm import FakeSlurm, sbatch_flags
from test_paper_run import tiny_experiment

@pytest.fixture()
def fake_slurm(tmp_path, monkeypatch):
    return FakeSlurm(tmp_path, monkeypatch)


def _args(tmp_path, *extra):
    return ["exp=tiny", f"experiments={tmp_path / 'exps'}", f"root={tmp_path / 'paper'}", "slurm.partition=gpu",
            *extra]  # cluster=auto finds our sbatch


def test_submission_scripts_hold_the_resources_and_the_dependencies(tmp_path, fake_slurm, capsys):
    tiny_experiment(tmp_path / "exps", tmp_path / "data")
    result = run(load_config("paper", _args(tmp_path, "slurm.nodes=2", "slurm.gpus_per_node=4",
                                            "slurm.signal_delay_s=120", "slurm.max_requeues=7")))
    ids = result["slurm"]
    jobs = {j.name: j for j in result["jobs"]}
    assert list(ids) == [*jobs, "report"]  # every job, in dependency order, then the report
    scripts = fake_slurm.scripts()
    base = tmp_path / "paper" / "demo"
    for name, job in jobs.items():
        flags = sbatch_flags(scripts[ids[name]])
        assert flags["partition"] == "gpu" and flags["job-name"] == name
        assert flags["signal"] == "USR2@120"  # submitit's signal, slurm.signal_delay_s before the time limit
        if job.kind == "run":
            assert (flags["nodes"], flags["gpus-per-node"], flags["ntasks-per-node"]) == ("2", "4", "4")
            assert "train.devices=4" in job.overrides and "train.num_nodes=2" in job.overrides
            assert "dependency" not in flags
        else:
            assert (flags["nodes"], flags["gpus-per-node"], flags["ntasks-per-node"]) == ("1", "1", "1")
            assert flags["dependency"] == f"afterok:{ids[job.depends[0]]}"
            assert flags["kill-on-invalid-dep"] == "yes"  # cancelled, not pending for ever, if its training fails
        marker = json.loads((base / job.marker).read_text())
        assert marker["status"] == "submitted" and marker["slurm_job"] == ids[name]
        # what each job runs: the checkpointable task, requeued at most slurm.max_requeues times
        submission = DelayedSubmission.load(base / "slurm" / ids[name] / f"{ids[name]}_submitted.pkl")
        assert isinstance(submission.function, SlurmTask) and submission.args == (base, job)
        assert submission._timeout_countdown == 7 and submission.function.wait_s == 110
    report = sbatch_flags(scripts[ids["report"]])
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


def test_the_signal_delay_is_checked_before_anything_runs(tmp_path):
    from paper.__main__ import check_settings
    from skipless.config import ConfigError

    with pytest.raises(ConfigError, match="slurm.signal_delay_s=5 is not a whole number of seconds of at least 20"):
        check_settings(load_config("paper", ["exp=table2", "cluster=slurm", "slurm.partition=gpu",
                                             "slurm.signal_delay_s=5"]))
