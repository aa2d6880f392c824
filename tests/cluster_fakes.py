"""A fake SLURM for the tests: ``squeue`` answering from a file the test writes, ``scontrol`` recording its calls,
and the environment of a job (``SLURM_JOB_ID``, ``SLURM_RESTART_COUNT``) set by monkeypatch; and a callback that
signals its own process at a chosen step, as a scheduler does at a time limit or a pre-emption."""
from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import lightning.pytorch as pl

# squeue --noheader --format="%i %T" --jobs=<ids>: the lines of queue.txt whose id is asked for; none known is
# squeue's "Invalid job id specified" (exit 1), as skipless.training.scheduler.squeue_states expects
FAKE_SQUEUE = """#!/bin/sh
ids=""
for a in "$@"; do case "$a" in --jobs=*) ids=$(echo "${a#--jobs=}" | tr ',' ' ');; esac; done
found=0
for id in $ids; do
  line=$(grep "^$id " "{folder}/queue.txt" 2>/dev/null) && { echo "$line"; found=1; }
done
[ $found = 1 ] || { echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; }
"""
FAKE_SCONTROL = """#!/bin/sh
echo "$@" >> "{folder}/scontrol.log"
"""


def fake_slurm(tmp_path: Path, monkeypatch, job: str | None = "4242", restart: int = 0) -> Path:
    """Put ``squeue`` and ``scontrol`` on the PATH and, with ``job``, run this process as that SLURM job's
    ``restart``-th start; returns the folder of ``queue.txt`` (write ``<id> <STATE>`` lines) and ``scontrol.log``."""
    folder = tmp_path / "slurm"
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    for name, text in (("squeue", FAKE_SQUEUE), ("scontrol", FAKE_SCONTROL)):
        script = folder / "bin" / name
        script.write_text(text.replace("{folder}", str(folder)))
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}")
    for var in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(var, raising=False)
    if job is not None:
        monkeypatch.setenv("SLURM_JOB_ID", job)
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))
    return folder


def scontrol_calls(folder: Path) -> list[str]:
    log = folder / "scontrol.log"
    return log.read_text().splitlines() if log.is_file() else []


class SignalAt(pl.Callback):
    """Sends ``sig`` to this process at the start of optimizer step ``step`` (on ``ranks`` only, default all)."""

    def __init__(self, step: int, sig: int = signal.SIGUSR2, ranks: tuple[int, ...] | None = None) -> None:
        self.step, self.sig, self.ranks = step, sig, ranks

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step and (self.ranks is None or trainer.global_rank in self.ranks):
            os.kill(os.getpid(), self.sig)
