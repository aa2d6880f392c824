"""A fake SLURM on the PATH for the ``make paper`` and cluster-run tests: ``sbatch`` records each submission script
and puts the job in a queue file as PENDING, ``squeue`` answers ``--noheader --format=%i %T --jobs=<ids>`` from that
file as squeue does (exit 1 with "Invalid job id specified" when it lists none of them, or "Unable to contact slurm
controller" once ``down()`` was called), ``scontrol`` records its calls. Tests change the queue with ``set`` and
``forget``. ``as_slurm_job`` runs the test process as a job's n-th start (``SLURM_JOB_ID``, ``SLURM_RESTART_COUNT``),
and ``SignalAt`` signals the training process at a chosen step, as a scheduler does at a time limit or a
pre-emption."""
from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import lightning.pytorch as pl

SBATCH = """#!/bin/sh
n=$(cat "{folder}/next" 2>/dev/null || echo 1000)
echo $((n + 1)) > "{folder}/next"
cp "$1" "{folder}/job-$n.sh"
echo "$n PENDING" >> "{folder}/queue"
echo "Submitted batch job $n"
"""
SQUEUE = """#!/bin/sh
echo "$*" >> "{folder}/squeue-calls"
if [ -e "{folder}/down" ]; then
  echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1
fi
for arg in "$@"; do case "$arg" in --jobs=*) ids="${{arg#--jobs=}}";; esac; done
found=0
for id in $(echo "$ids" | tr ',' ' '); do
  line=$(grep "^$id " "{folder}/queue" 2>/dev/null | tail -n 1)
  if [ -n "$line" ]; then echo "$line"; found=1; fi
done
if [ $found = 0 ]; then echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1; fi
"""
SCONTROL = """#!/bin/sh
echo "$*" >> "{folder}/scontrol-calls"
"""
SRUN = "#!/bin/sh\nexit 1\n"  # submitit looks for it; the scripts are only read, never run


class FakeSlurm:
    def __init__(self, tmp_path: Path, monkeypatch) -> None:
        self.folder = tmp_path / "slurm-state"
        self.folder.mkdir()
        bin_dir = tmp_path / "slurm-bin"
        bin_dir.mkdir()
        for name, text in (("sbatch", SBATCH), ("squeue", SQUEUE), ("scontrol", SCONTROL), ("srun", SRUN)):
            path = bin_dir / name
            path.write_text(text.format(folder=self.folder))
            path.chmod(path.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def _lines(self, name: str) -> list[str]:
        path = self.folder / name
        return path.read_text().splitlines() if path.is_file() else []

    def queue(self) -> dict[str, str]:
        """``{job id: state}``: the last line of each job wins."""
        return dict(line.split() for line in self._lines("queue"))

    def set(self, job_id: str, state: str) -> None:
        with (self.folder / "queue").open("a") as f:
            f.write(f"{job_id} {state}\n")

    def forget(self, job_id: str) -> None:
        """The job has left the queue (squeue no longer lists it)."""
        kept = [line for line in self._lines("queue") if line.split()[0] != str(job_id)]
        (self.folder / "queue").write_text("".join(f"{line}\n" for line in kept))

    def down(self) -> None:
        (self.folder / "down").touch()

    def scripts(self) -> dict[str, str]:
        """``{job id: sbatch script}`` of every submission."""
        return {p.stem.split("-")[1]: p.read_text() for p in self.folder.glob("job-*.sh")}

    def squeue_calls(self) -> list[str]:
        return self._lines("squeue-calls")

    def scontrol_calls(self) -> list[str]:
        return self._lines("scontrol-calls")


def sbatch_flags(text: str) -> dict[str, str]:
    """The ``#SBATCH --key=value`` lines of a script."""
    lines = [l[len("#SBATCH --"):] for l in text.splitlines() if l.startswith("#SBATCH --")]
    return dict(l.split("=", 1) if "=" in l else (l, "") for l in lines)


def as_slurm_job(monkeypatch, job: str | None = None, restart: int = 0) -> None:
    """Run this process as the ``restart``-th start of SLURM job ``job`` (None: under no scheduler at all)."""
    for var in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(var, raising=False)
    if job is not None:
        monkeypatch.setenv("SLURM_JOB_ID", job)
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restart))


class SignalAt(pl.Callback):
    """Sends ``sig`` to this process at the start of optimizer step ``step`` (on ``ranks`` only, default all)."""

    def __init__(self, step: int, sig: int = signal.SIGUSR2, ranks: tuple[int, ...] | None = None) -> None:
        self.step, self.sig, self.ranks = step, sig, ranks

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step and (self.ranks is None or trainer.global_rank in self.ranks):
            os.kill(os.getpid(), self.sig)
