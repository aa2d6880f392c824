"""A training run on a cluster, with a fake SLURM on the CPU (issue 46): a time-limit signal writes a mid-epoch
checkpoint and requeues the job, and the requeued job, started by the same command on another node, takes its own
lock back, continues (``run.resume`` is auto under SLURM) and ends with the losses of the uninterrupted run;
SIGTERM saves and leaves the requeue to SLURM; timed mid-epoch checkpoints change nothing and never save a
diverged model; a lock is taken over only from a run that is over."""
import json
import signal
import socket

import lightning.pytorch as pl
import pytest
import torch

from fake_slurm import FakeSlurm, SignalAt, as_slurm_job
from skipless.training.divergence import DivergenceError
from skipless.errors import EXIT_BUSY, EXIT_PREEMPTED
from skipless.pretrain import main
from skipless.training.run_lock import RunFolderBusyError, hold_run_folder
from tiny_runs import DINO_TINY, Losses, PoisonAt

# 24 images of 4 per step: 6 steps per epoch, 12 in the run; one loader worker, whose random streams a resume
# must continue (0 workers: tests/test_loader_state.py)
ARGS = [*DINO_TINY, "data.n_train=24", "train.epochs=2", "train.num_workers=1", "train.log_every_n_steps=1"]


def run_args(tmp_path, *extra: str) -> list[str]:
    return [*ARGS, f"data.root={tmp_path / 'data'}", f"run.root={tmp_path / 'runs'}", *extra]


def losses_of(tmp_path, monkeypatch, *extra: str, callbacks=(), host: str = "node-a") -> tuple[int, list[float]]:
    monkeypatch.setattr(socket, "gethostname", lambda: host)
    losses = Losses()
    code = main(run_args(tmp_path, *extra), extra_callbacks=[losses, *callbacks])
    return code, losses.values


def checkpoint(run) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)


def test_a_time_limit_signal_requeues_and_the_job_requeued_on_another_node_ends_with_the_straight_losses(
        tmp_path, monkeypatch, capsys):
    slurm = FakeSlurm(tmp_path, monkeypatch)
    as_slurm_job(monkeypatch, None)
    code, straight = losses_of(tmp_path, monkeypatch, "run.name=straight")
    assert code == 0 and len(straight) == 12

    as_slurm_job(monkeypatch, "4242", restart=0)
    run = tmp_path / "runs" / "r"
    code, first = losses_of(tmp_path, monkeypatch, "run.name=r", callbacks=[SignalAt(3, signal.SIGUSR2)])
    assert code == EXIT_PREEMPTED
    ckpt = checkpoint(run)  # the step the signal came in finished, then last.ckpt was written mid-epoch
    assert ckpt["global_step"] == 4 and ckpt["callbacks"]["LoaderPosition"]["batches_done"] == 4
    assert ckpt["skipless_config"]["run"]["name"] == "r"  # every checkpoint carries the run's config
    assert json.loads((run / "summary.json").read_text())["status"] == "preempted"
    assert not (run / "run.lock").exists()
    assert slurm.scontrol_calls() == ["requeue 4242"]
    err = capsys.readouterr().err
    assert "preempted: SIGUSR2 received: stopped after the checkpoint" in err and "requeued SLURM job 4242" in err

    # SLURM ran the job again on node-b, restart 1; its first start was killed outright there, leaving its lock
    (run / "run.lock").write_text(json.dumps({"host": "node-a", "pid": 1, "started": "earlier", "slurm_job": "4242",
                                              "slurm_restart": 0}))
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    code, second = losses_of(tmp_path, monkeypatch, "run.name=r", host="node-b")  # the same command: no RESUME=
    assert code == 0
    assert first + second == straight  # exact: one process, the same kernels
    out = capsys.readouterr().out
    assert "it is this SLURM job 4242, requeued (restart 1)" in out
    assert ("resume   run.resume auto under SLURM job 4242, restart 1: continues " in out
            and "mid-epoch: 4 of 6 batches done" in out)
    resumes = [json.loads(line) for line in (run / "resumes.jsonl").read_text().splitlines()]
    assert len(resumes) == 1 and "SLURM job 4242, restart 1" in resumes[0]["said"]
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    assert slurm.scontrol_calls() == ["requeue 4242"]  # finished: not requeued again


def test_sigterm_saves_and_leaves_the_requeue_to_slurm_and_timed_checkpoints_change_nothing(tmp_path, monkeypatch):
    slurm = FakeSlurm(tmp_path, monkeypatch)
    as_slurm_job(monkeypatch, "99")
    run = tmp_path / "runs" / "t"
    code, first = losses_of(tmp_path, monkeypatch, "run.name=t", callbacks=[SignalAt(8, signal.SIGTERM)])
    assert code == EXIT_PREEMPTED and slurm.scontrol_calls() == []  # pre-emption or scancel: not requeued by the run
    assert checkpoint(run)["global_step"] == 9 and len(first) == 9

    class LastCheckpointStep(pl.Callback):  # the step of last.ckpt at each step's start
        def __init__(self):
            self.steps = []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.steps.append(checkpoint(run)["global_step"])

    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the run's handlers are gone with it
    seen = LastCheckpointStep()
    # resumed in epoch 2, with a checkpoint after every step (every 1e-9 minutes)
    code, second = losses_of(tmp_path, monkeypatch, "run.name=t", "train.checkpoint_every_minutes=1e-9",
                             callbacks=[seen])
    assert code == 0 and len(first + second) == 12
    assert seen.steps == [9, 10, 11]  # each step's start finds the checkpoint of the step before it

    as_slurm_job(monkeypatch, None)
    code, straight = losses_of(tmp_path, monkeypatch, "run.name=straight")
    assert first + second == straight  # neither the stop nor the timed checkpoints changed a loss


def test_a_mid_epoch_checkpoint_never_saves_a_diverged_model(tmp_path, monkeypatch):
    as_slurm_job(monkeypatch, None)
    monkeypatch.setattr(socket, "gethostname", lambda: "node-a")
    from skipless.config import load_config
    from skipless.pretrain import pretrain

    # the module reads its losses every 10 steps: only the check before the save can catch step 2's
    cfg = load_config("pretrain", run_args(tmp_path, "run.name=poisoned", "train.checkpoint_every_minutes=1e-9",
                                           "train.log_every_n_steps=10"))
    with pytest.raises(DivergenceError, match="training diverged at step 2"):
        pretrain(cfg, extra_callbacks=[PoisonAt(2)])
    assert checkpoint(tmp_path / "runs" / "poisoned")["global_step"] == 2  # the last good step's, not the poisoned one


@pytest.mark.parametrize("queue, taken", [("777 RUNNING", False), ("777 PENDING", False), ("777 COMPLETED", True),
                                          ("", True)])
def test_a_lock_of_another_slurm_job_is_taken_over_only_once_squeue_says_it_is_over(tmp_path, monkeypatch, capsys,
                                                                                  queue, taken):
    slurm = FakeSlurm(tmp_path, monkeypatch)
    as_slurm_job(monkeypatch, "4242")
    if queue:
        slurm.set(*queue.split())
    run = tmp_path / "r"
    run.mkdir()
    (run / "run.lock").write_text(json.dumps({"host": "node-z", "pid": 1, "started": "then", "slurm_job": "777",
                                              "slurm_restart": 0}))
    if not taken:
        with pytest.raises(RunFolderBusyError, match=r"SLURM job 777.*delete .*run\.lock") as err:
            with hold_run_folder(run):
                pass
        assert err.value.exit_status == EXIT_BUSY
        return
    with hold_run_folder(run):
        assert json.loads((run / "run.lock").read_text())["slurm_job"] == "4242"
    said = capsys.readouterr().out
    assert ("its SLURM job 777 has ended (COMPLETED)" if queue else "its SLURM job 777 has left the queue") in said


def test_a_lock_whose_job_squeue_cannot_tell_is_kept_and_a_torchrun_restart_takes_its_own_back(tmp_path, monkeypatch):
    slurm = FakeSlurm(tmp_path, monkeypatch)
    as_slurm_job(monkeypatch, "4242")
    slurm.down()  # squeue cannot reach the controller
    run = tmp_path / "r"
    run.mkdir()
    (run / "run.lock").write_text(json.dumps({"host": "node-z", "pid": 1, "slurm_job": "777", "slurm_restart": 0}))
    with pytest.raises(RunFolderBusyError):
        with hold_run_folder(run):
            pass

    as_slurm_job(monkeypatch, None)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "exp1")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    for restart, taken in ((1, False), (0, True)):  # the same restart may still run; an earlier one is over
        (run / "run.lock").write_text(json.dumps({"host": "node-z", "pid": 1, "torchrun_run": "exp1",
                                                  "torchrun_restart": restart}))
        if taken:
            with hold_run_folder(run):
                assert json.loads((run / "run.lock").read_text())["torchrun_restart"] == 1
        else:
            with pytest.raises(RunFolderBusyError):
                with hold_run_folder(run):
                    pass


def test_ddp_waits_train_collective_timeout_minutes_and_rank_0s_diagnostics_take_at_most_half(tmp_path):
    from skipless.config import ConfigError, load_config
    from skipless.pretrain import check_keys
    from skipless.training.diagnostics_callbacks import budget_of
    from skipless.training.run_plan import plan_run
    from skipless.training.trainer import strategy_of_plan

    def plan(*extra):
        cfg = load_config("pretrain", ["train.accelerator=cpu", "diagnostics.budget_s=null", *extra])
        check_keys(cfg)
        return plan_run(cfg, tmp_path)

    ddp = plan("train.devices=2", "train.collective_timeout_minutes=90")
    assert strategy_of_plan(ddp).__class__.__name__ == "DDPStrategy"
    assert strategy_of_plan(ddp)._timeout.total_seconds() == 90 * 60
    assert budget_of(ddp) == 45 * 60  # null under DDP: half the timeout
    assert budget_of(plan("train.devices=1")) is None  # one process waits for nobody: no budget, as the paper
    assert budget_of(plan("train.devices=2", "diagnostics.budget_s=60")) == 60
    with pytest.raises(ConfigError, match=r"diagnostics\.budget_s=1000 is more than half of "
                                          r"train\.collective_timeout_minutes=30 \(1800 s\).*expected at most 900"):
        plan("train.devices=2", "diagnostics.budget_s=1000")
    plan("train.devices=1", "diagnostics.budget_s=1000")  # one process: any budget


MAE = ["ssl=mae", "model=decayed", "model.arch=vit_tiny", "model.depth=1", "model.img_size=32", "mae.input_size=32",
       "mae.decoder.dim=32", "mae.decoder.depth=1", "mae.decoder.heads=2", "mae.reconstructions_every_n_epochs=1",
       "mae.reconstruction_images=2", "train.batch_size_per_device=4", "train.knn_every_n_epochs=0",
       "optim.warmup_epochs=1", "diagnostics.every_n_epochs=0", "diagnostics.signals_every_n_steps=0",
       "diagnostics.rank_images=0", "train.precision=32-true"]


@pytest.mark.parametrize("entry", ["mae", "train"])
def test_mae_and_supervised_runs_resume_mid_epoch_with_the_straight_losses(tmp_path, monkeypatch, entry):
    """MAE draws its masks on the training process's generator and the classifier its mixup on NumPy's: both
    come back with ``RNGState``, the images with the loader's position."""
    from skipless import pretrain, train
    from tiny_runs import SUP_TINY

    as_slurm_job(monkeypatch, None)
    base = MAE if entry == "mae" else SUP_TINY
    args = [*base, "data.n_train=24", "train.epochs=2", "train.num_workers=1", "train.log_every_n_steps=1",
            f"data.root={tmp_path / 'data'}", f"run.root={tmp_path / 'runs'}"]
    run_main = pretrain.main if entry == "mae" else train.main

    def losses(*extra, callbacks=()):
        recorder = Losses()
        return run_main([*args, *extra], extra_callbacks=[recorder, *callbacks]), recorder.values

    code, straight = losses("run.name=straight")
    assert code == 0 and len(straight) == 12
    code, first = losses("run.name=r", callbacks=[SignalAt(8, signal.SIGUSR1)])
    assert code == EXIT_PREEMPTED and len(first) == 9
    code, second = losses("run.name=r", "run.resume=true")
    assert code == 0 and first + second == straight
