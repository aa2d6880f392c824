"""``make paper EXP=<experiment> SCALE=demo|quick|full`` (``python -m paper exp=<name> scale=<scale>``).

Runs what an experiment file (``configs/experiments/<name>.yaml``) needs and is not done yet, in
dependency order (each training run, then its evaluations), here or on SLURM, and writes the report.
Settings: ``configs/paper.yaml``. Run it again at any time: finished jobs are skipped, a killed
training resumes, and the report is rewritten from what is on disk; on SLURM the jobs still queued or running
are left alone (``slurm.py``).
"""
from __future__ import annotations

import sys
import time
from functools import partial
from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig

from skipless.config import ConfigError, load_config
from skipless.errors import SkiplessError

from .batch import batch_line, is_training
from .experiment import SCALES, ExperimentError, known_experiments, load_experiment
from .jobs import REPO, job_state, plan
from .local import elapsed, run_local
from .preflight import FULL, run_preflight
from .report import write_report
from .slurm import run_overrides, slurm_available, submit_slurm
from .theory import NAME as THEORY, write_theory_report

CLUSTERS = ("auto", "local", "slurm")
MIN_SIGNAL_DELAY_S = 20  # a step, a checkpoint write, submitit's requeue (slurm_task.py keeps 10 s for it)


def experiments_dir(cfg: DictConfig) -> Path:
    """``experiments``, relative to the repository when not absolute (the files ship with it)."""
    path = Path(cfg.experiments)
    return path if path.is_absolute() else REPO / path


def check_settings(cfg: DictConfig) -> str:
    """The cluster to use; one sentence for a setting that cannot work."""
    if not cfg.exp:
        raise ConfigError(f"name an experiment: make paper EXP=<name> (exp=<name>); known: "
                          f"{', '.join(known_experiments(experiments_dir(cfg)))}, {THEORY} (paper/theory.py)")
    if cfg.scale not in SCALES:
        raise ConfigError(f"scale={cfg.scale} is not a scale; expected one of {', '.join(SCALES)}")
    if cfg.preflight.enabled:  # always here, whatever cluster says: it is what runs before a cluster
        if cfg.scale != FULL:
            raise ConfigError(f"PREFLIGHT=1 (preflight.enabled=true) checks the full scale's jobs, not "
                              f"scale={cfg.scale}; expected SCALE=full PREFLIGHT=1")
        return "local"
    if cfg.cluster not in CLUSTERS:
        raise ConfigError(f"cluster={cfg.cluster} is not known; expected one of {', '.join(CLUSTERS)}")
    parallel = cfg.local.parallel
    if not (parallel == "gpus" or (isinstance(parallel, int) and parallel >= 1)):
        raise ConfigError(f"local.parallel={parallel} is neither a positive number nor gpus")
    cluster = cfg.cluster if cfg.cluster != "auto" else ("slurm" if slurm_available() else "local")
    if cluster == "slurm" and not cfg.slurm.partition:
        raise ConfigError("cluster=slurm needs a partition: slurm.partition=<name> (ARGS=\"slurm.partition=gpu\")")
    if cfg.force and cluster != "slurm":
        raise ConfigError("FORCE=1 (force=true) submits again the SLURM jobs still queued or running; on this "
                          "machine make paper runs every job that is not done anyway, so there is nothing to force: "
                          "drop FORCE=1")
    delay, requeues = cfg.slurm.signal_delay_s, cfg.slurm.max_requeues
    if not (isinstance(delay, int) and delay >= MIN_SIGNAL_DELAY_S):
        raise ConfigError(f"slurm.signal_delay_s={delay} is not a whole number of seconds of at least "
                          f"{MIN_SIGNAL_DELAY_S}: a training needs that time to finish its step and write its "
                          "checkpoint")
    if not (isinstance(requeues, int) and requeues >= 0):
        raise ConfigError(f"slurm.max_requeues={requeues} is not a number of requeues (0 or more)")
    return cluster


def run(cfg: DictConfig, say=print) -> dict:
    if cfg.exp == THEORY:  # no training: the seeds' claims computed here, at every scale (paper/theory.py)
        if cfg.scale not in SCALES:
            raise ConfigError(f"scale={cfg.scale} is not a scale; expected one of {', '.join(SCALES)}")
        say(f"report: {write_theory_report(Path(cfg.root), say, cfg.scale)}")
        return {}
    cluster = check_settings(cfg)
    experiment = load_experiment(cfg.exp, experiments_dir(cfg))
    if cfg.preflight.enabled:
        return run_preflight(cfg, experiment, experiments_dir(cfg), say)
    folder = Path(cfg.root) / cfg.scale  # the scale folder: shared training runs, one folder per experiment
    extra = run_overrides(cfg.slurm) if cluster == "slurm" else []
    jobs, skipped = plan(experiment, cfg.scale, folder, extra, list(cfg.exports[cfg.scale]), quick=cfg.quick)
    command = f"make paper EXP={cfg.exp} SCALE={cfg.scale}"
    report = partial(write_report, folder.resolve(), experiment, cfg.scale, jobs, skipped, command)
    say(f"{experiment.title}: {len(jobs)} jobs at scale {cfg.scale} in {folder / cfg.exp}"
        + (f" ({len(skipped)} cells not at this scale)" if skipped else ""))
    if cfg.dry_run:
        for job in jobs:
            state = job_state(folder, job) or "to run"
            say(f"  [{state}] {job.name}: {job.shown()}")
            if is_training(job):
                say(f"      {batch_line(job, cluster, cfg.scale, cfg.slurm)}")
        return {"jobs": jobs, "skipped": skipped}
    if cfg.report_only:
        say(f"report: {report()}")
        return {"jobs": jobs, "skipped": skipped}
    folder.mkdir(parents=True, exist_ok=True)
    if cluster == "slurm":
        sent = submit_slurm(folder.resolve(), jobs, cfg.slurm, report=report, say=say, force=bool(cfg.force))
        ids = {n: j.job_id for n, j in sent.submitted.items()}
        if ids:
            say(f"submitted {len(ids)} SLURM jobs; run `{command}` again later: it submits again only the jobs that "
                "ended without finishing")
        elif sent.queued:
            say(f"nothing to submit: {len(sent.queued)} jobs are still queued or running; run `{command}` again later")
        elif not sent.unknown:
            say("every job is done")
            say(f"report: {report()}")
        return {"jobs": jobs, "skipped": skipped, "slurm": ids, "queued": sent.queued, "unknown": sent.unknown}
    start = time.time()
    state = run_local(folder.resolve(), jobs, cfg.local.parallel, say=say)
    path = report()
    failed = sorted(n for n, s in state.items() if s != "done")
    say(f"{len(jobs) - len(failed)} of {len(jobs)} jobs done in {elapsed(start)}"
        + (f"; not done: {', '.join(failed)}" if failed else "") + f"\nreport: {path}")
    return {"jobs": jobs, "skipped": skipped, "state": state}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        result = run(load_config("paper", argv))
    except (SkiplessError, ExperimentError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: stopped; run the same command again to go on (finished jobs are kept)", file=sys.stderr)
        return 130
    state = result.get("state", {})
    return 1 if any(s != "done" for s in state.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
