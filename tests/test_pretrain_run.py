"""Whole pretraining runs on a tiny generated dataset: presets x optimizers, resume, divergence."""
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from skipless.config import load_config, load_saved_config
from skipless.models import load_backbone
from skipless.pretrain import main, pretrain, run_dir_of
from skipless.training.divergence import DivergenceError
from tiny_runs import PoisonAt

TINY = [
    "model.arch=vit_tiny", "model.depth=2",
    "dino.out_dim=64", "dino.hidden_dim=64", "dino.bottleneck_dim=32",
    "dino.global_crop_size=32", "dino.local_crop_size=16", "dino.local_crops_number=2",
    "data.n_train=16", "data.n_val=8",
    "train.batch_size_per_device=4", "train.num_workers=0", "train.log_every_n_steps=1",
    "train.knn_k=3", "optim.warmup_epochs=1",
    "diagnostics.every_n_epochs=0", "diagnostics.signals_every_n_steps=0",  # tests/test_pretrain_diagnostics.py
    "train.precision=32-true",  # resume compares two runs: one code path (mixed: test_training_mixed_precision.py)
]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def tiny_cfg(tmp_path: Path, data_root: Path, *extra: str):
    return load_config("pretrain", [*TINY, f"data.root={data_root}", f"run.root={tmp_path / 'runs'}", *extra])


class LossRecorder(pl.Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        self.losses.append(float(loss))


@pytest.mark.parametrize("model", ["skip", "skipless", "skipless-plain", "decayed", "osa"])
@pytest.mark.parametrize("optim", ["adamw", "soap"])
def test_every_preset_trains_with_both_optimizers(tmp_path, data_root, model, optim):
    cfg = tiny_cfg(tmp_path, data_root, f"model={model}", f"optim={optim}", "train.epochs=1",
                   "train.knn_every_n_epochs=0")
    rec = LossRecorder()
    pretrain(cfg, extra_callbacks=[rec])
    run = run_dir_of(cfg)
    assert len(rec.losses) == 4 and all(torch.isfinite(torch.tensor(rec.losses)))
    assert (run / "checkpoints" / "last.ckpt").is_file()
    backbone = load_backbone(run / "backbone.pt")
    assert backbone.skipless_args["residual"] == cfg.model.residual
    assert load_saved_config(run / "config.yaml").model.name == model
    assert list((run / "tb").glob("events.out.tfevents.*"))


class StopAfterEpoch(pl.Callback):
    """Interrupts a run at the end of an epoch, after its checkpoint (a pre-empted job)."""

    def __init__(self, epoch: int):
        self.epoch = epoch

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch + 1 == self.epoch:
            trainer.should_stop = True


def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path, data_root):
    straight = LossRecorder()
    pretrain(tiny_cfg(tmp_path, data_root, "run.name=straight", "train.epochs=2"), extra_callbacks=[straight])
    first, second = LossRecorder(), LossRecorder()
    cfg = tiny_cfg(tmp_path, data_root, "run.name=resumed", "train.epochs=2")
    pretrain(cfg, extra_callbacks=[first, StopAfterEpoch(1)])
    ckpt = torch.load(run_dir_of(cfg) / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")
    assert ckpt["global_step"] == 4 and ckpt["world_size"] == 1
    pretrain(tiny_cfg(tmp_path, data_root, "run.name=resumed", "train.epochs=2", "run.resume=true"),
             extra_callbacks=[second])
    assert len(straight.losses) == 8 and len(first.losses) == 4 and len(second.losses) == 4
    torch.testing.assert_close(torch.tensor(first.losses + second.losses), torch.tensor(straight.losses),
                               rtol=1e-5, atol=1e-6)


def test_divergence_stops_with_a_clear_error_and_keeps_the_last_good_checkpoint(tmp_path, data_root):
    cfg = tiny_cfg(tmp_path, data_root, "train.epochs=3", "train.knn_every_n_epochs=0")
    # peak lr = 5e-4 x lr_scale 4.8 (the demo recipe) x batch 4 / 256
    with pytest.raises(DivergenceError, match=r"step 5.*skipless.*peak lr 3\.75e-05 \(model\.lr\.adamw=0\.0005 "
                                              r"x optim\.lr_scale 4\.8.*lower model\.lr\.adamw"):
        pretrain(cfg, extra_callbacks=[PoisonAt(5)])
    run = run_dir_of(cfg)
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")
    assert ckpt["global_step"] == 4 and ckpt["world_size"] == 1
    assert all(torch.isfinite(v).all() for v in ckpt["state_dict"].values() if v.is_floating_point())
    assert all(torch.isfinite(p).all() for p in load_backbone(run / "backbone.pt").parameters())


def test_a_nan_between_reading_steps_at_an_epochs_end_is_named_and_nothing_after_it_is_saved(tmp_path, data_root):
    """The loss is read every 3 steps (2, 5, 8, ...): NaN from step 6 on, in epoch 2 (steps 4-7), is
    read first at the epoch end, before the checkpoint and the backbone would be written."""
    cfg = tiny_cfg(tmp_path, data_root, "train.epochs=3", "train.knn_every_n_epochs=0", "train.log_every_n_steps=3")
    with pytest.raises(DivergenceError, match=r"diverged at step 6 \(loss nan\)"):
        pretrain(cfg, extra_callbacks=[PoisonAt(6)])
    run = run_dir_of(cfg)
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")["global_step"] == 4
    assert torch.load(run / "backbone.pt", weights_only=False, map_location="cpu")["extra"]["step"] == 4
    assert all(torch.isfinite(p).all() for p in load_backbone(run / "backbone.pt").parameters())


def test_knn_monitor_scores_teacher_and_random(tmp_path, data_root):
    from skipless.training.callbacks import KNNMonitor
    cfg = tiny_cfg(tmp_path, data_root, "train.epochs=1", "train.knn_every_n_epochs=1")
    trainer, _ = pretrain(cfg)
    knn = next(c for c in trainer.callbacks if isinstance(c, KNNMonitor))
    assert knn.random_accuracy is not None and 0.0 <= knn.random_accuracy <= 1.0
    assert [e for e, _ in knn.history] == [1]


def test_cli_errors_are_one_sentence(tmp_path, capsys):
    assert main(["model=nonsense"]) == 1
    assert ("expected one of: attn-skip, cait-s, convmixer, convmixer-skipless, decayed, mlp-skip, osa, pvt-v2-b3, resnet, "
            "resnet-decayed, skip, skipless, skipless-centered, skipless-plain, swin-s") in capsys.readouterr().err
    assert main(["optim=lion"]) == 1
    assert "expected one of: adamw, sgd, soap" in capsys.readouterr().err
    assert main(["data=imagenet", f"data.root={tmp_path / 'absent'}"]) == 1
    out = capsys.readouterr()
    assert "data/README.md" in out.err
    # the header came first: the paper's lr at DINO's global batch of 1024 (16 accumulation steps on one device)
    assert "recipe=paper" in out.out and "peak lr 0.002 = model.lr.adamw" in out.out
    assert "global batch 1024 = 64/device x 1 device x 16 accumulation steps" in out.out
    assert main([f"run.root={tmp_path}", f"data.root={tmp_path / 'absent'}", "train.export_epochs=[2,5]"]) == 1
    assert "train.export_epochs lists epochs [5] outside 1..train.epochs=4" in capsys.readouterr().err
    assert main([f"run.root={tmp_path}", "run.resume=true"]) == 1
    assert "no checkpoint to resume" in capsys.readouterr().err
    assert main([f"run.root={tmp_path}", f"data.root={tmp_path / 'absent'}", "model.global_pool=max3"]) == 1
    err = capsys.readouterr().err
    assert "unknown global_pool 'max3'; expected one of: token, avg" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "absent").exists()  # the model is checked before any data is generated


def test_keep_checkpoints_and_export_epochs_write_the_files_asked_for(tmp_path, data_root):
    cfg = tiny_cfg(tmp_path, data_root, "train.epochs=2", "train.knn_every_n_epochs=0", "train.keep_checkpoints=true",
                   "train.export_epochs=[1]")
    pretrain(cfg)
    run = run_dir_of(cfg)
    assert sorted(p.name for p in run.glob("backbone*.pt")) == ["backbone-epoch1.pt", "backbone.pt"]
    assert load_backbone(run / "backbone-epoch1.pt").skipless_args["residual"] == "skipless"
    epochs = {p.name: torch.load(p, weights_only=False, map_location="cpu")["extra"]["epoch"] for p in run.glob("backbone*.pt")}
    assert epochs == {"backbone-epoch1.pt": 1, "backbone.pt": 2}
    ckpts = run / "checkpoints"
    assert sorted(p.name for p in ckpts.glob("*.ckpt")) == ["epoch001.ckpt", "epoch002.ckpt", "last.ckpt"]
    steps = {p.name: torch.load(p, weights_only=False, map_location="cpu")["global_step"] for p in ckpts.glob("*.ckpt")}
    assert steps == {"epoch001.ckpt": 4, "epoch002.ckpt": 8, "last.ckpt": 8}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_new_run_never_lands_in_the_folder_of_another(tmp_path, data_root, capsys):
    from skipless.training.run_folder import RunFolderTakenError

    cfg = tiny_cfg(tmp_path, data_root, "run.name=taken", "train.epochs=1", "train.knn_every_n_epochs=0")
    pretrain(cfg)
    run = run_dir_of(cfg)
    before = _snapshot(run)
    with pytest.raises(RunFolderTakenError, match=r"RESUME=1 .* run.name=taken-2"):
        pretrain(tiny_cfg(tmp_path, data_root, "run.name=taken", "train.epochs=2", "model=skip"))
    assert _snapshot(run) == before  # not one byte of the first run changed, no second event file
    (run.parent / "taken-2").mkdir()
    (run.parent / "taken-2" / "notes.txt").write_text("mine")
    args = [f"data.root={data_root}", f"run.root={tmp_path / 'runs'}", "run.name=taken-2", *TINY]
    assert main(args) == 1
    assert "run.name=taken-3" in capsys.readouterr().err


def test_resume_refuses_another_model_and_records_what_may_change(tmp_path, data_root):
    import json

    from skipless.training.run_folder import ResumeMismatchError

    cfg = tiny_cfg(tmp_path, data_root, "run.name=kept", "train.epochs=1", "train.knn_every_n_epochs=0")
    pretrain(cfg)
    run = run_dir_of(cfg)
    before = _snapshot(run)
    for change, key in (("model=skip", "model.name"), ("optim=soap", "optim.name"), ("run.seed=3", "run.seed"),
                        ("dino.teacher_temp=0.07", "dino.teacher_temp")):
        with pytest.raises(ResumeMismatchError, match=key):
            pretrain(tiny_cfg(tmp_path, data_root, "run.name=kept", "train.epochs=1", "train.knn_every_n_epochs=0",
                              "run.resume=true", change))
    assert _snapshot(run) == before
    pretrain(tiny_cfg(tmp_path, data_root, "run.name=kept", "train.epochs=2", "train.knn_every_n_epochs=0",
                      "run.resume=true", "train.log_every_n_steps=2", "diagnostics.signals_every_n_steps=2"))
    log = [json.loads(line) for line in (run / "resumes.jsonl").read_text().splitlines()]
    assert log[-1]["changed"] == {"train.epochs": [1, 2], "train.log_every_n_steps": [1, 2],
                                  "diagnostics.signals_every_n_steps": [0, 2]}
    assert load_saved_config(run / "config.yaml").train.epochs == 2
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")["epoch"] == 1


def test_only_the_first_process_checks_the_folder(monkeypatch):
    from skipless.training.run_folder import is_first_process

    for var in ("RANK", "SLURM_PROCID", "NODE_RANK", "GROUP_RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert is_first_process()
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert is_first_process()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert not is_first_process()
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("SLURM_PROCID", "8")
    assert not is_first_process()


def test_resume_may_name_its_folder_another_way(tmp_path):
    from skipless.config import save_config
    from skipless.training.run_folder import ResumeMismatchError, resume_changes

    saved = load_config("pretrain", [f"run.root={tmp_path}"])
    run = run_dir_of(saved)
    save_config(saved, run)
    again = load_config("pretrain", [f"run.root={tmp_path}/", f"run.name={run.name}", "run.resume=true",
                                     "train.epochs=8", "diagnostics.rank_images=64"])
    assert resume_changes(again, run) == {"run.name": (None, run.name), "run.root": (str(tmp_path), f"{tmp_path}/"),
                                          "train.epochs": (4, 8),  # the rank monitor observes, on a forked RNG
                                          "diagnostics.rank_images": (256, 64)}
    # the tenth: train.global_batch (null -> 1024)
    with pytest.raises(ResumeMismatchError, match=r"choices.recipe: 'demo' -> 'paper'; .* and 10 more\)"):
        resume_changes(load_config("pretrain", [f"run.root={tmp_path}", "run.resume=true", "recipe=paper"]), run)
