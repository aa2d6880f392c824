"""A run's folder (issue 27): an attempt that wrote no checkpoint is started afresh with its files set
aside in ``attempts/<n>/``, and a run holds its folder with ``run.lock`` so a second run under the
same name is refused before it writes anything."""
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest

import skipless.pretrain as pretrain_module
from skipless.errors import EXIT_BUSY
from skipless.pretrain import main
from skipless.training.run_folder import RunFolderTakenError, check_new_run
from tiny_runs import DINO_TINY


def tiny(tmp_path: Path, *extra: str) -> list[str]:
    return [*DINO_TINY, f"data.root={tmp_path / 'data'}", f"run.root={tmp_path / 'runs'}", "run.name=r", *extra]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class CtrlCAtFirstStep(pl.Callback):
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        raise KeyboardInterrupt


def test_an_interrupted_attempt_without_a_checkpoint_is_started_afresh_and_both_messages_say_so(
        tmp_path, capsys, monkeypatch):
    """It used to be a circle: 'holds a run, use RESUME=1', then 'RESUME=1: no checkpoint, start without it'."""
    args, run = tiny(tmp_path), tmp_path / "runs" / "r"
    real = pretrain_module.run_pretraining
    monkeypatch.setattr(pretrain_module, "run_pretraining",
                        lambda method, plan, extra=(): real(method, plan, [*extra, CtrlCAtFirstStep()]))
    handler = signal.getsignal(signal.SIGINT)
    try:
        assert main(args) == 130
    finally:
        signal.signal(signal.SIGINT, handler)  # Lightning ignores further Ctrl-C once it caught one
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: interrupted before any checkpoint was written in {run} (one is written at each epoch end), so there "
        f"is nothing to resume; start again with: make pretrain ARGS=\"{shlex.join(args)}\" (this attempt's files "
        f"move to {run}/attempts/<n>/)")
    attempt = snapshot(run)
    assert json.loads(attempt["summary.json"])["status"] == "interrupted" and "run.lock" not in attempt
    monkeypatch.setattr(pretrain_module, "run_pretraining", real)

    assert main([*args, "run.resume=true"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"error: RESUME=1 but there is no checkpoint to resume at {run}/checkpoints/last.ckpt (one is written at "
        f"each epoch end); run the same command without RESUME=1 (or with RESUME=auto), which starts the run afresh "
        f"(its files are kept "
        f"in {run}/attempts/<n>/)")
    assert snapshot(run) == attempt

    assert main(args) == 0
    out = capsys.readouterr().out
    assert (f"{run} held an attempt with no checkpoint (interrupted): its files (config.yaml, summary.json, tb/) "
            f"are now in {run}/attempts/1, and the run starts afresh") in out
    assert snapshot(run / "attempts" / "1") == attempt  # nothing lost, nothing mixed
    assert json.loads((run / "summary.json").read_text())["status"] == "finished"
    assert (run / "checkpoints" / "last.ckpt").is_file() and not (run / "run.lock").exists()
    assert len(list((run / "tb").rglob("events.out.tfevents.*"))) == 1


def test_which_folders_hold_an_attempt_and_which_a_run_that_is_kept(tmp_path):
    from skipless.training.run_start import nothing_to_resume

    run = tmp_path / "r"
    assert check_new_run(run) is None
    run.mkdir()
    (run / "config.yaml").write_text("run: {}\n")  # killed before the fit wrote a summary
    assert check_new_run(run) == "stopped before it wrote a summary"
    (run / "summary.json").write_text('{"status": "failed"}')
    assert check_new_run(run) == "failed"
    (run / "attempts" / "1").mkdir(parents=True)
    (run / "summary.json").write_text('{"status": "finished"}')  # its checkpoints deleted to save space
    with pytest.raises(RunFolderTakenError, match=r"holds a run with no checkpoint to resume whose summary\.json "
                                                   r"does not say interrupted or failed .* run\.name=r-2"):
        check_new_run(run)
    assert nothing_to_resume(run).endswith(f"{run} holds a run that is kept; start a new run under another name "
                                           "with run.name=r-2 (nothing was written)")
    (run / "summary.json").unlink()
    (run / "config.yaml").unlink()
    (run / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderTakenError, match=r"holds files of no run .*\(notes\.txt\)"):
        check_new_run(run)


def test_a_second_run_under_the_same_name_is_refused_while_the_first_runs(tmp_path, capsys, monkeypatch):
    """Two runs under one name used to both write into the folder (two event files, one backbone.pt)."""
    args, run = tiny(tmp_path), tmp_path / "runs" / "r"
    seen = {}

    class SecondRun(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            before = snapshot(run)
            capsys.readouterr()
            seen["code"] = main(tiny(tmp_path, "model=skip"))
            seen["err"] = capsys.readouterr().err.strip()
            seen["unchanged"] = snapshot(run) == before

    real = pretrain_module.run_pretraining
    monkeypatch.setattr(pretrain_module, "run_pretraining",
                        lambda method, plan, extra=(): real(method, plan, [*extra, SecondRun()]))
    assert main(args) == 0
    lock = run / "run.lock"
    assert seen["code"] == EXIT_BUSY and seen["unchanged"] and len(seen["err"].splitlines()) == 1  # make paper: not failed
    assert seen["err"].startswith(f"error: {run} is held by another run that is still going (pid {os.getpid()} on "
                                  f"host {socket.gethostname()}, started ")
    assert seen["err"].endswith(f": {lock}); wait for it to end, or start this one under another name with "
                                f"run.name=r-2 (if that run is gone, delete {lock}; nothing was written)")
    assert not lock.exists()  # released at the end


def test_a_stale_lock_is_said_and_taken_over_and_an_error_releases_the_lock(tmp_path, capsys):
    from skipless.training.run_lock import RunFolderBusyError, hold_run_folder

    run = tmp_path / "runs" / "r"
    run.mkdir(parents=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock = run / "run.lock"
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": gone.pid, "started": "2025-01-01 00:00:00"}))
    assert main(tiny(tmp_path, "model.global_pool=max3")) == 1  # an error after the lock was taken
    captured = capsys.readouterr()
    assert (f"{lock} was left by a run that is over (pid {gone.pid} no longer runs on this host; it started "
            "2025-01-01 00:00:00); this run takes the folder over") in captured.out
    assert "unknown global_pool 'max3'" in captured.err
    assert list(run.iterdir()) == []  # released: the stale lock is gone with this run's

    run.rmdir()
    assert main(tiny(tmp_path, "model.global_pool=max3")) == 1
    assert not run.exists()  # the folder made for the lock alone is gone with it

    run.mkdir(parents=True)  # a lock from another host cannot be checked from here: refused, with the way out
    lock.write_text(json.dumps({"host": "elsewhere", "pid": gone.pid, "started": "2025-01-01 00:00:00"}))
    with pytest.raises(RunFolderBusyError, match=f"pid {gone.pid} on host elsewhere.* delete {lock}"):
        with hold_run_folder(run):
            pass
    assert json.loads(lock.read_text())["host"] == "elsewhere"


def test_under_ddp_only_the_first_process_holds_the_folder(tmp_path, monkeypatch):
    from skipless.training.run_lock import hold_run_folder

    monkeypatch.setenv("LOCAL_RANK", "1")
    with hold_run_folder(tmp_path / "r"):
        assert not (tmp_path / "r").exists()
    monkeypatch.setenv("LOCAL_RANK", "0")
    with hold_run_folder(tmp_path / "r"):
        assert json.loads((tmp_path / "r" / "run.lock").read_text())["pid"] == os.getpid()
    assert not (tmp_path / "r").exists()
