"""What every training module of the suite (DINO, MAE, the supervised classifier, and any method to come)
gives the shared parts of ``training/``, and the start of its optimizer step, written once.

**The contract** (``TrainedModule``, a ``typing.Protocol`` each module satisfies; tests/test_module_contract.py
checks all three): the checked config (``cfg``), the per-step schedules (``schedules``), the backbone
``backbone.pt`` holds and every evaluator reads (``exported_backbone``: DINO's teacher, MAE's encoder, the
classifier's ViT), the backbone the optimiser trains, which the diagnostics measure (``trained_backbone``:
DINO's student). The self-supervised methods add what ``make pretrain`` needs around the module
(``skipless.ssl.Method``: views, rules, monitors, header).

**What no module writes itself**, the same for every method: its peak lr (``summary.module_peak_lr``: the
config's rule at the trainer's world size, which the schedules and a divergence message both use), its optimizer
steps per epoch (``steps_per_epoch``, which the per-step schedules are built for in ``configure_optimizers``) and
the resolved config in every Lightning checkpoint (``EpochCheckpoint.on_save_checkpoint``).

**The start of a step.** Each module owns a dict of per-step schedules (``schedules``: ``lr`` and ``wd``, DINO's
``momentum`` and ``teacher_temp`` too, ``optim/schedules.py``) and trains with manual optimisation, so each
step begins the same way:

1. the optimizer step is Lightning's ``global_step`` (it counts optimizer steps, so a step that accumulates
   ``k`` micro-batches, ``training/micro_batches.py``, moves the schedules once);
2. every schedule is read at that step, the last value past its end (a run resumed with more epochs than its
   schedules were built for keeps the final values rather than failing);
3. the lr goes to every parameter group of the optimizer and the weight decay to the weights' group only
   (``optim.param_groups.set_step_values``: biases and 1-D parameters stay at 0);
4. the gradients are zeroed (``set_to_none``), so the micro-batches' backward passes that follow add up.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

from omegaconf import DictConfig
from torch import nn

from ..optim.param_groups import set_step_values


@runtime_checkable
class TrainedModule(Protocol):
    """What a training module gives ``training/`` (module docstring)."""

    cfg: DictConfig
    schedules: dict[str, Sequence[float]]

    def exported_backbone(self) -> nn.Module: ...

    def trained_backbone(self) -> nn.Module: ...


def steps_per_epoch(module: Any) -> int:
    """The optimizer steps of one epoch on this rank, which the per-step schedules are built for: the training
    loader is set up first when Lightning has not yet (``configure_optimizers`` runs before it), so the count is
    the loader's after DDP sharding, ``limit_train_batches`` and the accumulation steps (``training/data.py``)."""
    trainer = module.trainer
    if trainer.train_dataloader is None:
        trainer.fit_loop.setup_data()
    return int(trainer.num_training_batches)


class StepStart(NamedTuple):
    step: int                   # the optimizer step (``global_step``)
    values: dict[str, float]    # each schedule's value at it
    optimizer: Any              # Lightning's wrapped optimizer, lr and weight decay set, gradients zeroed


def schedule_values(schedules: Mapping[str, Sequence[float]], step: int) -> dict[str, float]:
    """Each schedule at ``step``, or its last value past its end."""
    return {name: float(values[min(step, len(values) - 1)]) for name, values in schedules.items()}


def start_step(module: TrainedModule) -> StepStart:
    """Steps 1-4 of the module docstring for a LightningModule with ``schedules`` and one optimizer."""
    step = int(module.global_step)
    values = schedule_values(module.schedules, step)
    optimizer = module.optimizers()
    set_step_values(optimizer, values["lr"], values["wd"])
    optimizer.zero_grad(set_to_none=True)
    return StepStart(step, values, optimizer)
