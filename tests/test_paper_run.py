"""``make paper`` end to end on a tiny experiment: it runs each training, then its evaluations, writes the
report with the paper's numbers beside ours; a cell whose dataset is missing fails alone with the
layout sentence; killed midway and run again it finishes without redoing finished jobs; an edited
experiment trains into new folders and leaves the old ones."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from paper.__main__ import run
from skipless.config import load_config
from tiny_runs import DINO_TINY

REPO = Path(__file__).resolve().parents[1]


def tiny_experiment(folder: Path, data: Path, extra: list[str] = ()) -> None:
    runs_demo = [o for o in DINO_TINY if not o.startswith("train.epochs")] + [f"data.root={data}", "train.epochs=2",
                                                                               *extra]
    experiment = {
        "title": "tiny", "source": "a test",
        "runs": {"entry": "pretrain", "axes": {"model": {"skip": ["model=skip"], "skipless": ["model=skipless"]}},
                 "scales": {"demo": runs_demo}, "epochs": {"demo": [2]}},
        "evaluations": {"tokencut": {
            "entry": "tokencut",
            "axes": {"dataset": {"default": [f"roots.default={data}", "dataset=default"],
                                 "voc12": {"demo": [f"roots.voc12={data / 'no-voc'}", "dataset=voc12"]}}},
            "scales": {"demo": ["num_workers=0", "figure_images=0", "device=cpu"]},
            "result": "*/tokencut-*.json", "metric": "corloc"}},
        "report": [{"kind": "curve", "title": "CorLoc per block", "evaluation": "tokencut",
                    "lines": ["dataset", "model"], "reference": {"values": {"default/skip": 50.0}}}],
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.yaml").write_text(yaml.safe_dump(experiment))


def _args(tmp: Path) -> list[str]:
    return ["exp=tiny", f"experiments={tmp / 'exps'}", f"root={tmp / 'paper'}", "cluster=local"]


def _markers(tmp: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (tmp / "paper" / "demo").rglob("jobs/**/*.json")}


@pytest.mark.slow
def test_make_paper_runs_resumes_after_a_kill_and_reports(tmp_path, capsys):
    data = tmp_path / "data"
    tiny_experiment(tmp_path / "exps", data)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "src")])}
    # first call: killed (the whole process group, as a terminal or a scheduler would) once a run is done
    proc = subprocess.Popen([sys.executable, "-m", "paper", *_args(tmp_path)], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and not any(m["status"] == "done" for m in _markers(tmp_path).values()):
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = {m["job"] for m in _markers(tmp_path).values() if m["status"] == "done"}
    assert done_before, "no job finished within 300 s"

    result = run(load_config("paper", _args(tmp_path)))
    out = capsys.readouterr().out
    assert "already done, not run again" in out
    assert all(f"[start] {name}:" not in out for name in done_before)
    state = result["state"]
    base = tmp_path / "paper" / "demo"
    for job in result["jobs"]:
        if job.labels.get("dataset") == "voc12":  # the missing dataset: that cell fails, with the layout sentence
            assert state[job.name] == "failed"
            marker = json.loads((base / job.marker).read_text())
            assert marker["error"].startswith("error: ") and "VOCdevkit" in marker["error"]
        else:
            assert state[job.name] == "done", job.name
    runs = sorted(p.name for p in (base / "runs").iterdir())
    assert len([r for r in runs if "incomplete" not in r]) == 2
    report = (base / "tiny" / "report.md").read_text()
    assert "![tokencut](figures/00-tokencut.png)" in report and (base / "tiny" / "figures" / "00-tokencut.png").is_file()
    assert "| voc12/skip | 2 | missing data | - |" in report  # its layout sentence in the Jobs table
    assert "| tokencut-skip-2-voc12 | failed |" in report and "VOCdevkit" in report
    best = max(json.loads(next((base / "tiny" / "evals").glob("tokencut-skip-2-default/*/tokencut-*.json"))
                          .read_text())["corloc"].values())
    assert f"| default/skip | 2 | {best:.1f} ({50.0:.1f}, {best - 50.0:+.1f}) |" in report

    # nothing left to do: a third call runs nothing (the failed cells fail again, quickly)
    again = run(load_config("paper", _args(tmp_path)))
    assert [n for n, s in again["state"].items() if s != "done"] == [n for n, s in state.items() if s != "done"]
    assert "[start] pretrain" not in capsys.readouterr().out

    # an edited experiment: new runs in new folders, the old ones kept
    tiny_experiment(tmp_path / "exps", data, extra=["dino.out_dim=48"])
    capsys.readouterr()
    plan_only = run(load_config("paper", [*_args(tmp_path), "dry_run=true"]))
    shown = capsys.readouterr().out
    new_runs = [j.run_dir for j in plan_only["jobs"] if j.kind == "run"]
    # the evaluations keep their names (and the old runs' markers) but not their configs: nothing is done
    assert all(f"[to run] {j.name}:" in shown for j in plan_only["jobs"]), shown
    assert not set(Path(r).name for r in new_runs) & set(runs)
