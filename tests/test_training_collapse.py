"""Collapse detection (``training/collapse.py``, DINO's rule in ``ssl/dino/module.py``): the rules against constructed values and the real
losses, and tiny runs forced to collapse (flagged in the log once, in TensorBoard, in ``summary.json``
and in the checkpoint) beside healthy ones (not flagged)."""
import json
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from skipless.config import load_config
from skipless.pretrain import pretrain
from skipless.pretrain import run_dir_of as pretrain_dir
from skipless.ssl.dino.self_distillation import DINOLoss
from skipless.train import run_dir_of as train_dir
from skipless.train import train
from skipless.ssl.dino import module as dino_module
from skipless.ssl.dino.module import DINOCollapse, dino_collapse
from skipless.training.collapse import ClassCounts, label_entropy, supervised_collapse
from tiny_runs import DINO_TINY, SUP_TINY

K = 1024


# ---- the rules ---------------------------------------------------------------------------------------
def test_dino_uniform_teacher_is_entropy_at_log_k_whatever_the_kl():
    top = math.log(K)
    assert "uniform" in dino_collapse(top, 2.0, K)
    assert "uniform" in dino_collapse(dino_module.UNIFORM_FRACTION * top, 2.0, K)
    assert dino_collapse(0.97 * top, 2.0, K) is None  # a teacher at init with T_t 0.04 sits near 90%


def test_dino_constant_output_is_kl_near_zero_named_by_the_entropy():
    top = math.log(K)
    assert "one prototype" in dino_collapse(0.01, 0.01, K)
    assert "going to uniform" in dino_collapse(0.9 * top, dino_module.KL_FLOOR, K)
    # a healthy demo run (docs/results.md): entropy 2.1-5.1, KL 3.0 -> 0.66
    assert dino_collapse(3.0, 0.66, K) is None
    # a sharp teacher alone is no collapse: the student still has to match it (KL well above 0)
    assert dino_collapse(0.01, 4.0, K) is None


def test_dino_rule_on_the_real_loss_constant_outputs_collapse_and_distinct_ones_do_not():
    """Entropy and KL as ``DINO`` computes them (``DINOLoss``: loss - entropy is the KL), so the rule is
    checked on the quantities a run logs, not on numbers typed in."""
    torch.manual_seed(0)
    loss_fn = DINOLoss(K, n_global=2, student_temp=0.1)
    batch, views = 8, 4

    def verdict(student, teacher, temp=0.04):
        loss, entropy = loss_fn(student, teacher, temp)
        return dino_collapse(float(entropy), float(loss - entropy), K)

    # every image gives the same prototype scores, student and teacher alike: one prototype wins
    one = torch.zeros(K)
    one[7] = 3.0
    assert "one prototype" in verdict(one.repeat(views * batch, 1), one.repeat(2 * batch, 1))
    # a flat teacher: uniform targets
    assert "uniform" in verdict(torch.randn(views * batch, K), torch.zeros(2 * batch, K))
    # distinct, sharp outputs that the student does not copy: healthy
    assert verdict(torch.randn(views * batch, K), torch.randn(2 * batch, K)) is None


def test_label_entropy_is_the_loss_of_predicting_the_class_frequencies():
    counts = [50, 30, 15, 5, 0]
    labels = torch.tensor(sum(([k] * c for k, c in enumerate(counts)), []))
    prior = torch.tensor(counts, dtype=torch.float64) / sum(counts)
    logits = prior.clamp_min(1e-300).log().expand(len(labels), -1)
    assert label_entropy(counts) == pytest.approx(F.cross_entropy(logits, labels).item(), rel=1e-9)
    assert label_entropy([36] * 10) == pytest.approx(math.log(10), rel=1e-12)


def test_supervised_at_chance_is_the_loss_of_an_answer_that_ignores_the_image():
    balanced, skewed = [100] * 10, [400, 200, 100, 100, 50, 50, 40, 30, 20, 10]
    assert "at chance" in supervised_collapse(math.log(10), [10] * 10, balanced)  # uniform answer
    assert "at chance" in supervised_collapse(label_entropy(skewed), [100] * 10, skewed)  # the class frequencies
    assert "at chance" in supervised_collapse(math.log(10) - 0.11, [100] * 10, balanced)  # within 5% of ln 10
    assert supervised_collapse(math.log(10) - 0.12, [100] * 10, balanced) is None
    assert supervised_collapse(1.2, [95, 105, 90, 110, 100, 100, 100, 100, 100, 100], balanced) is None


def test_supervised_one_class_is_nine_tenths_of_the_predictions():
    balanced = [100] * 10
    assert "91% of the validation predictions are class 3" in supervised_collapse(
        1.5, [10, 10, 10, 910, 10, 10, 10, 10, 10, 10], balanced)
    assert supervised_collapse(1.5, [10, 10, 10, 890, 10, 10, 10, 10, 20, 20], balanced) is None


def test_class_counts_are_bincounts_of_predictions_and_labels():
    rng = np.random.default_rng(0)
    metric = ClassCounts(6)
    preds, labels = rng.integers(0, 6, 50), rng.integers(0, 5, 50)
    for i in range(0, 50, 16):  # several batches, as validation_step sees them
        metric.update(torch.from_numpy(preds[i:i + 16]), torch.from_numpy(labels[i:i + 16]))
    counts = metric.compute()
    assert counts[0].tolist() == np.bincount(preds, minlength=6).tolist()
    assert counts[1].tolist() == np.bincount(labels, minlength=6).tolist()
    metric.reset()
    assert metric.counts.sum() == 0


# ---- runs ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def _health(run_dir):
    events = EventAccumulator(str(run_dir / "tb")).Reload()
    return [e.value for e in events.Scalars("watch/health/collapsed")]


def _said(capsys) -> list[str]:
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("health:")]


def _collapsed_once(capsys, run, where: str) -> str:
    """Asserts the run said once, at ``where``, that it collapsed, for the reason its summary keeps; returns it."""
    said = _said(capsys)
    reason = json.loads((run / "summary.json").read_text())["collapsed"]
    assert len(said) == 1 and f"collapsed at {where}: {reason}" in said[0]
    return reason


def test_a_dino_run_whose_teacher_is_uniform_says_so_once_and_everywhere(tmp_path, data_root, capsys):
    """A huge teacher temperature makes the teacher's output uniform from the first step."""
    cfg = load_config("pretrain", [*DINO_TINY, f"data.root={data_root}", f"run.root={tmp_path}", "train.epochs=2",
                                   "dino.teacher_temp=1000", "dino.warmup_teacher_temp=1000"])
    pretrain(cfg)
    run = pretrain_dir(cfg)
    reason = _collapsed_once(capsys, run, "step 2 (epoch 1)")
    assert reason.startswith("the teacher's output is uniform")
    assert _health(run) == [1.0, 1.0]  # one check per epoch (2 steps each, fewer than the window)
    # kept in the checkpoint, so a resumed run still knows it
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["callbacks"]["DINOCollapse"]["reason"] == reason


def test_a_healthy_dino_run_is_not_flagged(tmp_path, data_root, capsys):
    cfg = load_config("pretrain", [*DINO_TINY, f"data.root={data_root}", f"run.root={tmp_path}"])
    pretrain(cfg)
    run = pretrain_dir(cfg)
    assert _said(capsys) == []
    assert json.loads((run / "summary.json").read_text())["collapsed"] is None
    assert _health(run) == [0.0]


def test_the_dino_window_is_read_every_window_steps_and_at_each_epoch_end():
    class Trainer:  # what the monitor reads of a trainer
        callback_metrics = {"watch/dino/teacher_entropy": torch.tensor(math.log(K)), "watch/dino/kl_teacher_student":
                            torch.tensor(1.0)}
        num_training_batches, max_steps, global_step, current_epoch = 7, -1, 0, 0
        is_global_zero, loggers, logger = False, [], None

    monitor, trainer, checks = DINOCollapse(K, window=3), Trainer(), []
    monitor.report = lambda trainer, reason, quantities: checks.append(trainer.global_step)
    monitor.on_train_epoch_start(trainer, None)
    for i in range(7):
        trainer.global_step = i + 1
        monitor.on_train_batch_end(trainer, None, None, None, i)
    assert checks == [3, 6, 7]
    trainer.callback_metrics = {"train/loss": torch.tensor(1.0)}
    with pytest.raises(KeyError, match="teacher_entropy"):
        monitor.on_train_batch_end(trainer, None, None, None, 0)


def test_a_supervised_run_that_learns_nothing_is_at_chance_once_warmed_up(tmp_path, data_root, capsys):
    """An lr of 1e-12 leaves the classifier at its init: near-zero logits, the loss of a uniform answer.
    Judged from the end of the warm-up (epoch 2 of 3) on, once per validation."""
    cfg = load_config("train", [*SUP_TINY, f"data.root={data_root}", f"run.root={tmp_path}", "optim.lr=1e-12",
                                "optim.warmup_epochs=2", "train.epochs=3"])
    train(cfg)
    run = train_dir(cfg)
    assert _collapsed_once(capsys, run, "step 4 (epoch 2)").startswith("validation loss")
    assert _health(run) == [1.0, 1.0]


def test_a_supervised_run_that_learns_is_not_flagged(tmp_path, capsys):
    """The digits with Xavier's init (the OSA paper's ViT, seeds/004 Appendix E) learn within one epoch
    of 44 steps: validation loss 1.85 against chance 2.30, no class above 29% of the predictions."""
    cfg = load_config("train", ["data=digits", "model=skip", "model.init=xavier", "model.depth=2", "train.epochs=1",
                                "train.batch_size_per_device=32", "optim.lr=8e-3", "optim.min_lr=1e-4",
                                f"run.root={tmp_path}"])
    trainer, _ = train(cfg)
    run = train_dir(cfg)
    assert float(trainer.callback_metrics["val/loss"]) < math.log(10) - 0.2  # it did learn
    assert _said(capsys) == []
    assert json.loads((run / "summary.json").read_text())["collapsed"] is None
    assert _health(run) == [0.0]
