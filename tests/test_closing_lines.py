"""The lines a finished training prints before ``done:`` (``training/closing_lines.py``): the k-NN against
its random floor, MAE's loss against its mean-patch floor, a supervised run's last validation."""
from types import SimpleNamespace

import torch

from skipless.training.callbacks import KNNMonitor
from skipless.training.closing_lines import closing_lines, floor_line, knn_line, val_line


def test_the_knn_line_gives_the_last_score_its_floor_and_the_difference():
    line = knn_line([(2, 0.30), (4, 0.327)], 0.225, "teacher")
    assert line == ("k-NN top-1 of the teacher: 0.327 at epoch 4, random init 0.225 (+0.102: above its random "
                    "floor)")
    assert "(-0.010: not above its random floor)" in knn_line([(4, 0.215)], 0.225, "encoder")
    assert knn_line([], 0.2, "teacher") is None and knn_line([(1, 0.5)], None, "teacher").endswith("at epoch 1")


def test_the_mae_line_gives_the_loss_as_a_fraction_of_the_mean_patch_loss():
    assert "0.500 at the last logged step, against 1.000" in floor_line(0.5, 1.0)
    assert floor_line(0.5, 1.0).endswith("(0.50 of it)") and floor_line(0.5, None) is None


def test_closing_lines_read_what_the_run_measured_and_skip_what_it_did_not():
    monitor = KNNMonitor(lambda: [], lambda: [], label="encoder")
    monitor.history, monitor.random_accuracy = [(3, 0.44)], 0.10
    trainer = SimpleNamespace(callbacks=[monitor], lightning_module=SimpleNamespace(),
                              callback_metrics={"train/loss": torch.tensor(0.6),
                                                "train/mean_patch_loss": torch.tensor(0.8)})
    lines = closing_lines(trainer)
    assert len(lines) == 2 and lines[0].startswith("k-NN top-1 of the encoder: 0.440 at epoch 3")
    assert "against 0.800" in lines[1] and "(0.75 of it)" in lines[1]
    supervised = SimpleNamespace(callbacks=[], callback_metrics={"train/loss": torch.tensor(1.0)},
                                 lightning_module=SimpleNamespace(last_val={"epoch": 5, "top1": 61.234,
                                                                            "top5": 90.0}))
    assert closing_lines(supervised) == [val_line(supervised.lightning_module.last_val)] == [
        "validation at epoch 5: top-1 61.23%, top-5 90.00%"]
