"""Gradient accumulation inside a training step: the images one device takes per optimizer step, cut into
micro-batches of ``train.batch_size_per_device``, each forwarded and backpropagated on its own.

Every training module (DINO, MAE, the classifier) steps its optimizer once per ``training_step``, on the
batch the loader deals: ``batch_size_per_device x k`` images per device, ``k`` the accumulation steps of
``train.global_batch`` (``world.accumulation_steps``; ``training/data.py``). ``micro_steps`` yields its
micro-batches, each with its weight ``rows / all rows``: a module backpropagates ``weight x loss`` of each,
so that the accumulated gradient of a loss that is a mean over images is the gradient of one batch of
them all (MAE's ``accum_iter`` divides by ``k`` the same way; the weights differ from ``1 / k`` only
for a batch that does not fill ``k`` micro-batches, which the loaders never deal, as they drop it).
The clipping, the optimizer step and what follows it run once, after the last micro-batch, on the
accumulated gradients.

Why one loader batch per optimizer step rather than one per micro-batch: Lightning's step counter
(``global_step``), its logging cadence (``log_every_n_steps``), ``max_steps``, ``limit_train_batches``,
the per-step schedules (``num_training_batches``), the epoch ends that checkpoints are written at, and
every callback that reads them (divergence guard, progress bar, signals, collapse monitor, loss scale)
then all count optimizer steps, with no change to any of them, and an epoch always ends on a step.

Around every micro-batch but the last (``held_back``):

- under DDP the gradient all-reduce is held back (Lightning's ``ParallelStrategy.block_backward_sync``,
  DDP's ``no_sync``): the gradients accumulate on each process and are all-reduced once, in the last
  micro-batch's backward pass, as ``torch.nn.parallel.DistributedDataParallel.no_sync`` documents;
- under 16-mixed the gradients stay scaled (``StepOutsideAutocast.keep_scaled``): every backward pass of
  one step scales by the same loss scale, and the accumulated sum is unscaled once, after the last.

With one micro-batch (``train.global_batch`` null, the demos) the batch passes whole, with weight 1, and
nothing is held back: the step computes what it did before accumulation existed, to the bit.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import ParallelStrategy

from .precision import StepOutsideAutocast


def split_rows(batch: Any, size: int) -> list[Any]:
    """``batch`` (a tensor, or a list or tuple of them, nested) cut along its first dimension into consecutive
    pieces of ``size`` rows (the last may have fewer), each of the same structure."""
    if isinstance(batch, torch.Tensor):
        return list(batch.split(size))
    if isinstance(batch, (list, tuple)):
        columns = [split_rows(item, size) for item in batch]
        counts = {len(c) for c in columns}
        if len(counts) != 1:
            raise ValueError(f"the parts of a batch have different numbers of rows ({sorted(counts)} micro-batches)")
        return [type(batch)(parts) for parts in zip(*columns)]
    raise TypeError(f"a batch to cut into micro-batches must hold tensors, got {type(batch).__name__}")


def rows(batch: Any) -> int:
    """The number of images of ``batch``: the first dimension of its first tensor."""
    return rows(batch[0]) if isinstance(batch, (list, tuple)) else int(batch.shape[0])


@contextmanager
def held_back(module: pl.LightningModule) -> Iterator[None]:
    """Around a micro-batch that is not the step's last: no DDP all-reduce, 16-mixed gradients left scaled
    (module docstring). Nothing to do for a module without a trainer (stepped by hand in a test)."""
    trainer = module._trainer
    with ExitStack() as stack:
        if trainer is not None and isinstance(trainer.strategy, ParallelStrategy):
            stack.enter_context(trainer.strategy.block_backward_sync())
        if trainer is not None and isinstance(trainer.precision_plugin, StepOutsideAutocast):
            stack.enter_context(trainer.precision_plugin.keep_scaled())
        yield


def micro_steps(module: pl.LightningModule, batch: Any, size: int) -> Iterator[tuple[Any, float]]:
    """``(micro_batch, weight)`` for each micro-batch of ``size`` rows of ``batch``; the caller's forward and
    backward pass of each runs inside ``held_back`` for all but the last (the loop body runs while this
    generator is suspended inside the context)::

        for images, weight in micro_steps(self, images, batch_size_per_device):
            self.manual_backward(weight * loss_of(images))
    """
    parts = split_rows(batch, size)
    total = rows(batch)
    for i, part in enumerate(parts):
        weight = rows(part) / total
        if i + 1 < len(parts):
            with held_back(module):
                yield part, weight
        else:
            yield part, weight
