"""The jobs of an experiment at one scale, what each one's "done" means, and running one.

A job is one command (``python -m skipless.pretrain key=value ...`` or ``python -m skipless.eval.probe ...``).
Its identity is the *resolved* config it runs (``load_config`` of its entry with its overrides, the
keys that only say where things go left out): a job is done when its marker (``jobs/...json``)
records that same config hash and its outputs exist. An edited
recipe or experiment file changes the hash, so the job runs again, and it runs into a new folder (a
training run's folder ends with its hash), so one run never overwrites another.

What survives a kill: a training (a run, or a fine-tuning evaluation) always runs with ``run.resume=auto
run.requeue=false``: it continues from its newest checkpoint when its folder has one, else starts, setting an
attempt without a checkpoint aside (``skipless/training/run_start.py``); a signal stops it after a
checkpoint (exit status 75: marker ``preempted``), and a training that finds another live run holding its
folder (exit status 73) leaves that run's marker alone (``runner.py``). An evaluation starts again in its
own output folder. Done jobs are never rerun.

Training runs are shared by the experiments of a scale: the same config is the same folder (an existing
folder ending with the config's hash is reused whatever its cell is called), so Table 2's runs serve
Tables 5-6 too. Layout of ``runs/paper/<scale>/`` (paths in a ``Job`` are
relative to it)::

    runs/<cell>-<hash>/           the training runs (run.root), each a normal run folder
    jobs/runs/<cell>-<hash>.json  their markers: status, config hash, command, seconds, error
    logs/runs/<cell>-<hash>.log   their output
    <experiment>/evals/<job>/     each evaluation's out= folder (<backbone>/<result>.json ...); a fine-tuning's run.root (run/)
    <experiment>/jobs/<job>.json  the evaluations' markers
    <experiment>/logs/<job>.log
    <experiment>/report.md, figures/   the report (``report.py``)
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from skipless.atomic import atomic_write
from skipless.config import leaf_values, load_config

from .experiment import EVAL_ENTRIES, FINETUNE, RUN_ENTRIES, STEP_ENTRIES, Experiment, ExperimentError
from .quick import QUICK, quick_epochs, quick_overrides

# Keys that say where a job writes or how it reports, not what it computes: left out of its identity.
PLACE_KEYS = ("run.name", "run.root", "run.resume", "run.requeue", "train.checkpoint_every_minutes", "out",
              "runs_root", "progress")
# Keys added after jobs had run, each with the value that computes what the config did before the key existed:
# left out of the identity while they hold it, so a job's hash (and the run folder make paper finds) stays the
# one it had, and changes only for a job that sets the key otherwise.
LATER_KEYS: dict[str, Any] = {
    "model.init_args.qk": None,  # issue 49: Eq. 11's reading, null = head, the one reading before
    "image_fraction": None,  # issue 50: make conditioning's share of the val split (seeds/003 Fig. 3), null = num_images
    "views": 1,  # issue 50: make linear's feature sets per image, 1 = the one centre crop of before
    "spectrum_ends": None,  # issue 50: make conditioning's matrix-free spectrum ends (seeds/003 Figs. 7-8), null = none
    "optim.lr_drops": [],  # issue 50: the supervised lr's step schedule (Huh et al.'s setup), [] = the cosine before
}
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Job:
    """One command of an experiment.

    ``name``: unique in the experiment. ``labels``: the axis values of its cell (runs' axes, and for
    evaluations ``epoch`` and the evaluation's axes). ``depends``: the jobs that must be done first (an
    evaluation's training run). Paths are relative to the scale folder: ``marker`` and ``log``;
    ``outputs``, files that exist once it is done; ``result``, an evaluation's result glob.
    """

    name: str
    kind: str  # "run" or "eval"
    entry: str
    overrides: tuple[str, ...]
    labels: dict[str, str]
    config_hash: str
    marker: str
    log: str
    depends: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    result: str | None = None
    evaluation: str | None = None
    run_dir: str | None = None  # a training job's run folder

    @property
    def module(self) -> str:
        return {**RUN_ENTRIES, **EVAL_ENTRIES}[self.entry]

    def command(self) -> list[str]:
        return [sys.executable, "-m", self.module, *self.overrides]

    def shown(self) -> str:
        """The command as a user types it."""
        return " ".join(["python -m", self.module, *(_quote(o) for o in self.overrides)])


def _quote(word: str) -> str:
    return f'"{word}"' if any(c in word for c in " []{}") else word


def job_config(entry: str, overrides: list[str]) -> DictConfig:
    """The config a job of ``entry`` runs with ``overrides``, resolved here. A fine-tuning's architecture is
    its checkpoint's, read when it runs (``skipless/finetune.py``): placeholders stand for it, the checkpoint
    itself being ``finetune.ckpt``."""
    if entry == FINETUNE:
        overrides = ["model.name=checkpoint", "model.residual=skip", *overrides]
    return load_config(entry, overrides)


def config_hash(entry: str, overrides: list[str]) -> str:
    """Eight hex digits of the resolved config (``job_config``), without the keys that only place outputs."""
    cfg = job_config(entry, overrides)
    values = {k: v for k, v in leaf_values(cfg).items()
              if k not in PLACE_KEYS and not (k in LATER_KEYS and v == LATER_KEYS[k])}
    text = json.dumps(values, sort_keys=True, default=str)
    return hashlib.sha256(f"{entry}\n{text}".encode()).hexdigest()[:8]


def _slug(labels: dict[str, str]) -> str:
    return "-".join(str(v) for v in labels.values()) or "run"


def _existing_run(base: Path, digest: str) -> str | None:
    """The folder name of a training run already started with this config hash, whatever the cell that
    started it calls it (Table 2's ``skipless`` is Tables 5-6's ``skipless+init``): one config, one run."""
    found = sorted(p.name for p in (base / "runs").glob(f"*-{digest}") if p.is_dir())
    return found[0] if found else None


def plan(experiment: Experiment, scale: str, base: Path, run_extra: list[str] = (), exports: list[int] = (),
         quick: Any = None) -> tuple[list[Job], list[dict[str, Any]]]:
    """(the jobs of ``experiment`` at ``scale`` in dependency order, the cells the scale does not run).

    ``base`` is the scale folder (``runs/paper/<scale>``); paths in the jobs' overrides are absolute so
    a job runs the same from any working directory (a SLURM node's included). ``run_extra``: overrides
    added to every training run and fine-tuning (the devices of a SLURM job). ``exports``: the epochs every run exports
    at this scale (``paper.exports``) besides the experiment's own, so that experiments that evaluate
    different checkpoints of the same training share it (the exports are part of its config).
    ``quick``: at the quick scale, the ``quick`` section of the ``paper`` config (None: the file's),
    each entry's overrides appended to every job of it (``quick.py``)."""
    base = base.resolve()
    runs, skipped = [], []
    shrink = quick_overrides(quick) if scale == QUICK else {}
    entry = experiment.runs.entry
    checkpoints: dict[str, list[int]] = {}  # run job name -> the epochs its evaluations read
    for labels, overrides in experiment.runs.cells(scale):
        if overrides is None:
            skipped.append({"kind": "run", **labels})
            continue
        tail = shrink.get(entry, [])
        if entry in STEP_ENTRIES:  # steps, not epochs: no checkpoints of epochs, only the last backbone.pt
            epochs, extra = [], []
        else:
            length = int(load_config(entry, [*overrides, *tail, *run_extra]).train.epochs)
            epochs = experiment.epochs.get(scale, [])
            if scale == QUICK:  # the demo's checkpoints at the same fraction of the shortened run
                epochs = quick_epochs(epochs, int(load_config(entry, [*overrides, *run_extra]).train.epochs), length)
            late = [e for e in epochs if e > length]
            if late:
                raise ExperimentError(f"{experiment.name}: the {scale} runs train {length} epochs, so they cannot give "
                                      f"the checkpoints of epochs {late} that runs.epochs.{scale} asks for")
            exported = sorted({*epochs, *(e for e in exports if e <= length)})
            extra = [f"train.export_epochs=[{','.join(map(str, exported))}]"] if exported else []
        args = [*overrides, *tail, *extra, *run_extra]
        digest = config_hash(entry, args)
        run_name = _existing_run(base, digest) or f"{_slug(labels)}-{digest}"
        run_dir = f"runs/{run_name}"
        outputs = ["backbone.pt", *(f"backbone-epoch{e}.pt" for e in epochs)]
        name = f"{entry}-{_slug(labels)}"
        checkpoints[name] = epochs
        runs.append(Job(name=name, kind="run", entry=entry,
                        overrides=(*args, f"run.root={base / 'runs'}", f"run.name={run_name}"),
                        labels=dict(labels), config_hash=digest, marker=f"jobs/runs/{run_name}.json",
                        log=f"logs/runs/{run_name}.log", outputs=tuple(f"{run_dir}/{o}" for o in outputs),
                        run_dir=run_dir))
    evals = []
    here = experiment.name
    for ev_name, ev in experiment.evaluations.items():
        for run in runs:
            for epoch in checkpoints[run.name] or [None]:
                backbone = base / run.run_dir / (f"backbone-epoch{epoch}.pt" if epoch else "backbone.pt")
                for labels, overrides in ev.cells(scale):
                    all_labels = {**run.labels, "epoch": str(epoch or "last"), **labels}
                    if overrides is None:
                        skipped.append({"kind": ev_name, **all_labels})
                        continue
                    name = f"{ev_name}-{_slug(all_labels)}"
                    folder = base / here / "evals" / name
                    if ev.entry == FINETUNE:  # a training from the backbone, in the evaluation's folder: run/
                        # ... on the devices of a training (a SLURM job of slurm.nodes x gpus_per_node, slurm.py)
                        args = [*overrides, *shrink.get(ev.entry, []), f"finetune.ckpt={backbone}", *run_extra]
                        where = (f"run.root={folder}", "run.name=run")
                    else:
                        # random_floor=false: an experiment names its random cells itself (a floor per job would
                        # double every evaluation's cost); a cell's own overrides come after and win.
                        args = ["random_floor=false", *overrides, *shrink.get(ev.entry, []), f"ckpt={backbone}"]
                        where = (f"out={folder}",)
                    evals.append(Job(name=name, kind="eval", entry=ev.entry,
                                     overrides=(*args, *where), labels=all_labels,
                                     config_hash=config_hash(ev.entry, args), marker=f"{here}/jobs/{name}.json",
                                     log=f"{here}/logs/{name}.log", depends=(run.name,),
                                     result=f"{here}/evals/{name}/{ev.result}", evaluation=ev_name))
    names = [j.name for j in runs + evals]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ExperimentError(f"{experiment.name}: two cells share the job names {duplicated}; give their axes "
                         "distinct values")
    return runs + evals, skipped


# ---- state ----------------------------------------------------------------------------------------------
def marker_path(folder: Path, job: Job) -> Path:
    return folder / job.marker


def read_marker(folder: Path, job: Job) -> dict[str, Any] | None:
    try:
        return json.loads(marker_path(folder, job).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def result_files(folder: Path, job: Job) -> list[Path]:
    return sorted(folder.glob(job.result)) if job.result else []


def outputs_exist(folder: Path, job: Job) -> bool:
    return all((folder / o).is_file() for o in job.outputs) and (not job.result or bool(result_files(folder, job)))


def is_done(folder: Path, job: Job) -> bool:
    """Finished with this very config: its marker says done with the same hash, and its outputs exist."""
    return job_state(folder, job) == "done"


def marker_status(marker: dict[str, Any]) -> str | None:
    """The status a marker records, except that a job marked running whose process on this host is
    gone (killed with its ``make paper``) is ``interrupted``: the next call reruns or resumes it. A job
    running on another host (a SLURM node) is taken at its word."""
    status = marker.get("status")
    if status == "running" and marker.get("host") == socket.gethostname() and marker.get("pid"):
        try:
            os.kill(int(marker["pid"]), 0)
        except ProcessLookupError:
            return "interrupted"
        except PermissionError:  # alive, another user's
            pass
    return status


def job_state(folder: Path, job: Job) -> str | None:
    """``done``, or what the marker of this very config says (running, interrupted, failed, blocked, preempted,
    submitted); None when there is nothing to say (never run, another config's marker, or marked done
    with its outputs gone). The one reading of a job's state for the dry run and the report."""
    marker = read_marker(folder, job) or {}
    if marker.get("config_hash") != job.config_hash:
        return None
    status = marker_status(marker)
    return None if status == "done" and not outputs_exist(folder, job) else status


def put_marker(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(record, indent=1) + "\n"))


def write_marker(folder: Path, job: Job, status: str, **extra: Any) -> None:
    record = {"job": job.name, "status": status, "config_hash": job.config_hash, "command": job.shown(),
              "labels": job.labels, "date": time.strftime("%Y-%m-%d %H:%M:%S"), **extra}
    put_marker(marker_path(folder, job), record)


def error_line(log: Path) -> str:
    """The error a failed job printed: its last ``error: ...`` line (the suite's one-sentence errors),
    else its last non-empty line."""
    lines = [l.strip() for l in log.read_text(errors="replace").splitlines() if l.strip()]
    errors = [l for l in lines if l.startswith("error:")]
    return (errors or lines or ["(no output)"])[-1]


def job_record(job: Job) -> dict[str, Any]:
    return asdict(job)
