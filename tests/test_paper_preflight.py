"""``make paper SCALE=full PREFLIGHT=1``: every full-scale job changed only as the pre-flight says (two steps
as epoch 1, a small batch, the export every evaluation reads), run in its own folder with the data roots
unset; a failing job's one sentence captured; the GPU-hour estimate's arithmetic; a tiny experiment end to
end."""
import json
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from paper import gpu_hours
from paper.__main__ import run
from paper.gpu_hours import Estimate, dataset_of, estimate
from paper.jobs import REPO, Job
from paper.preflight import Check, job_environment, root_variables, run_check, unset
from skipless.config import CONFIG_DIR, ConfigError, load_config


def _preflight(*words: str):
    return load_config("paper", ["scale=full", "preflight.enabled=true", *words])


def _experiment(folder: Path, name: str, node: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(yaml.safe_dump(node))
    return folder


def test_the_dry_listing_shows_each_job_as_the_preflight_changes_it(tmp_path, capsys):
    """Table 2's cells and Tables 5-6's checkpoints in small: each training, then its evaluations."""
    exps = _experiment(tmp_path / "exps", "small", {
        "title": "small",
        "runs": {"entry": "pretrain", "axes": {"model": {"skip": ["model=skip"], "skipless": ["model=skipless"]}},
                 "scales": {"full": ["data=imagenet"]}, "epochs": {"full": [200, 300]}},
        "evaluations": {"conditioning": {"entry": "conditioning", "scales": {"full": ["images=gaussian"]},
                                         "result": "*/conditioning.json"}}})
    out = run(_preflight("exp=small", f"experiments={exps}", "dry_run=true", f"preflight.root={tmp_path / 'pf'}"))
    checks = out["checks"]
    assert not (tmp_path / "pf").exists()  # a dry run writes nothing
    # epochs 200 and 300 both read the export of the two steps: one command, run once, standing for both
    assert [(c.job.kind, c.job.labels["model"], len(c.covers)) for c in checks] == [
        ("run", "skip", 0), ("eval", "skip", 1), ("run", "skipless", 0), ("eval", "skipless", 1)]
    assert checks[1].covers == [checks[1].job.name.replace("200", "300")] and "(+1 other epochs)" in checks[1].name
    assert "(+1 other epochs): " in capsys.readouterr().out
    for check in checks:
        if check.job.kind == "run":
            words = check.command[check.command.index(str(check.meter)) + 1:]
            assert check.command[1:3] == [str(REPO / "paper" / "step_meter.py"), "pretrain"] and check.batch == 2
            assert {"train.max_steps=2", "train.limit_train_batches=2", "train.export_epochs=[1]",
                    "train.batch_size_per_device=2", "train.devices=1", "diagnostics.rank_images=8"} <= set(words)
            cfg = load_config("pretrain", words)
            assert (cfg.train.epochs, cfg.model.arch, cfg.dino.global_crop_size, cfg.dino.local_crops_number) == \
                (300, "vit_small", 224, 8)
            assert list(cfg.train.export_epochs) == [1] and str(tmp_path / "pf") in cfg.run.root
        else:
            assert f"ckpt={check.run_dir / 'backbone-epoch1.pt'}" in check.command
            assert "solver.max_iter=4" in check.command
            assert check.command[-1].startswith("out=") and str(tmp_path / "pf") in check.command[-1]


def test_settings_that_cannot_work_are_one_sentence(tmp_path):
    with pytest.raises(ConfigError, match=r"not scale=demo; expected SCALE=full PREFLIGHT=1"):
        run(load_config("paper", ["exp=table2", "preflight.enabled=true"]))
    with pytest.raises(ConfigError, match=r"preflight.batch=0 is not a number of images"):
        run(_preflight("exp=graying", "preflight.batch=0", f"preflight.root={tmp_path}"))
    with pytest.raises(ConfigError, match=r"preflight.gpu=V100 is not a GPU of skipless/flops.py"):
        run(_preflight("exp=graying", "preflight.gpu=V100", f"preflight.root={tmp_path}"))
    assert not list(tmp_path.iterdir())


def test_a_failing_jobs_one_sentence_is_captured(tmp_path):
    job = Job(name="probe-x", kind="eval", entry="probe", overrides=(), labels={}, config_hash="0", marker="m", log="l")
    sentence = "error: ADE20K not found at data/ade20k: expected <root>/ADEChallengeData2016/..."
    said = f"import sys; print('extracting features'); print({sentence!r}, file=sys.stderr); print('bye'); sys.exit(2)"
    check = Check(job, [sys.executable, "-c", said])
    run_check(check, tmp_path, job_environment([]))
    assert (check.status, check.error) == ("failed", sentence)
    assert check.peak_rss_bytes > 0 and check.seconds > 0
    crash = Check(job, [sys.executable, "-c", "raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')"])
    run_check(crash, tmp_path, job_environment([]))
    assert crash.error == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_the_root_variables_are_found_in_the_configs_and_unset_for_the_jobs(monkeypatch):
    names = root_variables(CONFIG_DIR)
    assert {"DATA_ROOT", "IMAGENET_ROOT", "IMAGENET100_ROOT"} <= set(names)
    monkeypatch.setenv("IMAGENET100_ROOT", "/datasets/in100")
    env = job_environment(names)
    assert "IMAGENET100_ROOT" not in env and env["MALLOC_MMAP_THRESHOLD_"] == "131072"
    cell = ["ssl=mae", "data=imagenet", "data.root=${oc.env:IMAGENET100_ROOT,data/imagenet100}/train"]
    with unset(names):
        assert dataset_of(load_config("pretrain", cell)) == "imagenet100"
    assert dataset_of(load_config("pretrain", cell)) == "imagenet"  # the user's root is back: named by data.name


def test_the_estimate_is_epochs_times_images_times_flops_over_peak_times_mfu(monkeypatch):
    settings = OmegaConf.to_container(load_config("paper").preflight, resolve=True)
    e = Estimate("dino", "imagenet", 300, 1_281_167, 123.8e9, "H100 SXM", 989.5, 0.09)
    assert e.hours == pytest.approx(300 * 1_281_167 * 123.8e9 / (989.5e12 * 0.09) / 3600)  # 148.5
    assert e.hours == pytest.approx(148.5, abs=0.1) and e.record()["images"] == 384_350_100
    monkeypatch.setattr(gpu_hours, "step_flops", lambda method, cfg, classes: 105.4e9 if classes == 1000 else 0)
    cfg = load_config("train", ["data=imagenet", "data.root=data/imagenet"])
    got = estimate("train", cfg, settings)
    assert (got.method, got.dataset, got.epochs, got.mfu, got.peak_tflops) == \
        ("supervised", "imagenet", 300, 0.14, 989.5)
    assert got.hours == pytest.approx(300 * 1_281_167 * 105.4e9 / (989.5e12 * 0.14) / 3600)
    tiny = load_config("train", ["data=tiny-imagenet", "data.root=/somewhere/tiny"])  # not under data/: data.name
    assert estimate("train", tiny, settings).dataset == "tiny-imagenet"
    del settings["datasets"]["tiny-imagenet"]
    assert estimate("train", tiny, settings).startswith("no estimate: tiny-imagenet")


@pytest.mark.slow
def test_a_tiny_experiment_preflights_end_to_end(tmp_path, capsys):
    """A supervised training on scikit-learn's digits (the OSA recipe's micro ViT) and its k-NN, the
    whole pre-flight: fake data, two measured steps, the export, the evaluation, the table."""
    exps = _experiment(tmp_path / "exps", "tiny", {
        "title": "tiny",
        "runs": {"entry": "train", "axes": {"model": {"skip": ["model=skip"]}},
                 "scales": {"full": ["data=digits", "train.epochs=3"]}},
        "evaluations": {"knn": {"entry": "knn", "scales": {"full": ["dataset=digits", "device=cpu"]},
                                "result": "*/knn-*.json", "metric": "top1"}}})
    out = run(_preflight("exp=tiny", f"experiments={exps}", f"preflight.root={tmp_path / 'pf'}",
                         "preflight.data.classes=2", "preflight.data.train_per_class=1",
                         "preflight.data.val_per_class=1"))
    train, knn = out["checks"]
    assert out["state"] == {"train-skip": "done", "knn-skip-last": "done"}, capsys.readouterr().out
    assert [s["images"] for s in train.steps] == [2, 2] and train.steps[-1]["seconds"] > 0
    assert train.estimate.epochs == 3 and train.estimate.train_images == 1438 and train.estimate.method == "supervised"
    folder = next((tmp_path / "pf").iterdir())
    assert not list(folder.rglob("*.pt")) and not list(folder.rglob("*.ckpt"))  # the weights, dropped once read
    record = json.loads((folder / "preflight.json").read_text())
    assert [j["status"] for j in record["jobs"]] == ["passed", "passed"]
    table = (folder / "preflight.md").read_text()
    assert "| train-skip | passed |" in table and "| knn-skip-last | passed |" in table and "an estimate" in table


def test_a_fine_tuning_evaluation_is_preflighted_as_a_training(tmp_path):
    """graying-mae's fine-tunings: the training's batch, two steps, one process, no global batch, no warm-up
    (the recipe's 5 epochs against the pre-flight's 1 were refused before), reading the training's export."""
    out = run(_preflight("exp=graying-mae", "dry_run=true", f"preflight.root={tmp_path / 'pf'}"))
    tunings = [c for c in out["checks"] if c.job.entry == "finetune"]
    assert len(tunings) == 2
    for check in tunings:
        words = check.command[3:]
        assert {"train.batch_size_per_device=2", "train.global_batch=null", "train.max_steps=2", "train.devices=1",
                "optim.warmup_epochs=0", "train.epochs=1"} <= set(words)
        assert f"ckpt={check.run_dir / 'backbone-epoch1.pt'}" in words
        assert check.command[1:3] == ["-m", "skipless.finetune"]
