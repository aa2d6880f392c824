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
from paper.jobs import is_done, plan, write_marker
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
    submitted = submit_slurm(base, default_cells, settings, cluster="debug", say=lambda _: None).submitted
    for job in default_cells:  # the debug executor runs a job when its result is asked for
        assert submitted[job.name].result() == 0
        assert is_done(base, job)
    again = submit_slurm(base, default_cells, settings, cluster="debug", say=lambda _: None)
    assert again.submitted == {} and again.queued == {}  # all done


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


# ---- make paper again: what is queued, running or done is left alone ---------------------------------------
def _first_call(tmp_path, capsys):
    tiny_experiment(tmp_path / "exps", tmp_path / "data")
    first = run(load_config("paper", _args(tmp_path)))
    capsys.readouterr()
    return first["slurm"], {j.name: j for j in first["jobs"]}


def _lines(out: str) -> dict[str, str]:
    """``{job name: its line}`` of the per-job lines ``[state] name: ...``."""
    found = {}
    for line in out.splitlines():
        if line.startswith("[") and "] " in line:
            name = line.split("] ", 1)[1].split(":", 1)[0]
            found[name] = line
    return found


def test_a_second_make_paper_submits_nothing_while_the_jobs_are_queued_running_or_done(tmp_path, fake_slurm, capsys):
    ids, jobs = _first_call(tmp_path, capsys)
    fake_slurm.set(ids["pretrain-skip"], "RUNNING")
    base = tmp_path / "paper" / "demo"
    finished = jobs["tokencut-skipless-2-default"]  # an evaluation that is done: its marker and its result
    write_marker(base, finished, "done", slurm_job=ids[finished.name])
    result_file = base / finished.result.replace("*/tokencut-*", "run/tokencut-1")
    result_file.parent.mkdir(parents=True)
    result_file.write_text("{}")
    fake_slurm.forget(ids[finished.name])
    submitted_before = set(fake_slurm.scripts())

    again = run(load_config("paper", _args(tmp_path)))
    out = capsys.readouterr().out
    assert again["slurm"] == {} and set(fake_slurm.scripts()) == submitted_before  # nothing, not even the report
    lines = _lines(out)
    assert lines["pretrain-skip"] == f"[running] pretrain-skip: SLURM job {ids['pretrain-skip']} (RUNNING)"
    assert lines[finished.name] == f"[done] {finished.name}"
    for name in jobs:
        if name not in ("pretrain-skip", finished.name):
            assert lines[name] == f"[queued] {name}: SLURM job {ids[name]} (PENDING)"
    assert "nothing to submit: 5 jobs are still queued or running" in out
    calls = fake_slurm.squeue_calls()  # squeue asked once, about every job not done
    assert len(calls) == 1
    asked = calls[0].split("--jobs=")[1].split(",")
    assert sorted(asked) == sorted(ids[n] for n in jobs if n != finished.name)


def test_a_job_that_ended_unfinished_is_submitted_again_with_the_jobs_waiting_for_it(tmp_path, fake_slurm, capsys):
    ids, jobs = _first_call(tmp_path, capsys)
    fake_slurm.set(ids["pretrain-skip"], "FAILED")  # its evaluations still wait for it
    fake_slurm.set(ids["pretrain-skipless"], "RUNNING")
    fake_slurm.forget(ids["tokencut-skipless-2-voc12"])  # an evaluation that left the queue
    before = set(fake_slurm.scripts())

    again = run(load_config("paper", _args(tmp_path)))
    out = capsys.readouterr().out
    new = again["slurm"]
    resubmitted = ["pretrain-skip", "tokencut-skip-2-default", "tokencut-skip-2-voc12", "tokencut-skipless-2-voc12"]
    assert list(new) == [*resubmitted, "report"]
    assert set(fake_slurm.scripts()) == before | set(new.values())
    lines = _lines(out)
    assert lines["pretrain-skip"] == (f"[resubmitted] pretrain-skip: SLURM job {new['pretrain-skip']} "
                                      f"(its job {ids['pretrain-skip']} ended FAILED)")
    assert lines["tokencut-skipless-2-voc12"].endswith(f"(its job {ids['tokencut-skipless-2-voc12']} left the queue)")
    assert f"waited for pretrain-skip's job, which ended" in lines["tokencut-skip-2-default"]
    assert lines["pretrain-skipless"].startswith("[running] pretrain-skipless")
    assert lines["tokencut-skipless-2-default"].startswith("[queued] tokencut-skipless-2-default")
    scripts = fake_slurm.scripts()
    for name in ("tokencut-skip-2-default", "tokencut-skip-2-voc12"):  # after the new training
        assert sbatch_flags(scripts[new[name]])["dependency"] == f"afterok:{new['pretrain-skip']}"
    # a new evaluation of a training still running waits for that training's job
    waits = sbatch_flags(scripts[new["tokencut-skipless-2-voc12"]])["dependency"]
    assert waits == f"afterok:{ids['pretrain-skipless']}"
    current = {**ids, **new}
    report = sbatch_flags(scripts[new["report"]])["dependency"]
    assert sorted(report.split(":")[1:]) == sorted(current[n] for n in jobs)  # after the queued jobs and the new ones
    base = tmp_path / "paper" / "demo"
    for name in resubmitted:
        marker = json.loads((base / jobs[name].marker).read_text())
        assert marker["status"] == "submitted" and marker["slurm_job"] == new[name]


def test_force_submits_again_every_job_that_is_not_done(tmp_path, fake_slurm, capsys):
    ids, jobs = _first_call(tmp_path, capsys)
    again = run(load_config("paper", _args(tmp_path, "force=true")))
    out = capsys.readouterr().out
    assert list(again["slurm"]) == [*jobs, "report"]
    assert all(f"(FORCE=1; its job {ids[n]} is still PENDING)" in _lines(out)[n] for n in jobs)
    assert "a duplicate training finds its run's lock held" in out


def test_without_an_answer_from_squeue_nothing_that_may_be_queued_is_submitted_again(tmp_path, fake_slurm, capsys):
    ids, jobs = _first_call(tmp_path, capsys)
    fake_slurm.down()
    before = set(fake_slurm.scripts())
    again = run(load_config("paper", _args(tmp_path)))
    out = capsys.readouterr().out
    assert again["slurm"] == {} and set(fake_slurm.scripts()) == before and sorted(again["unknown"]) == sorted(jobs)
    assert _lines(out)["pretrain-skip"] == (f"[unknown] pretrain-skip: SLURM job {ids['pretrain-skip']}, marked "
                                            "submitted (squeue did not answer)")
    said = [l for l in out.splitlines() if l.startswith("squeue did not answer")]
    assert len(said) == 1 and "6 jobs" in said[0] and "FORCE=1" in said[0]
    forced = run(load_config("paper", _args(tmp_path, "force=true")))  # FORCE=1 submits them anyway
    assert list(forced["slurm"]) == [*jobs, "report"]


def test_force_and_the_signal_delay_are_checked_before_anything_runs(tmp_path):
    from paper.__main__ import check_settings
    from skipless.config import ConfigError

    with pytest.raises(ConfigError, match="nothing to force: drop FORCE=1"):
        check_settings(load_config("paper", ["exp=table2", "cluster=local", "force=true"]))
    with pytest.raises(ConfigError, match="slurm.signal_delay_s=5 is not a whole number of seconds of at least 20"):
        check_settings(load_config("paper", ["exp=table2", "cluster=slurm", "slurm.partition=gpu",
                                             "slurm.signal_delay_s=5"]))
