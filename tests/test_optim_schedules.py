"""DINO's schedules (Caron et al. 2021, utils.cosine_scheduler and the teacher-temperature warm-up) at
chosen steps, against the formulas computed here."""
from __future__ import annotations

import math

import pytest

from skipless.optim import cosine_schedule, linear_then_constant


def test_cosine_schedule_with_warmup_at_chosen_steps():
    base, final, start, epochs, per_epoch, warm_epochs = 5e-4, 1e-6, 1e-5, 10, 7, 3
    s = cosine_schedule(base, final, epochs, per_epoch, warmup_epochs=warm_epochs, start_warmup_value=start)
    warm, total = warm_epochs * per_epoch, epochs * per_epoch
    n = total - warm
    assert s.shape == (total,)
    assert s[0] == pytest.approx(start, rel=1e-12)
    assert s[5] == pytest.approx(start + 5 * (base - start) / (warm - 1), rel=1e-12)  # linspace, ends included
    assert s[warm - 1] == pytest.approx(base, rel=1e-12)
    assert s[warm] == pytest.approx(base, rel=1e-12)  # cosine starts at i = 0
    for i in (1, n // 2, n - 1):
        expected = final + 0.5 * (base - final) * (1 + math.cos(math.pi * i / n))
        assert s[warm + i] == pytest.approx(expected, rel=1e-12)
    assert final < s[-1] < final + 1e-2 * (base - final)
    assert all(a >= b for a, b in zip(s[warm:], s[warm + 1:]))  # monotone decay


def mae_lr(step: int, base: float, min_lr: float, warmup_epochs: int, epochs: int, per_epoch: int) -> float:
    """MAE's ``util/lr_sched.adjust_learning_rate`` at the fractional epoch ``step / per_epoch`` (He et al. 2022),
    written from its formula."""
    epoch = step / per_epoch
    if epoch < warmup_epochs:
        return base * epoch / warmup_epochs
    return min_lr + (base - min_lr) * 0.5 * (1 + math.cos(math.pi * (epoch - warmup_epochs) / (epochs - warmup_epochs)))


@pytest.mark.parametrize("epochs,per_epoch,warm_epochs,min_lr", [(10, 7, 3, 0.0), (5, 4, 1, 1e-6), (3, 5, 0, 0.0)])
def test_maes_warmup_is_base_times_s_over_w_at_every_step(epochs, per_epoch, warm_epochs, min_lr):
    base = 6e-4
    s = cosine_schedule(base, min_lr, epochs, per_epoch, warmup_epochs=warm_epochs, warmup_reaches_base=False)
    expected = [mae_lr(i, base, min_lr, warm_epochs, epochs, per_epoch) for i in range(epochs * per_epoch)]
    assert s.tolist() == pytest.approx(expected, rel=1e-12, abs=1e-18)
    if warm_epochs:  # one step later than DINO's, which reaches base at the warm-up's last step
        w = warm_epochs * per_epoch
        dino = cosine_schedule(base, min_lr, epochs, per_epoch, warmup_epochs=warm_epochs)
        assert s[w - 1] == pytest.approx(base * (w - 1) / w) and dino[w - 1] == pytest.approx(base)
        assert s[w:].tolist() == dino[w:].tolist()


def test_cosine_schedule_without_warmup_and_increasing():
    # DINO's teacher momentum: 0.996 -> 1 without warm-up; weight decay 0.04 -> 0.4
    s = cosine_schedule(0.996, 1.0, 4, 5)
    assert len(s) == 20 and s[0] == pytest.approx(0.996)
    assert s[10] == pytest.approx(1.0 + 0.5 * (0.996 - 1.0) * (1 + math.cos(math.pi * 10 / 20)), rel=1e-12)
    wd = cosine_schedule(0.04, 0.4, 2, 3)
    assert wd[0] == pytest.approx(0.04) and all(a < b for a, b in zip(wd, wd[1:]))


def test_linear_then_constant_is_per_epoch_like_dino():
    s = linear_then_constant(0.04, 0.07, warmup_epochs=4, epochs=6, steps_per_epoch=3)
    assert len(s) == 18
    per_epoch = [0.04 + e * (0.07 - 0.04) / 3 for e in range(4)] + [0.07, 0.07]  # linspace over 4 epochs
    for epoch, value in enumerate(per_epoch):
        assert list(s[epoch * 3:(epoch + 1) * 3]) == pytest.approx([value] * 3, rel=1e-12)
    assert list(linear_then_constant(0.04, 0.04, 0, 2, 2)) == pytest.approx([0.04] * 4)


@pytest.mark.parametrize("bad", [
    dict(epochs=5, steps_per_epoch=10, warmup_epochs=6),
    dict(epochs=0, steps_per_epoch=10),
    dict(epochs=5, steps_per_epoch=0),
    dict(epochs=5, steps_per_epoch=10, warmup_epochs=-1),
    dict(epochs=5, steps_per_epoch=10, warmup_epochs=1.5),
])
def test_bad_lengths_raise(bad):
    with pytest.raises(ValueError):
        cosine_schedule(1.0, 0.0, **bad)
    with pytest.raises(ValueError):
        linear_then_constant(1.0, 0.0, bad.get("warmup_epochs", 0), bad["epochs"], bad["steps_per_epoch"])


def test_warmup_longer_than_training_message():
    with pytest.raises(ValueError, match=r"warm-up \(11 epochs\) is longer than the training \(10 epochs\)"):
        cosine_schedule(1.0, 0.0, 10, 5, warmup_epochs=11)
