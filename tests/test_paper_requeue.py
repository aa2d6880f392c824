"""On SLURM, the checkpointable task a job of ``make paper`` runs: submitit's signal is passed on to the training,
waited for, the job marked ``preempted`` and requeued (rank 0), or only passed on (other ranks); an evaluation
is not requeued; a job that did not finish fails in SLURM's eyes. The trainings are small shell scripts
standing in for ``python -m skipless.pretrain``."""
import signal
import subprocess
import threading
import time

import pytest
from submitit.core.job_environment import JobEnvironment
from submitit.core.utils import DelayedSubmission

from paper.jobs import read_marker, write_marker
from paper.slurm_task import JobNotDone, SlurmTask

from fake_slurm import FakeSlurm
from test_paper_runner import STOPPED, _child, _training, on_this_host  # noqa: F401 (a fixture)

# a training that stops on SIGUSR2 as ours does (its handler sets a flag; it exits 75 after a checkpoint); one
# that never gets the signal ends by itself after about 20 s, with status 9
TRAINING = """trap 'touch "{d}/got-signal"; echo "{stopped}"; exit 75' USR2
touch "{d}/ready"
i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done; exit 9
"""


def test_a_slurm_job_fails_when_its_job_did_not_finish_and_returns_at_once_when_done(tmp_path, monkeypatch,
                                                                                     on_this_host):
    job = _training()
    _child(monkeypatch, 'echo "error: the data is missing"; exit 1')
    with pytest.raises(JobNotDone, match="failed \\(exit status 1\\): error: the data is missing"):
        SlurmTask()(tmp_path, job)
    (tmp_path / job.outputs[0]).parent.mkdir(parents=True)
    (tmp_path / job.outputs[0]).write_text("weights")
    write_marker(tmp_path, job, "done")  # a job requeued after it finished
    _child(monkeypatch, f'touch "{tmp_path}/started"')
    assert SlurmTask()(tmp_path, job) == 0 and not (tmp_path / "started").exists()


@pytest.mark.parametrize("kind", ["run", "eval"])
def test_checkpoint_stops_the_child_marks_the_job_and_returns_the_same_call(tmp_path, on_this_host, kind):
    job = _training(kind)
    task = SlurmTask(signal_delay_s=60)
    task.child = subprocess.Popen(["sh", "-c", TRAINING.format(d=tmp_path, stopped=STOPPED.format(d=tmp_path))])
    while not (tmp_path / "ready").exists():  # its trap is set
        time.sleep(0.02)
    if kind == "run":
        (tmp_path / job.log).parent.mkdir(parents=True)
        (tmp_path / job.log).write_text(STOPPED.format(d=tmp_path) + "\n")  # what the training said
    again = task.checkpoint(tmp_path, job)
    assert (tmp_path / "got-signal").exists() and task.child.poll() == 75  # the signal reached it; it exited
    marker = read_marker(tmp_path, job)
    assert marker["exit_code"] == 75  # waited for: marked after the training exited
    if kind == "run":
        assert isinstance(again, DelayedSubmission) and again.function is task and again.args == (tmp_path, job)
        assert marker["status"] == "preempted" and "of step 3, in epoch 1" in marker["error"]
    else:  # an evaluation is not requeued: it would start from its beginning
        assert again is None and marker["status"] == "failed" and "slurm.eval_minutes" in marker["error"]


@pytest.mark.parametrize("rank", [0, 1])
def test_submitits_signal_requeues_a_training_after_it_stopped(tmp_path, monkeypatch, on_this_host, rank):
    """Submitit's own handler, as in a SLURM task: on rank 0 it calls checkpoint(), requeues and exits; on
    another rank it does nothing, and the task's forwarding stops the training there too."""
    slurm = FakeSlurm(tmp_path, monkeypatch)
    for name, value in {"SLURM_JOB_ID": "4242", "SLURM_PROCID": str(rank), "SLURM_NTASKS": "2",
                        "SUBMITIT_EXECUTOR": "slurm", "SUBMITIT_FOLDER": str(tmp_path / "submitit")}.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "submitit").mkdir()  # where submitit keeps the job's pickle
    job = _training()
    write_marker(tmp_path, job, "submitted", slurm_job="4242")
    _child(monkeypatch, TRAINING.format(d=tmp_path, stopped=STOPPED.format(d=tmp_path)))
    task = SlurmTask(signal_delay_s=60)
    delayed = DelayedSubmission(task, tmp_path, job)
    delayed.set_timeout(600, 20)
    env = JobEnvironment()
    handled = (signal.SIGUSR2, signal.SIGTERM, signal.SIGCONT)
    saved = {sig: signal.getsignal(sig) for sig in handled}

    def send() -> None:  # SLURM's signal, once the training runs, to the main thread (blocked in its wait)
        while not (tmp_path / "ready").exists():
            time.sleep(0.02)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR2)

    sender = threading.Thread(target=send)
    try:
        env._handle_signals(env.paths, delayed)
        sender.start()
        if rank == 0:
            with pytest.raises(SystemExit):  # submitit exits once it requeued the job
                delayed.result()
        else:
            assert delayed.result() == 75  # no failure here, which could end rank 0 before its checkpoint
    finally:
        sender.join()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert (tmp_path / "got-signal").exists()  # the training had the signal and stopped
    marker = read_marker(tmp_path, job)
    if rank == 0:
        assert task.child.wait() == 75  # it had exited before submitit requeued (reaped here)
        assert slurm.scontrol_calls() == ["requeue 4242"]
        assert marker["status"] == "preempted" and "of step 3, in epoch 1" in marker["error"]
        assert marker["slurm_job"] == "4242" and marker["exit_code"] == 75  # marked once the training had exited
        requeued = DelayedSubmission.load(env.paths.submitted_pickle)  # what the requeued job runs
        assert isinstance(requeued.function, SlurmTask) and requeued.function.child is None
        assert requeued.args == (tmp_path, job) and requeued._timeout_countdown == 20
    else:
        assert slurm.scontrol_calls() == [] and marker["status"] == "submitted"  # rank 0's to write


def test_a_duplicate_slurm_job_fails_leaving_the_training_to_the_job_that_holds_it(tmp_path, monkeypatch,
                                                                                   on_this_host):
    slurm = FakeSlurm(tmp_path, monkeypatch)
    slurm.set("444", "RUNNING")
    monkeypatch.setenv("SLURM_JOB_ID", "555")
    job = _training()
    (tmp_path / job.run_dir).mkdir(parents=True)
    (tmp_path / job.run_dir / "run.lock").write_text('{"host": "node3", "pid": 12, "slurm_job": "444"}')
    _child(monkeypatch, f'touch "{tmp_path}/started"')
    with pytest.raises(JobNotDone, match="another run holds its folder"):  # its afterok dependents never start
        SlurmTask()(tmp_path, job)
    assert not (tmp_path / "started").exists()
