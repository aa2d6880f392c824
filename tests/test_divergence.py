"""skipless/training/divergence.py: the loss check reads the device only at the reading steps, every rank
together, and names the first non-finite step and its loss (issue 26, item 14). A whole run that
diverges between two reading steps: tests/test_pretrain_run.py."""
from types import SimpleNamespace

import pytest
import torch

from host_reads import HostReads
from skipless.config import load_config
from skipless.training.divergence import DivergenceError, stop_if_diverged

NAN, INF = float("nan"), float("inf")


class Strategy:
    """A strategy whose all-gather adds the records of other ranks to this one's and counts its calls."""

    def __init__(self, others=()):
        self.others, self.gathers = [torch.tensor(o) for o in others], 0
        self.root_device = torch.device("cpu")

    def all_gather(self, tensor):
        self.gathers += 1
        return torch.stack([tensor, *self.others])


def module(every=5, others=(), attached=True):
    """What ``stop_if_diverged`` uses of a LightningModule: ``cfg`` and its trainer (with its world size)."""
    trainer = SimpleNamespace(log_every_n_steps=every, default_root_dir="runs/x", strategy=Strategy(others),
                              world_size=1 + len(others))
    return SimpleNamespace(cfg=load_config("pretrain", []),
                           _trainer=trainer if attached else None, trainer=trainer if attached else None)


def run_steps(m, losses):
    for step, loss in enumerate(torch.tensor(losses).unbind()):
        stop_if_diverged(m, loss, step)


def test_a_non_finite_loss_between_reading_steps_is_named_by_its_own_step():
    m = module(every=5)
    losses = torch.tensor([1.0, 2.0, NAN, INF]).unbind()
    with HostReads() as reads:
        for step, loss in enumerate(losses):  # steps 0-3: recorded, not read
            stop_if_diverged(m, loss, step)
    assert reads.calls == [] and m.trainer.strategy.gathers == 0
    with pytest.raises(DivergenceError, match=r"diverged at step 2 \(loss nan\) for model skipless"):
        stop_if_diverged(m, torch.tensor(1.0), 4)  # the reading step: (4 + 1) % 5 == 0
    assert m.trainer.strategy.gathers == 1


def test_the_first_bad_loss_is_kept_whatever_follows():
    m = module(every=3)
    with pytest.raises(DivergenceError, match=r"step 1 \(loss -inf\)"):
        run_steps(m, [1.0, -INF, NAN])


def test_every_rank_reads_at_the_same_steps_and_the_earliest_bad_step_of_any_wins():
    calm = module(every=5, others=[[-1.0, -1.0]])
    run_steps(calm, [1.0] * 10)
    assert calm.trainer.strategy.gathers == 2  # steps 4 and 9 only, whatever the losses
    # another rank saw inf at step 1; this one's losses are finite, or bad only later
    for mine in ([1.0] * 5, [1.0, 1.0, 1.0, NAN, 1.0]):
        with pytest.raises(DivergenceError, match=r"step 1 \(loss inf\)"):
            run_steps(module(every=5, others=[[-1.0, -1.0], [1.0, INF]]), mine)


def test_without_a_trainer_every_step_is_read_at_once():
    m = module(attached=False)
    stop_if_diverged(m, torch.tensor(0.5), 0)
    with pytest.raises(DivergenceError, match=r"step 1 \(loss nan\)") as raised:
        stop_if_diverged(m, torch.tensor(NAN), 1)
    assert "no checkpoint exists yet" in str(raised.value)
