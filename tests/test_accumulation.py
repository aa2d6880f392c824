"""Gradient accumulation (``train.global_batch``, ``training/micro_batches.py``) through the real entry points:
one optimizer step of k = 2 micro-batches of b images gives the step of one batch of 2b images, for DINO,
MAE and the classifier, and a global batch the devices do not divide is one sentence before anything is
written.

Each comparison trains one step of two runs that differ only in how the step's 4 images are cut: run
``whole`` has ``train.batch_size_per_device=4`` (no accumulation), run ``accumulated`` has 2 with
``train.global_batch=4``. Both load the same 4 images (the loader deals one batch of 4 in the first and a
``MicroBatches`` of 2 x 2 in the second, made in the same order from the same stream, and the same seed
draws the same views, masks and mixing), so the two steps compute the same sums in another order.
Tolerances (float32): the gradients the optimizer receives agree to rtol 1e-4 / atol 1e-7 (summation
order); the parameters after the step, the teacher after its EMA and the DINO center to atol 1e-6. The
gradients are compared as well as the weights because AdamW's first step hardly depends on the
gradient's scale: a missing 1/k would pass a comparison of the weights alone. That first step is
``lr x g / (|g| + eps)``: with AdamW's eps 1e-8 an entry whose gradient is rounding noise (the key
biases', which the softmax ignores) steps by +lr or -lr on the noise's sign; both runs use eps 1e-4,
under which such an entry moves by at most ``lr x noise / eps``.
"""
from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

import skipless.ssl.mae.autoencoder as mae_model
from skipless.reports.summary import module_peak_lr
from skipless import pretrain as pretrain_entry
from skipless import train as train_entry
from skipless.config import ConfigError, load_config
from skipless.pretrain import pretrain
from skipless.reports.summary import describe_batch, peak_lr
from skipless.train import train
from skipless.training.micro_batches import MicroBatches, each_micro_batch, joined, micro_steps, rows, split_rows
from skipless.training.precision import StepOutsideAutocast
from skipless.devices.world import accumulation_steps, batch_per_device_step, global_batch
from tiny_runs import DINO_TINY, SUP_TINY

WHOLE = ["train.batch_size_per_device=4"]
ACCUMULATED = ["train.batch_size_per_device=2", "train.global_batch=4"]
ONE_STEP = ["train.max_steps=1", "train.log_every_n_steps=1", "optim.warmup_epochs=0", "optim.eps=1e-4"]
DINO = [*DINO_TINY, *ONE_STEP, "model.depth=2", "model.arch=vit_micro", "dino.freeze_last_layer_epochs=0"]
MAE = ["ssl=mae", "model=decayed", "model.arch=vit_micro", "model.depth=2", "model.img_size=32", "mae.input_size=32",
       "mae.decoder.dim=32", "mae.decoder.depth=2", "mae.decoder.heads=2", "mae.reconstructions_every_n_epochs=0",
       "data.n_train=8", "data.n_val=4", "train.num_workers=0", "train.knn_every_n_epochs=0",
       "diagnostics.every_n_epochs=0", "diagnostics.signals_every_n_steps=0", "diagnostics.rank_images=0",
       "train.precision=32-true", *ONE_STEP]
# mixup / cutmix on, so that the step's images are mixed as one batch in both runs; global-norm clipping on
SUP = [*SUP_TINY, *ONE_STEP, "model.arch=vit_micro", "model.depth=2", "aug.mixup=0.8", "aug.cutmix=1.0",
       "optim.clip_grad=0.5", "train.limit_val_batches=1"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


class StepRecord(pl.Callback):
    """The backward passes of the first step, the gradients the optimizer receives (Lightning calls
    ``on_before_optimizer_step`` inside ``optimizer.step``, after the module's clipping) and the loss."""

    def __init__(self, part: str):
        self.part, self.backwards, self.grads, self.loss, self.dealt = part, 0, {}, None, None

    def on_after_backward(self, trainer, pl_module):
        self.backwards += trainer.global_step == 0

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if trainer.global_step == 0:
            self.grads = {n: p.grad.detach().clone() for n, p in getattr(pl_module, self.part).named_parameters()
                          if p.grad is not None}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.loss is None:
            self.loss = float(outputs["loss"] if isinstance(outputs, dict) else outputs)
            self.dealt = (type(batch).__name__, len(batch) if isinstance(batch, MicroBatches) else None)


def one_step(run, entry, base, tmp_path, data_root, name, part, *extra):
    record = StepRecord(part)
    cfg = load_config(entry, [*base, *extra, f"data.root={data_root}", f"run.root={tmp_path}", f"run.name={name}"])
    trainer, module = run(cfg, extra_callbacks=[record])
    assert trainer.global_step == 1
    return trainer, module, record


def assert_same_step(whole, accumulated, states):
    (t1, m1, r1), (t2, m2, r2) = whole, accumulated
    assert (r1.backwards, r2.backwards) == (1, 2)  # the second run did accumulate two micro-batches
    assert r1.dealt[0] != "MicroBatches" and r2.dealt == ("MicroBatches", 2)  # as the loader dealt them
    assert t1.num_training_batches == t2.num_training_batches == 2  # steps per epoch: 8 images, 4 a step
    assert r1.loss == pytest.approx(r2.loss, rel=1e-5)
    assert r1.grads.keys() == r2.grads.keys() and r1.grads
    for name, g in r1.grads.items():
        torch.testing.assert_close(r2.grads[name], g, rtol=1e-4, atol=1e-7, msg=lambda m: f"{name}: {m}")
    for state in states:
        for (name, a), b in zip(state(m1).items(), state(m2).values()):
            torch.testing.assert_close(b, a, rtol=0, atol=1e-6, msg=lambda m: f"{name}: {m}")
    assert module_peak_lr(m1) == module_peak_lr(m2)  # the lr of a global batch of 4 either way


def test_a_dino_step_of_two_micro_batches_is_the_step_of_one_batch(tmp_path, data_root):
    """Student gradients (clipped per parameter) and weights, the teacher after its EMA and the center: the
    center moves towards the mean teacher output over both micro-batches."""
    runs = [one_step(pretrain, "pretrain", DINO, tmp_path, data_root, name, "student", *extra)
            for name, extra in (("whole", WHOLE), ("accumulated", ACCUMULATED))]
    assert_same_step(*runs, states=(lambda m: m.student.state_dict(), lambda m: m.teacher.state_dict(),
                                    lambda m: {"center": m.loss_fn.center}))
    assert not torch.equal(runs[0][1].loss_fn.center, torch.zeros_like(runs[0][1].loss_fn.center))


def test_an_mae_step_of_two_micro_batches_is_the_step_of_one_batch(tmp_path, data_root, monkeypatch):
    """The encoder and decoder after the step; the masks of both runs are recorded and must be the same (the
    same seed draws the same noise for 4 images at once as for 2 and 2, on the CPU)."""
    masks = {}
    draw = mae_model.random_masking

    def recorded(x, ratio, generator=None):
        out = draw(x, ratio, generator)
        masks.setdefault(run_name, []).append(out[1])
        return out

    monkeypatch.setattr(mae_model, "random_masking", recorded)
    runs = []
    for run_name, extra in (("whole", WHOLE), ("accumulated", ACCUMULATED)):
        runs.append(one_step(pretrain, "pretrain", MAE, tmp_path, data_root, run_name, "net", *extra))
    assert [len(masks["whole"]), len(masks["accumulated"])] == [1, 2]
    assert torch.equal(torch.cat(masks["accumulated"]), masks["whole"][0])
    assert_same_step(*runs, states=(lambda m: m.net.state_dict(),))


def test_a_supervised_step_of_two_micro_batches_is_the_step_of_one_batch(tmp_path, data_root):
    """Mixup / cutmix mix the step's 4 images as one batch, then the micro-batches split them; the global
    gradient norm is clipped once, on the accumulated gradients."""
    runs = [one_step(train, "train", SUP, tmp_path, data_root, name, "backbone", *extra)
            for name, extra in (("whole", WHOLE), ("accumulated", ACCUMULATED))]
    assert_same_step(*runs, states=(lambda m: m.state_dict(),))


def test_16_mixed_keeps_the_micro_batches_scaled_and_unscales_their_sum_once(tmp_path, data_root, monkeypatch):
    """Under fp16 loss scaling the first micro-batch's gradients stay scaled (a second unscale would raise,
    training/precision.py) and the step's gradients equal the one-batch step's to fp16's tolerance. The
    scale is lowered to 2^4 so that the tiny DINO's first step does not overflow
    (test_training_mixed_precision.py)."""
    monkeypatch.setattr(StepOutsideAutocast, "INIT_SCALE", 2.0**4)
    runs = [one_step(pretrain, "pretrain", DINO, tmp_path, data_root, name, "student", "train.precision=16-mixed",
                     *extra) for name, extra in (("whole", WHOLE), ("accumulated", ACCUMULATED))]
    (t1, _, r1), (t2, _, r2) = runs
    assert (r1.backwards, r2.backwards) == (1, 2)
    assert t1.precision_plugin.skipped_steps == t2.precision_plugin.skipped_steps == 0
    for name, g in r1.grads.items():  # relative to the tensor: fp16 rounds single small entries coarsely
        assert float((r2.grads[name] - g).norm()) <= 2e-2 * float(g.norm()) + 1e-7, name


def test_micro_batches_cross_lightnings_batch_transfer_as_micro_batches_and_step_as_the_rows_they_hold():
    """Lightning moves a batch with ``apply_to_collection``, which must give a ``MicroBatches`` back (not a plain
    list, which a module would read as a list of crops); ``micro_steps`` yields its parts with weights rows /
    total, and ``joined`` gives the rows ``split_rows`` would have cut them from."""
    from lightning.fabric.utilities.apply_func import move_data_to_device
    from lightning.pytorch.plugins.precision import DoublePrecision

    images, labels = torch.arange(24.0).view(6, 4), torch.arange(6)
    step = MicroBatches(split_rows((images, labels), 2))
    for moved in (move_data_to_device(step, torch.device("cpu")), DoublePrecision().convert_input(step)):
        assert isinstance(moved, MicroBatches) and len(moved) == 3 and isinstance(moved[0], tuple)
    parts = list(micro_steps(pl.LightningModule(), step, size=5))  # the size cuts plain batches only
    assert [weight for _, weight in parts] == [1 / 3] * 3 and [part for part, _ in parts] == list(step)
    whole = joined(step)
    assert torch.equal(whole[0], images) and torch.equal(whole[1], labels) and rows(step) == 6
    assert joined((images, labels)) == (images, labels) and rows((images, labels)) == 6
    doubled = each_micro_batch(step, lambda part: part[0] * 2)
    assert isinstance(doubled, MicroBatches) and torch.equal(torch.cat(doubled), images * 2)
    assert torch.equal(each_micro_batch(images, lambda batch: batch * 2), images * 2)


def test_the_global_batch_sets_the_accumulation_the_loader_and_the_lr():
    cfg = load_config("train", ["data=imagenet", "train.devices=8", "train.accelerator=cpu"])
    assert cfg.train.global_batch == 4096  # Xu et al.'s, Table 1's recipe
    assert (global_batch(cfg), accumulation_steps(cfg), batch_per_device_step(cfg)) == (4096, 8, 512)
    assert describe_batch(cfg) == "4096 = 64/device x 8 devices x 8 accumulation steps"
    assert peak_lr(cfg) == pytest.approx(2.5e-4 * 4096 / 256)
    assert accumulation_steps(cfg, world=64) == 1 and accumulation_steps(cfg, world=1) == 64
    demo = load_config("pretrain", ["train.devices=2", "train.accelerator=cpu"])
    assert demo.train.global_batch is None and accumulation_steps(demo) == 1 and global_batch(demo) == 64
    assert describe_batch(demo) == "64 = 32/device x 2 devices, no accumulation"
    assert load_config("pretrain", ["data=imagenet"]).train.global_batch == 1024  # DINO's ViT-S/16 batch
    assert load_config("pretrain", ["ssl=mae", "data=imagenet"]).train.global_batch == 1024  # seed 002's


@pytest.mark.parametrize("entry,module", [("pretrain", pretrain_entry), ("train", train_entry)])
def test_a_global_batch_the_devices_do_not_divide_is_one_sentence_before_anything_is_written(
        tmp_path, capsys, entry, module):
    tiny = DINO_TINY if entry == "pretrain" else SUP_TINY
    args = [*tiny, "train.global_batch=6", f"data.root={tmp_path / 'data'}", f"run.root={tmp_path / 'runs'}"]
    with pytest.raises(ConfigError) as caught:
        accumulation_steps(load_config(entry, args))
    assert module.main(args) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {caught.value}" and len(err.splitlines()) == 1
    assert ("train.global_batch=6 is not a whole number of micro-batches of train.batch_size_per_device=4 on 1 "
            "device (4 images each); expected a global batch that is a multiple of 4 (4 or 8), or "
            "train.batch_size_per_device=3 or 2 or 1 (dividing 6 / 1 = 6)") in err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()
    with pytest.raises(ConfigError, match=r"expected a global batch that is a multiple of 192 \(960 or 1152\), "
                                          r"or 2 or 4 or 8 devices \(GPUS= x NODES=\)"):
        accumulation_steps(load_config("pretrain", ["data=imagenet", "train.accelerator=cpu", "train.devices=3"]))


def test_the_dry_run_states_each_training_runs_global_batch_on_the_cluster_it_assumes(tmp_path):
    """make paper EXP=table1 SCALE=full DRY=1: Xu et al.'s 4096 on the 8 GPUs of configs/paper.yaml's SLURM
    allocation, and on this machine's one device when it runs here."""
    from paper.__main__ import run as paper_run

    for cluster, expected in (
            ("local", "global batch 4096 = 64/device x 1 device x 64 accumulation steps on this machine; on SLURM "
                      "(1 node x 8 GPUs, configs/paper.yaml slurm:): 4096 = 64/device x 8 devices x 8 accumulation steps"),
            ("slurm", "global batch 4096 = 64/device x 8 devices x 8 accumulation steps")):
        lines = []
        paper_run(load_config("paper", ["exp=table1", "scale=full", "dry_run=true", f"cluster={cluster}",
                                        "slurm.partition=gpu", f"root={tmp_path}"]), say=lines.append)
        runs = [i for i, line in enumerate(lines) if line.lstrip().startswith("[to run] train-")]
        assert len(runs) == 6
        assert all(lines[i + 1].strip() == expected for i in runs), lines[:3]
    assert not any(tmp_path.iterdir())  # a dry run writes nothing
