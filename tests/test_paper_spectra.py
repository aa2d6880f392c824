"""Seed 003 Figs. 7-8 in make paper EXP=graying-eps: the attention Jacobian's spectrum at the runs' own size
(matrix-free ends) and at 32 px (dense, the check), planned at every scale and drawn in the report."""
import json
from dataclasses import replace
from pathlib import Path

import pytest

from paper.experiment import load_experiment
from paper.jobs import plan, write_marker
from paper.report import write_report
from skipless.config import load_config
from skipless.eval.conditioning.run import check_settings

# The hashes before the spectra at real size (commit fdbf687, planned at HASH_BASE: an evaluation's ckpt= is an absolute
# path, so its hash depends on where the scale folder is; plan writes nothing there): the runs and the conditioning
# evaluation keep theirs; the 32 px spectrum evaluation moves, its overrides now holding spectrum_ends=16.
HASH_BASE = Path("/tmp/hashbase")
BEFORE = {("demo", "run"): "93c341ec", ("demo", "conditioning"): "08b9ad45", ("demo", "spectrum"): "598af330",
          ("full", "run"): "56108285", ("full", "conditioning"): "882a499f", ("full", "spectrum"): "4a75752b"}


def _settings(job):
    return load_config("conditioning", [o for o in job.overrides])


@pytest.mark.parametrize("scale", ["demo", "quick", "full"])
def test_each_run_gets_its_spectrum_at_its_own_size_and_at_32_px(tmp_path, scale):
    experiment = load_experiment("graying-eps")
    jobs, _ = plan(experiment, scale, tmp_path)
    runs = {j.name: j for j in jobs if j.kind == "run"}
    for evaluation, size in (("spectrum-run-size", None), ("spectrum", 32)):
        evals = [j for j in jobs if j.evaluation == evaluation]
        assert len(evals) == len(runs) == 11 and {e.depends for e in evals} == {(r,) for r in runs}
        for job in evals:
            cfg = _settings(job)
            check_settings(cfg)
            assert cfg.spectrum and cfg.spectrum_ends == 16 and list(cfg.layers) == [0]
            assert (cfg.images == "run") == (size is None) and (size is None or cfg.image_size == size)
    bare, _ = plan(replace(experiment, evaluations={}, report=[]), scale, tmp_path)
    assert [(j.name, j.config_hash) for j in bare] == [(j.name, j.config_hash) for j in runs.values()]
    if scale != "quick":
        at_base, _ = plan(experiment, scale, HASH_BASE)
        none = {(j.evaluation or "run"): j.config_hash for j in at_base if j.labels.get("graying") == "none"}
        assert none["run"] == BEFORE[scale, "run"] and none["conditioning"] == BEFORE[scale, "conditioning"]
        assert none["spectrum"] != BEFORE[scale, "spectrum"]


def _done(base: Path, job, result, figure: bool) -> None:
    folder = base / Path(job.result).parent.parent / "backbone"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "conditioning.json").write_text(json.dumps(result))
    if figure:
        (folder / "jacobian-spectrum.png").write_bytes(b"png")
    write_marker(base, job, "done", seconds=1.0)


def test_the_report_embeds_each_runs_spectrum_and_tables_both_kappas_and_the_check(tmp_path):
    experiment = load_experiment("graying-eps")
    base = tmp_path / "demo"
    jobs, skipped = plan(experiment, "demo", base)
    for job in jobs:
        eps = job.labels.get("graying", "")
        if job.evaluation == "spectrum-run-size":
            _done(base, job, {"spectrum_kappa": {"0": {"attn": 40.0 if eps == "none" else 20.0}}}, figure=True)
        elif job.evaluation == "spectrum":
            _done(base, job, {"spectrum_kappa": {"0": {"attn": 4.0}}, "spectrum_ends_vs_dense": {"0": {"attn": 2e-9}}},
                  figure=True)
    text = write_report(base, experiment, "demo", jobs, skipped, "make paper EXP=graying-eps").read_text()
    sections = {s.split("\n", 1)[0]: s for s in text.split("\n## ")[1:]}
    figures = next(s for t, s in sections.items() if t.startswith("Figs. 7-8: the ends of the singular-value spectrum"))
    links = [line for line in figures.splitlines() if line.startswith("![")]
    assert len(links) == 11 and all(line.endswith("/backbone/jacobian-spectrum.png)") for line in links)
    assert "evals/spectrum-run-size-" in links[0] and "evals/spectrum-none" not in figures
    run_size = next(s for t, s in sections.items() if t.startswith("Figs. 7-8: kappa(K + I)"))
    assert "| none | 40" in run_size and "| dct-0.95 | 20" in run_size
    check = next(s for t, s in sections.items() if t.startswith("Figs. 7-8's check at 32 px"))
    assert "| svd-0.5 | 2" in check and "e-09" in check
