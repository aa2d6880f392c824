"""Gradient accumulation inside a training step: the images one device takes per optimizer step, in
micro-batches of ``train.batch_size_per_device``, each forwarded and backpropagated on its own.

Every training module (DINO, MAE, the classifier) steps its optimizer once per ``training_step``, on the
item the loader deals: the ``k`` micro-batches of one optimizer step on this device, ``k`` the accumulation
steps of ``train.global_batch`` (``world.accumulation_steps``). The loader's workers collate micro-batches
of ``batch_size_per_device`` images, and the loader gathers each step's ``k`` of them into one
``MicroBatches`` (a list, which Lightning moves to the device part by part and keeps a ``MicroBatches``:
``lightning_utilities``' ``apply_to_collection`` rebuilds a sequence with its own type), never one tensor of
them all: concatenating them would hold the step's images twice in host memory
(``training/loader_state.py``, ``training/data.py``). With ``k = 1`` the loader deals the micro-batch itself.

``micro_steps`` yields the micro-batches of a step, each with its weight ``rows / all rows``: a module
backpropagates ``weight x loss`` of each, so that the accumulated gradient of a loss that is a mean over
images is the gradient of one batch of them all (MAE's ``accum_iter`` divides by ``k`` the same way; the
weights differ from ``1 / k`` only for a step that does not fill ``k`` micro-batches, which the loaders never
deal, as they drop it). The clipping, the optimizer step and what follows it run once, after the last
micro-batch, on the accumulated gradients. A plain batch (a tensor, a tuple, a list of crops: a test stepping
a module by hand, the FLOPs count) is cut into micro-batches of ``size`` rows as before the loader dealt them.
A module that needs the step's images as one batch (the classifier's mixup pairs them across the step) joins
them on the device (``joined``); ``rows`` counts them, ``each_micro_batch`` maps a function over them (an
``on_after_batch_transfer`` that augments on the device).

Why one loader item per optimizer step rather than one per micro-batch: Lightning's step counter
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
nothing is held back: the step computes what it did before accumulation existed, to the bit. With ``k``
micro-batches each holds the rows ``split_rows`` cut from the step's batch before the loader dealt them apart,
the same images with the same draws (without loader workers; with workers each micro-batch draws from its
worker's stream), so the step computes what it did then, to the bit (``docs/results.md``, "The loader's host
memory").
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import ParallelStrategy

from ..models.compile import new_graph_step
from .precision import StepOutsideAutocast


class MicroBatches(list):
    """The ``k`` micro-batches of one optimizer step on one device, as the loader deals them (module docstring).

    A list subclass so that Lightning's batch transfer (``apply_to_collection``: ``type(data)(parts)``) moves each
    part to the device and gives a ``MicroBatches`` back; a module tells it from a plain batch by its type."""


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


def join_rows(parts: list[Any]) -> Any:
    """The inverse of ``split_rows``: micro-batches of one structure concatenated along their first dimension."""
    first = parts[0]
    if isinstance(first, torch.Tensor):
        return torch.cat(parts)
    if isinstance(first, (list, tuple)):
        return type(first)(join_rows(list(column)) for column in zip(*parts))
    raise TypeError(f"micro-batches to join must hold tensors, got {type(first).__name__}")


def rows(batch: Any) -> int:
    """The number of images of ``batch``: the first dimension of its first tensor, summed over the micro-batches
    of a ``MicroBatches``."""
    if isinstance(batch, MicroBatches):
        return sum(rows(part) for part in batch)
    return rows(batch[0]) if isinstance(batch, (list, tuple)) else int(batch.shape[0])


def joined(batch: Any) -> Any:
    """The step's images as one batch: a ``MicroBatches`` concatenated (a copy, on the device it is on), a plain
    batch as it is."""
    return join_rows(list(batch)) if isinstance(batch, MicroBatches) else batch


def each_micro_batch(batch: Any, function: Callable[[Any], Any]) -> Any:
    """``function`` of each micro-batch of a ``MicroBatches`` (a ``MicroBatches`` of the results), or of a plain
    batch."""
    return MicroBatches(function(part) for part in batch) if isinstance(batch, MicroBatches) else function(batch)


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
    """``(micro_batch, weight)`` for each micro-batch of ``batch``: the parts of a ``MicroBatches`` as the loader
    dealt them, or a plain batch cut into pieces of ``size`` rows. The caller's forward and backward pass of each
    runs inside ``held_back`` for all but the last (the loop body runs while this generator is suspended inside
    the context)::

        for images, weight in micro_steps(self, images, batch_size_per_device):
            self.manual_backward(weight * loss_of(images))
    """
    parts = list(batch) if isinstance(batch, MicroBatches) else split_rows(batch, size)
    total = rows(batch)
    for i, part in enumerate(parts):
        weight = rows(part) / total
        new_graph_step()  # train.compile=reduce-overhead: each micro-batch replays the CUDA graphs anew
        if i + 1 < len(parts):
            with held_back(module):
                yield part, weight
        else:
            yield part, weight
