"""``make paper EXP=<name> SCALE=full PREFLIGHT=1``: the full-size pre-flight of an experiment, on this machine.

Before any cluster hour: every job of the experiment's full scale runs here once, in dependency order,
at the paper's model, crop and multi-crop sizes, on fake datasets laid out as the real ones; then it
prints per job passed or its one-sentence error, the last step's time, the memory per image, and the
recipe's GPU-hours estimated from its FLOPs (``gpu_hours.py``: an estimate, and said so). Settings:
``preflight`` in ``configs/paper.yaml``.

How each job is changed, and nothing else (``preflight_checks``):

- trainings run ``preflight.steps`` optimizer steps (2) as epoch 1 of the real schedule
  (``train.max_steps`` and ``train.limit_train_batches``, ``train.epochs`` untouched), in one process
  (``train.devices=1 train.num_nodes=1``) at ``preflight.batch`` images per device (null: 2 on a CPU,
  the recipe's own on a GPU; ``train.global_batch=null`` where the config has that key), export
  ``backbone-epoch1.pt`` (``train.export_epochs=[1]``), and take ``preflight.pretrain`` /
  ``preflight.train`` last (fewer loader workers, the monitors on fewer images). They run through
  ``step_meter.py``, which times the steps and the memory each added.
- evaluations read that ``backbone-epoch1.pt`` in place of the checkpoint of their epoch (200, 300,
  800 ...), with ``preflight.<evaluator>`` last (one epoch of the heads' training). Evaluations of one
  training that differ only in their epoch are then one command: it runs once, its row naming the
  others it stands for (Fig. 2's 15 epochs x 7 probes are 7 jobs per training). A fine-tuning
  (``make finetune``) is a training too: the training's batch, steps and single process as well.
- the language model (``make lm``, Table 7) has steps, not epochs: its trainings run the same ``preflight.steps``
  at ``preflight.batch`` sequences in one process and write ``backbone.pt`` at their last step, which its
  zero-shot evaluations read; its data is C4's layout at the recipe's shard counts and the five tasks in
  ``data/lm-val`` (``fake_text.py``, sized by ``write_text_data``), its GPU-hours steps x sequences x FLOPs per
  sequence.
- every job runs in the pre-flight's folder (``<preflight.root>/<exp>-<date>-<time>/``), with the
  environment variables the configs read as data roots (``${oc.env:NAME,default}``: DATA_ROOT,
  IMAGENET_ROOT, IMAGENET100_ROOT ...) unset, so each root is its default, ``data/<dataset>``, relative
  to that folder, where ``fake_layouts.py`` wrote its dataset (``data/default`` links the repository's
  embedded default). Nothing is written in ``runs/paper``; the folder can be removed whole.

Per job the table gives: passed, or the job's one-sentence error (its last ``error:`` line, else its
last line: ``jobs.error_line``); its wall time and the CPU time and largest resident set of its
processes (``wait4``); for a training the batch, the last step's seconds and the memory that step added
per image, its activations (``step_meter.py`` says how both are measured), and the estimate.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from omegaconf import DictConfig, OmegaConf
from tokenizers import Tokenizer

from skipless.config import CONFIG_DIR, ConfigError, load_config, load_group
from skipless.data.generator.fake_layouts import FakeSizes, check_sizes, write_fake_datasets
from skipless.data.generator.fake_text import write_fake_c4, write_fake_tasks
from skipless.language.module import lm_context

from .experiment import EVAL_ENTRIES, FINETUNE, RUN_ENTRIES, Experiment
from .gpu_hours import Estimate, estimate, peak_tflops
from .jobs import PLACE_KEYS, REPO, Job, error_line, plan

FULL = "full"
EXPORT_EPOCH = 1  # the epoch the pre-flight's steps are, and the backbone-epoch<N>.pt every evaluation reads
LM = "lm"  # the language model (seed 000's App. A.8): step-based, it writes backbone.pt at its last step
# A fixed mmap threshold turns off glibc's dynamic one, so large freed blocks go back to the system and a CPU
# step's resident set starts from what is live (step_meter.py measures the memory a step adds from there).
CPU_ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "131072"}


@dataclass
class Check:
    """One job of the experiment as the pre-flight runs it, and what came of it."""

    job: Job
    command: list[str]
    run_dir: Path | None = None      # a training's run folder; an evaluation's training's
    meter: Path | None = None        # a training's step_meter.py JSON
    batch: int | None = None
    status: str = "not run"          # passed | failed | blocked | not run (the pre-flight was stopped first)
    error: str = ""
    seconds: float = 0.0
    cpu_seconds: float = 0.0         # user + system time of the job's processes (a load-independent measure)
    peak_rss_bytes: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)
    estimate: Estimate | str | None = None
    covers: list[str] = field(default_factory=list)  # evaluations of other epochs: the same command on epoch 1

    @property
    def name(self) -> str:
        return self.job.name + (f" (+{len(self.covers)} other epochs)" if self.covers else "")

    @property
    def last_step(self) -> dict[str, Any] | None:
        return self.steps[-1] if self.steps else None


def root_variables(*folders: Path) -> list[str]:
    """The environment variables the YAML files under ``folders`` read (``${oc.env:NAME,...}``)."""
    names = set()
    for folder in folders:
        for path in Path(folder).rglob("*.yaml"):
            names.update(re.findall(r"oc\.env:([A-Za-z_]\w*)", path.read_text()))
    return sorted(names)


@contextlib.contextmanager
def unset(names: list[str]) -> Iterator[None]:
    """``names`` out of this process's environment for the block (the configs then resolve their defaults)."""
    saved = {n: os.environ.pop(n) for n in names if n in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def check_preflight(settings: DictConfig) -> FakeSizes:
    """The fake datasets' sizes; every other setting that cannot work is one sentence, before anything is written."""
    if settings.batch is not None and not (isinstance(settings.batch, int) and settings.batch >= 1):
        raise ConfigError(f"preflight.batch={settings.batch} is not a number of images; expected a positive integer "
                          "(PREFLIGHT_BATCH=2) or null")
    if not (isinstance(settings.steps, int) and settings.steps >= 1):
        raise ConfigError(f"preflight.steps={settings.steps}: expected a positive number of optimizer steps")
    for entry in (*RUN_ENTRIES, *EVAL_ENTRIES):
        words = settings[entry]
        if not all(isinstance(w, str) and re.fullmatch(r"[\w.\-]+=.*", w) for w in words):
            raise ConfigError(f"preflight.{entry}: expected a list of key=value overrides, got {list(words)!r}")
    if peak_tflops(str(settings.gpu)) is None:
        raise ConfigError(f"preflight.gpu={settings.gpu} is not a GPU of skipless/flops.py's PEAK_BF16_TFLOPS; expected "
                          "one of its names (H100 SXM, A100 ...)")
    for method, mfu in settings.mfu.items():
        if not 0 < float(mfu) <= 1:
            raise ConfigError(f"preflight.mfu.{method}={mfu}: expected a fraction of the peak, in (0, 1]")
    d = settings.data
    sizes = FakeSizes(int(d.classes), int(d.train_per_class), int(d.val_per_class))
    check_sizes(sizes, int(d.scale))
    return sizes


def _without(words: tuple[str, ...], keys: tuple[str, ...]) -> list[str]:
    return [w for w in words if w.split("=", 1)[0] not in keys]


def export_of(entry: str) -> str:
    """The backbone file a training of ``entry`` writes for its evaluations in the pre-flight: the epoch-1 export,
    or the language model's ``backbone.pt`` (written at its last step; it has no epochs)."""
    return "backbone.pt" if entry == LM else f"backbone-epoch{EXPORT_EPOCH}.pt"


def _steps_in_one_process(batch: int, steps: int, global_batch: bool) -> list[str]:
    """A training's ``steps`` steps at ``batch`` images in one process (the per-device sizes are what is checked);
    ``global_batch``: the config has that key, which would otherwise ask for accumulation."""
    return [f"train.batch_size_per_device={batch}", f"train.max_steps={steps}", "train.devices=1", "train.num_nodes=1",
            *(["train.global_batch=null"] if global_batch else [])]


def preflight_checks(jobs: list[Job], settings: DictConfig, folder: Path) -> list[Check]:
    """Each job of the plan (made in ``folder``) as the pre-flight runs it (module docstring), each training
    followed by its evaluations."""
    checks, runs = [], {}
    for job in jobs:
        if job.kind != "run":
            continue
        full = _without(job.overrides, (*PLACE_KEYS, "train.export_epochs"))
        cfg = load_config(job.entry, full)
        batch = settings.batch or (int(cfg.train.batch_size_per_device) if torch.cuda.is_available() else 2)
        steps = int(settings.steps)
        epoch = [] if job.entry == LM else [f"train.limit_train_batches={steps}",
                                            f"train.export_epochs=[{EXPORT_EPOCH}]"]
        words = [*full, *settings[job.entry], *_steps_in_one_process(batch, steps, "global_batch" in cfg.train),
                 *epoch, *(w for w in job.overrides if w.split("=", 1)[0] in ("run.root", "run.name"))]
        meter = folder / "meters" / f"{job.name}.json"
        run_dir = folder / job.run_dir
        runs[job.name] = Check(job, [sys.executable, str(REPO / "paper" / "step_meter.py"), job.entry, str(meter), *words],
                               run_dir=run_dir, meter=meter, batch=batch)
    for name, check in runs.items():
        checks.append(check)
        same: dict[tuple[str, ...], Check] = {}  # an evaluation's command without its out=: the check that runs it
        for job in jobs:
            if job.kind == "eval" and job.depends == (name,):
                backbone = check.run_dir / export_of(check.job.entry)
                words = [*_without(job.overrides, ("ckpt", "out")), *settings[job.entry], f"ckpt={backbone}"]
                if job.entry == FINETUNE:  # a training too: its steps at the pre-flight's batch, in one process
                    words += _steps_in_one_process(check.batch, int(settings.steps), True)
                key = (job.module, *words)
                if key in same:
                    same[key].covers.append(job.name)
                    continue
                words += [w for w in job.overrides if w.startswith("out=")]
                same[key] = Check(job, [sys.executable, "-m", job.module, *words], run_dir=check.run_dir)
                checks.append(same[key])
    return checks


def fake_sizes(sizes: FakeSizes, checks: list[Check], steps: int) -> FakeSizes:
    """``sizes`` with enough training images per class for every training's steps x batch."""
    need = max(((c.batch or 0) * steps for c in checks), default=0)
    return FakeSizes(sizes.classes, max(sizes.train_per_class, math.ceil(need / sizes.classes)), sizes.val_per_class)


def write_data(folder: Path, sizes: FakeSizes, settings: DictConfig) -> None:
    """The fake datasets under ``<folder>/data/``, and ``data/default`` linking the repository's embedded default."""
    write_fake_datasets(folder / "data", sizes, int(settings.data.seed), int(settings.data.scale))
    default = Path(str(load_group("data", "default").data.root))
    default = default if default.is_absolute() else REPO / default
    default.mkdir(parents=True, exist_ok=True)  # generated there on first use, as any run of the default does
    (folder / "data" / "default").symlink_to(default, target_is_directory=True)


def write_text_data(folder: Path, checks: list[Check], settings: DictConfig) -> list[str]:
    """The language model's fake data, where the experiment trains one (``fake_text.py``): C4's layout at each
    training's data root (relative roots under ``folder``), as many shards as its recipe reads (``data.shards``,
    ``data.val_shards``; 2 and 1 where null, every shard) holding enough words for its steps x sequences x
    ``context + 1`` tokens (a word is at least one token) and two validation windows; the five zero-shot tasks
    in ``data/lm-val`` (``preflight.text.task_items`` items each); and ``data/text-cache/downloads`` linking the
    repository's, so the pinned downloads (GPT-2's vocabulary files) are fetched once, not per pre-flight.
    Returns the lines said."""
    lms = [c for c in checks if c.job.entry == LM]
    if not lms:
        return []
    text = settings.text
    downloads = folder / "data" / "text-cache" / "downloads"
    shared = REPO / "data" / "text-cache" / "downloads"
    shared.mkdir(parents=True, exist_ok=True)
    downloads.parent.mkdir(parents=True, exist_ok=True)
    if not downloads.exists():
        downloads.symlink_to(shared, target_is_directory=True)
    roots: dict[Path, tuple[int, int, int, int]] = {}
    for check in lms:
        cfg = load_config(LM, _without(check.job.overrides, PLACE_KEYS))
        context = lm_context(cfg.model)
        root = Path(str(cfg.data.root))
        root = root if root.is_absolute() else folder / root
        need = (check.batch or 1) * int(settings.steps) * (context + 1)
        train_words, val_words = math.ceil(1.1 * need), math.ceil(1.1 * 2 * (context + 1))
        old = roots.get(root, (0, 0, 0, 0))
        roots[root] = (max(old[0], int(cfg.data.shards or 2)), max(old[1], int(cfg.data.val_shards or 1)),
                       max(old[2], train_words), max(old[3], val_words))
    lines = []
    for root, (shards, val_shards, train_words, val_words) in roots.items():
        write_fake_c4(root, shards, val_shards, train_words, val_words, int(text.seed))
        lines.append(f"fake C4 ({shards} train shards, {train_words:,} words; {val_shards} validation shard(s), "
                     f"{val_words:,} words) in {root}")
    if any(c.job.entry == "zeroshot" for c in checks):
        tasks = write_fake_tasks(folder / "data" / "lm-val", int(text.task_items), int(text.seed))
        lines.append(f"fake zero-shot tasks ({text.task_items} items each, the original releases' layouts) in {tasks}")
    return lines


def run_command(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, float, float, int]:
    """(exit code, seconds, CPU seconds, largest resident set in bytes) of the process and its waited-for children."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with log.open("w") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        try:
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:
            process.kill()
            process.wait()
            raise
        process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, time.time() - start, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def job_environment(variables: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in variables}
    return {**env, **CPU_ALLOCATOR}


def run_check(check: Check, folder: Path, env: dict[str, str]) -> None:
    """Run one job in the pre-flight's folder and record its outcome in ``check``."""
    log = folder / "logs" / f"{check.job.name}.log"
    code, check.seconds, check.cpu_seconds, check.peak_rss_bytes = run_command(check.command, folder, env, log)
    export = export_of(check.job.entry)
    outputs_missing = check.job.kind == "run" and not (check.run_dir / export).is_file()
    results_missing = check.job.result and not list(folder.glob(check.job.result))
    check.status = "passed" if code == 0 and not outputs_missing and not results_missing else "failed"
    if check.status == "failed":
        missing = export if outputs_missing else "result"
        check.error = error_line(log) if code else f"exited 0 but wrote no {missing}"
    if check.meter is not None and check.meter.is_file():
        check.steps = json.loads(check.meter.read_text())["steps"]


def estimate_of(check: Check, settings: DictConfig, variables: list[str]) -> Estimate | str:
    """The GPU-hours of the training's full recipe (its config before the pre-flight's changes)."""
    with unset(variables):
        cfg = load_config(check.job.entry, _without(check.job.overrides, (*PLACE_KEYS, "train.export_epochs")))
        return estimate(check.job.entry, cfg, OmegaConf.to_container(settings, resolve=True),
                        vocab=run_vocabulary(check.run_dir) if check.job.entry == LM else None)


def run_vocabulary(run_dir: Path | None) -> int | None:
    """The vocabulary of the tokenizer a language-model run trained with (its copy in ``<run>/tokenizer/``), None
    where the run has none."""
    path = None if run_dir is None else run_dir / "tokenizer" / "tokenizer.json"
    return Tokenizer.from_file(str(path)).get_vocab_size() if path is not None and path.is_file() else None


def drop_weights(run_dir: Path) -> None:
    """A run's checkpoints and backbone files, once nothing reads them any more."""
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    for path in run_dir.glob("*.pt"):
        path.unlink()


# ---- what is said ---------------------------------------------------------------------------------------
def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f}"


def line_of(check: Check) -> str:
    """The line said when a job ends."""
    head = f"[{check.status}] {check.name} ({check.seconds:.0f} s, CPU {check.cpu_seconds:.0f} s"
    if check.status != "passed":
        return f"{head}): {check.error}"
    parts = [f"process peak {_mb(check.peak_rss_bytes)} MB"]
    step = check.last_step
    if step:
        added = step["memory_added_bytes"]
        parts.insert(0, f"step {len(check.steps)} {step['seconds']:.2f} s, +{_mb(added)} MB "
                        f"({_mb(added / max(step['images'], 1))} MB/image at batch {step['images']})")
    if isinstance(check.estimate, Estimate):
        e = check.estimate
        parts.append(f"{gflop_text(e.flop_per_image)} GFLOP/{e.unit} x {e.counts_text()} = "
                     f"{hours_text(e.hours)} GPU-hours ({e.gpu}, MFU {e.mfu:.0%})")
    elif check.estimate:
        parts.append(check.estimate)
    return f"{head}): " + "; ".join(parts)


def gflop_text(flop: float) -> str:
    """FLOPs in GFLOP: 113.8 / 0.118."""
    return f"{flop / 1e9:.1f}" if flop >= 1e9 else f"{flop / 1e9:.3g}"


def hours_text(hours: float) -> str:
    """GPU-hours to the precision an estimate has: 1,234 / 12.3 / 0.012."""
    return f"{hours:,.0f}" if hours >= 100 else f"{hours:.3g}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(checks: list[Check]) -> list[str]:
    """The markdown table of every job, and a total row."""
    heads = ["job", "result", "wall s", "CPU s", "batch", "step s", "MB/image", "peak MB", "GFLOP/image",
             "epochs x images", "GPU-hours"]
    rows = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for c in checks:
        step, e = c.last_step, c.estimate if isinstance(c.estimate, Estimate) else None
        per_image = step["memory_added_bytes"] / max(step["images"], 1) if step else None
        rows.append("| " + " | ".join([
            c.name, _cell(f"{c.status}: {c.error}" if c.error else c.status),
            f"{c.seconds:.0f}", f"{c.cpu_seconds:.0f}", str(c.batch or "-"), f"{step['seconds']:.2f}" if step else "-",
            _mb(per_image), _mb(c.peak_rss_bytes or None), gflop_text(e.flop_per_image) if e else "-",
            f"{e.epochs:,} x {e.train_images:,}" + ("" if e.unit == "image" else f" {e.unit}s") if e else "-",
            hours_text(e.hours) if e else (_cell(c.estimate) if isinstance(c.estimate, str) else "-")]) + " |")
    hours = sum(c.estimate.hours for c in checks if isinstance(c.estimate, Estimate))
    passed = sum(c.status == "passed" for c in checks)
    rows.append(f"| total | {passed} of {len(checks)} passed | {sum(c.seconds for c in checks):.0f} | "
                f"{sum(c.cpu_seconds for c in checks):.0f} | | | | "
                f"{_mb(max((c.peak_rss_bytes for c in checks), default=None))} | | | {hours_text(hours)} |")
    return rows


def machine() -> str:
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (GPU)"
    return f"CPU, {len(os.sched_getaffinity(0))} cores (torch {torch.__version__})"


def write_tables(folder: Path, experiment: Experiment, checks: list[Check], settings: DictConfig, seconds: float,
                 command: str) -> Path:
    """``preflight.md`` (the table and what it assumes) and ``preflight.json`` (every number) in ``folder``."""
    device = "cuda" if any(c.last_step and torch.cuda.is_available() for c in checks) else "cpu"
    memory = ("torch.cuda.max_memory_allocated during the last step minus memory_allocated at its start"
              if device == "cuda" else
              "the process's resident set: its high-water mark during the last step minus its size at the step's start")
    mfu = ", ".join(f"{k} {float(v):.0%}" for k, v in settings.mfu.items())
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").is_file() else "-"
    notes = [
        f"# Pre-flight of {experiment.name}: {experiment.title}", "",
        f"`{command}` on {machine()}, {time.strftime('%Y-%m-%d %H:%M')}: {seconds / 60:.1f} min in all "
        f"(load average at the end {load}).", "",
        f"- Trainings: {settings.steps} optimizer steps each at the paper's model and crops, the batch shown, on fake "
        "datasets in the real layouts; evaluations: every one of the experiment, on the trainings' exports.",
        "- wall s: the job's time here; CPU s: the user + system time of its processes (on a shared machine, the "
        "measure of its own work).",
        f"- step s: the last step's seconds (forward, backward, optimizer step; not the data wait). MB/image: "
        f"{memory}, divided by the batch: the activations, since the weights, optimizer state and previous "
        "gradients are there when the step starts. peak MB: the largest resident set of the job's processes, "
        "whole run.",
        f"- GPU-hours: an estimate, not a measurement: epochs x the real train set x the step's FLOPs per image "
        f"(skipless/flops.py: matrix products, training as 3 x forward) / ({settings.gpu}'s dense bf16 peak x MFU: "
        f"{mfu}). "
        "Evaluations, monitors and data stalls are not counted.",
        *([f"- The language model: an \"image\" is a sequence of its context's tokens (batch, MB/image), its "
           "estimate steps x sequences per step x FLOPs per sequence (the T x T attention square counted whole); "
           f"its MFU ({float(settings.mfu.lm):.0%}) is an assumption, not a measurement (configs/paper.yaml)."]
          if any(c.job.entry == LM for c in checks) else []), ""]
    path = folder / "preflight.md"
    path.write_text("\n".join(notes + table(checks)) + "\n")
    records = [{"job": c.job.name, "covers": c.covers, "kind": c.job.kind, "status": c.status, "error": c.error, "seconds": c.seconds,
                "cpu_seconds": c.cpu_seconds, "command": c.command, "batch": c.batch,
                "peak_rss_bytes": c.peak_rss_bytes, "steps": c.steps,
                "estimate": c.estimate.record() if isinstance(c.estimate, Estimate) else c.estimate} for c in checks]
    (folder / "preflight.json").write_text(json.dumps({
        "experiment": experiment.name, "command": command, "machine": machine(), "seconds": seconds,
        "memory": memory, "settings": OmegaConf.to_container(settings, resolve=True), "jobs": records},
        indent=1) + "\n")
    return path


# ---- the pre-flight --------------------------------------------------------------------------------------
def run_preflight(cfg: DictConfig, experiment: Experiment, experiments: Path,
                  say: Callable[[str], None] = print) -> dict[str, Any]:
    """Plan the experiment's full scale, write the fake datasets, run every job, say and write the table."""
    settings = cfg.preflight
    sizes = check_preflight(settings)
    folder = (Path(settings.root) / f"{experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    jobs, skipped = plan(experiment, FULL, folder, [], list(cfg.exports[FULL]))
    checks = preflight_checks(jobs, settings, folder)
    variables = root_variables(CONFIG_DIR, experiments)
    command = f"make paper EXP={experiment.name} SCALE=full PREFLIGHT=1"
    say(f"{experiment.title}: pre-flight of {len(checks)} jobs of the full scale in {folder}"
        + (f" ({len(skipped)} cells not at this scale)" if skipped else ""))
    if cfg.dry_run:
        for check in checks:
            say(f"  {check.name}: {' '.join(check.command[1:])}")
        return {"jobs": jobs, "checks": checks}
    start = time.time()
    sizes = fake_sizes(sizes, [c for c in checks if c.batch], int(settings.steps))
    write_data(folder, sizes, settings)
    say(f"fake datasets ({sizes.train} train + {sizes.val} val images each, {sizes.classes} classes) in "
        f"{folder / 'data'}; unset for every job: {', '.join(variables)}")
    with unset(variables):
        for line in write_text_data(folder, checks, settings):
            say(line)
    env = job_environment(variables)
    failed: set[str] = set()
    for i, check in enumerate(checks):
        blocker = next((d for d in check.job.depends if d in failed), None)
        if blocker:
            check.status, check.error = "blocked", f"not run: {blocker} did not pass"
            failed.add(check.job.name)
        else:
            say(f"[start] {check.job.name}")
            try:
                run_check(check, folder, env)
            except KeyboardInterrupt:  # the table of what ran is still written; the rest is "not run"
                check.status, check.error = "failed", "stopped (interrupted): the pre-flight ends here"
                say(line_of(check))
                break
            if check.status != "passed":
                failed.add(check.job.name)
            elif check.job.kind == "run":
                check.estimate = estimate_of(check, settings, variables)
        say(line_of(check))
        last_of_run = i + 1 == len(checks) or checks[i + 1].job.kind == "run"
        if last_of_run and not settings.keep_weights and check.run_dir is not None:
            drop_weights(check.run_dir)
    seconds = time.time() - start
    path = write_tables(folder, experiment, checks, settings, seconds, command)
    for row in table(checks):
        say(row)
    passed = sum(c.status == "passed" for c in checks)
    say(f"pre-flight: {passed} of {len(checks)} jobs passed in {seconds / 60:.1f} min; table: {path}; "
        f"remove the folder when read: rm -r {folder}")
    return {"jobs": jobs, "checks": checks,
            "state": {name: "done" if c.status == "passed" else c.status for c in checks for name in
                      (c.job.name, *c.covers)}}
