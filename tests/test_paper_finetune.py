"""make paper runs fine-tunings as evaluations of its pretraining runs (paper/jobs.py, entry finetune): seed 003's
Table 5 (graying-mae) and MAE's protocol in seed 002's Table 4 (mae-table4)."""
import shlex

from paper.experiment import load_experiment
from paper.jobs import config_hash, plan


def test_a_fine_tuning_evaluation_trains_from_its_runs_backbone_in_its_own_folder(tmp_path):
    jobs, _ = plan(load_experiment("graying-mae"), "demo", tmp_path)
    runs = {j.name: j for j in jobs if j.kind == "run"}
    tunes = [j for j in jobs if j.entry == "finetune"]
    assert sorted(runs) == ["pretrain-dct", "pretrain-none"] and len(tunes) == 2
    for job in tunes:
        words = dict(w.split("=", 1) for w in job.overrides)
        run = runs[job.depends[0]]
        assert words["finetune.ckpt"] == str(tmp_path / run.run_dir / "backbone.pt")
        assert words["run.root"] == str(tmp_path / "graying-mae" / "evals" / job.name) and words["run.name"] == "run"
        assert job.result == f"graying-mae/evals/{job.name}/run/summary.json" and "out" not in words
        assert shlex.split(job.shown())[:3] == ["python", "-m", "skipless.finetune"]
    # the hash follows what is trained from: another backbone, another fine-tuning
    a, b = ([w for w in t.overrides if not w.startswith("run.")] for t in tunes)
    assert config_hash("finetune", a) != config_hash("finetune", b)


def test_mae_table4_fine_tunes_each_pretrainings_last_checkpoint_with_maes_protocol(tmp_path):
    full, _ = plan(load_experiment("mae-table4"), "full", tmp_path)
    tunes = {j.labels["alpha_min"]: j for j in full if j.entry == "finetune"}
    assert sorted(tunes) == ["0.5", "0.6", "0.7", "mae"]
    assert all(any(w.endswith("backbone-epoch800.pt") for w in j.overrides) for j in tunes.values())
    assert all("data=imagenet" in j.overrides for j in tunes.values())
