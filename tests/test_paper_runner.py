"""A job of ``make paper`` whose training does not end on its own, and the command every training runs. Another
live run holding the training's folder (found before the command starts, or said by its exit status 73) owns the
marker; a training stopped by a signal after a checkpoint (exit status 75) is marked ``preempted``; every
training continues itself (``run.resume=auto``). The trainings are shell commands standing in for ``python -m
skipless.pretrain``."""
import json
import os
import socket

import pytest

from paper import runner
from paper.experiment import load_experiment
from paper.jobs import Job, config_hash, plan, read_marker, write_marker
from paper.runner import TRAINING_OVERRIDES, prepared_command, run_job, training_dir

from fake_slurm import FakeSlurm

STOPPED = "preempted: SIGUSR2 received: stopped after the checkpoint {d}/last.ckpt of step 3, in epoch 1"


@pytest.fixture()
def on_this_host(monkeypatch):
    """Outside any SLURM job (the tests that want one set it)."""
    for name in ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_RESTART_COUNT", "SUBMITIT_EXECUTOR", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


def _training(kind: str = "run") -> Job:
    return Job(name="pretrain-x", kind=kind, entry="pretrain" if kind == "run" else "probe", overrides=(),
               labels={}, config_hash="abcd1234", marker="jobs/runs/x.json", log="logs/runs/x.log",
               outputs=("runs/x/backbone.pt",), run_dir="runs/x" if kind == "run" else None,
               result=None if kind == "run" else "evals/x/*.json")


def _child(monkeypatch, script: str) -> None:
    """Every job's command becomes this shell script."""
    monkeypatch.setattr(runner, "prepared_command", lambda job: ["sh", "-c", script])


def test_trainings_continue_themselves_and_keep_their_identity(tmp_path):
    jobs, _ = plan(load_experiment("graying-mae"), "full", tmp_path, ["train.devices=8", "train.num_nodes=1"])
    trainings = [j for j in jobs if j.kind == "run" or j.entry == "finetune"]
    assert {j.entry for j in trainings} == {"pretrain", "finetune"}
    for job in jobs:
        command = prepared_command(job)
        if job in trainings:
            assert command[-2:] == ["run.resume=auto", "run.requeue=false"] and command[:-2] == job.command()
            assert config_hash(job.entry, [*job.overrides, *TRAINING_OVERRIDES]) == job.config_hash
            # the folder whose run.lock says whether another run trains it
            evals = tmp_path / "graying-mae" / "evals"
            folder = tmp_path / job.run_dir if job.kind == "run" else evals / job.name / "run"
            assert training_dir(tmp_path, job) == folder
        else:
            assert command == job.command() and training_dir(tmp_path, job) is None


def test_a_training_held_by_a_live_run_is_left_to_it_before_it_starts(tmp_path, monkeypatch, on_this_host):
    job = _training()
    run_dir = tmp_path / job.run_dir
    run_dir.mkdir(parents=True)  # the lock of a live run: this very test process
    (run_dir / "run.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                                  "started": "2025-01-01 00:00:00"}))
    write_marker(tmp_path, job, "running", host="node7", pid=1, slurm_job="77")
    before = (tmp_path / job.marker).read_text()
    _child(monkeypatch, f'touch "{tmp_path}/started"')
    assert run_job(tmp_path, job) == 73
    assert not (tmp_path / "started").exists()  # never started
    assert (tmp_path / job.marker).read_text() == before  # the live run's marker, untouched
    assert f"busy: another run (pid {os.getpid()} on {socket.gethostname()})" in (tmp_path / job.log).read_text()


def test_the_lock_of_the_same_slurm_job_is_not_another_runs(tmp_path, monkeypatch, on_this_host):
    """Rank 1's task of a multi-node training finds the lock rank 0's training just took: it trains too (were it
    left out, rank 0 would wait for it in DDP's rendezvous)."""
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_PROCID", "1")
    job = _training()
    (tmp_path / job.run_dir).mkdir(parents=True)
    (tmp_path / job.run_dir / "run.lock").write_text(json.dumps({"host": "node1", "pid": 12, "slurm_job": "4242",
                                                                 "slurm_restart": 0}))
    _child(monkeypatch, f'touch "{tmp_path}/started"')
    assert run_job(tmp_path, job) == 0 and (tmp_path / "started").exists()


@pytest.mark.parametrize("earlier", [{"status": "running", "host": "node7", "pid": 1, "slurm_job": "77"}, None])
def test_a_training_that_exits_busy_leaves_the_marker_as_it_was(tmp_path, monkeypatch, on_this_host, earlier):
    job = _training()
    if earlier is not None:
        write_marker(tmp_path, job, **earlier)
    before = read_marker(tmp_path, job)
    _child(monkeypatch, "exit 73")  # two jobs started at once: the other one took the lock first
    assert run_job(tmp_path, job) == 73
    assert read_marker(tmp_path, job) == before  # restored, or still none


def test_a_duplicate_slurm_job_makes_the_marker_name_the_job_that_holds_the_run(tmp_path, monkeypatch, on_this_host):
    slurm = FakeSlurm(tmp_path, monkeypatch)
    slurm.set("444", "RUNNING")
    monkeypatch.setenv("SLURM_JOB_ID", "555")  # submitted again with FORCE=1 while job 444 trains
    job = _training()
    (tmp_path / job.run_dir).mkdir(parents=True)
    (tmp_path / job.run_dir / "run.lock").write_text(json.dumps({"host": "node3", "pid": 12, "slurm_job": "444",
                                                                 "slurm_restart": 0}))
    write_marker(tmp_path, job, "submitted", slurm_job="555")
    _child(monkeypatch, "exit 0")
    assert run_job(tmp_path, job) == 73
    marker = read_marker(tmp_path, job)
    assert (marker["status"], marker["slurm_job"]) == ("running", "444")  # the next make paper waits for 444


def test_a_training_stopped_by_a_signal_is_marked_preempted(tmp_path, monkeypatch, on_this_host):
    job = _training()
    said = STOPPED.format(d=tmp_path)
    _child(monkeypatch, f'echo "{said}"; exit 75')
    assert run_job(tmp_path, job) == 75
    marker = read_marker(tmp_path, job)
    assert marker["status"] == "preempted" and marker["exit_code"] == 75
    assert said[len("preempted: "):] in marker["error"]
