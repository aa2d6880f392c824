"""The training loader, resumable at any step: a resumed run sees the images, crops and flips it would have
seen, on every rank and with any number of loader workers.

What it deals: one item per optimizer step, the step's ``k`` micro-batches of ``batch_size`` images on this
process (``k`` the accumulation steps of ``train.global_batch``; ``training/micro_batches.py``). Its workers
collate micro-batches, and the loader gathers ``k`` consecutive ones into a ``MicroBatches`` (with ``k = 1``
it deals the micro-batch itself), so a worker holds ``prefetch_factor`` micro-batches, never a whole step
(``training/data.py``, the header's loader memory). ``len(loader)`` counts optimizer steps (the epoch's
micro-batches // ``k``), as Lightning's step counter, ``limit_train_batches`` and the epoch ends do; the
images of an epoch that fill no whole step are not read (``EpochOrder.multiple``).

What an epoch's data depends on, and where each piece is kept:

- **The order** (``EpochOrder``). One process: a permutation drawn with a seed taken from torch's generator
  when the epoch's iterator starts (what ``RandomSampler`` does, so runs keep their numbers); that seed is
  kept. Several processes: ``DistributedSampler``'s order, ``randperm`` seeded with ``run.seed + epoch``, padded
  to a multiple of the world size and dealt ``rank::world``. The epoch is part of the state, not left to
  Lightning's ``set_epoch``: on a resume Lightning builds the loader's iterator before it sets the epoch, and
  with workers the iterator deals its first indices at once, so every rank trained its first resumed epoch
  on epoch 0's order (the bug this module fixes: issue 46, item 4).
- **The random draws of the augmentations**, made in the loader's workers. Worker ``w`` starts from
  ``base_seed + w`` (``base_seed`` drawn from torch's generator when the iterator starts), reseeded by
  Lightning's ``pl_worker_init_function`` as before, and makes micro-batches ``w, w + W, w + 2W, ...``:
  micro-batch ``i`` belongs to the stream (slot) ``i mod W`` and nothing else draws from it. Each micro-batch
  carries back its worker's generator states as they are after it (``CollateWithState``), so the state of every
  slot after its last trained micro-batch is known, and a resumed worker ``j`` starts where slot
  ``(start + j) mod W`` stopped (``start``: the first micro-batch of the resumed epoch). With no workers the
  main process plays one worker, on generators of its own swapped in around each micro-batch, so the data's
  draws never mix with the model's (dropout, MAE's masks, which ``RNGState`` restores).
- **The position**: the optimizer steps of the epoch already trained, ``k`` micro-batches each. A resumed
  epoch starts its order there (``EpochOrder.skip``): the skipped images are never read.

``LoaderPosition`` is the callback that writes all of it into every checkpoint (each rank's own) and gives it
back to the loader before a resumed fit builds its iterator. A checkpoint at an epoch's end resumes at the
next epoch's start; one in the middle (``train.checkpoint_every_minutes``, a signal: ``preemption.py``) in the
middle. A resume with another ``train.num_workers`` cannot continue the streams: it says so and the rest of
the epoch draws from fresh ones.
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable, Iterator, NamedTuple

import lightning.pytorch as pl
import numpy as np
import torch
import torch.distributed as dist
from lightning.fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader, Dataset, DistributedSampler, get_worker_info
from torch.utils.data.dataloader import default_collate

from .micro_batches import MicroBatches


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size (0 and 1 outside a process group)."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class EpochOrder(DistributedSampler):
    """The images of one epoch on this process, in order (module docstring).

    A ``DistributedSampler`` so that Lightning keeps it under DDP instead of putting its own in its place; the
    process group is read when an epoch starts, not when the loader is built (before DDP exists).
    """

    def __init__(self, size: int, seed: int) -> None:  # noqa: D107 (DistributedSampler's init needs a group)
        self.size, self.seed, self.epoch = int(size), int(seed), 0
        self.skip = 0  # indices of the next epoch's order to pass over: a mid-epoch resume
        self.multiple = 1  # an epoch's order is cut to a whole number of these: the images of whole steps
        self.epoch_seed: int | None = None  # one process: the seed of the current epoch's permutation
        self.resume_seed: int | None = None  # ... given back by a resume instead of drawing a new one

    shuffle, drop_last = True, False  # what DistributedSampler's readers may ask

    @property
    def rank(self) -> int:
        return rank_and_world()[0]

    @property
    def num_replicas(self) -> int:
        return rank_and_world()[1]

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        _, world = rank_and_world()
        whole = self.size if world == 1 else math.ceil(self.size / world)
        return whole // self.multiple * self.multiple

    def __iter__(self) -> Iterator[int]:
        rank, world = rank_and_world()
        generator = torch.Generator()
        if world == 1:
            seed = self.resume_seed
            if seed is None:  # as RandomSampler draws it, at the start of the epoch's iteration
                seed = int(torch.empty((), dtype=torch.int64).random_().item())
            self.epoch_seed, self.resume_seed = seed, None
            generator.manual_seed(seed)
            order = torch.randperm(self.size, generator=generator).tolist()
        else:  # DistributedSampler(shuffle=True, drop_last=False)'s order
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=generator).tolist()
            total = math.ceil(self.size / world) * world
            order += (order * math.ceil((total - self.size) / self.size))[:total - self.size]
            order = order[rank:total:world]
        skip, self.skip = self.skip, 0
        yield from order[skip:len(order) // self.multiple * self.multiple]


class Streams(NamedTuple):
    """The states of torch's CPU generator (a uint8 tensor, a copy), NumPy's and Python's."""

    torch_state: torch.Tensor
    numpy_state: tuple
    python_state: tuple

    @classmethod
    def now(cls) -> "Streams":
        return cls(torch.get_rng_state(), np.random.get_state(), random.getstate())

    def restore(self) -> None:
        torch.set_rng_state(self.torch_state)
        np.random.set_state(self.numpy_state)
        random.setstate(self.python_state)

    def saved(self) -> tuple:
        """As a checkpoint holds it: tensors, ints, floats, strings and tuples only (Lightning may read
        checkpoints with ``weights_only=True``)."""
        name, keys, pos, has_gauss, cached = self.numpy_state
        return (self.torch_state,
                (name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
                self.python_state)

    @classmethod
    def from_saved(cls, saved: tuple) -> "Streams":
        torch_state, (name, keys, pos, has_gauss, cached), python_state = saved
        return cls(torch_state, (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached),
                   tuple(python_state[:1]) + (tuple(python_state[1]),) + tuple(python_state[2:]))


def worker_streams(base_seed: int, slot: int, rank: int) -> Streams:
    """The generators worker ``slot`` of an iterator with ``base_seed`` starts from (torch's worker seeding,
    then Lightning's ``pl_worker_init_function``), computed here without touching this process's own."""
    mine = Streams.now()
    try:
        torch.manual_seed(base_seed + slot)
        pl_worker_init_function(slot, rank)
        return Streams.now()
    finally:
        mine.restore()


class WorkerSeeding:
    """The loader's ``worker_init_fn``: Lightning's seeding, then the streams a resume gives the worker."""

    def __init__(self) -> None:
        self.rank = 0
        self.start: list[Streams] | None = None  # per worker of the next iterator, or None: seeded afresh

    def __call__(self, worker_id: int) -> None:
        pl_worker_init_function(worker_id, self.rank)
        if self.start is not None:
            self.start[worker_id].restore()


class WorkerBatch(NamedTuple):
    """A micro-batch with the generator states of the worker that made it, as they are after it."""

    batch: Any
    streams: Streams

    def pin_memory(self) -> "WorkerBatch":  # torch's pin-memory thread calls this on objects that have it
        from torch.utils.data._utils.pin_memory import pin_memory

        return WorkerBatch(pin_memory(self.batch), self.streams)


class CollateWithState:
    """``collate`` of a micro-batch's samples, returned with its worker's generator states (``WorkerBatch``)."""

    def __init__(self, collate: Callable | None) -> None:
        self.collate = collate or default_collate

    def __call__(self, samples: list) -> WorkerBatch:
        return WorkerBatch(self.collate(samples), Streams.now())


class Resume(NamedTuple):
    """Where a resumed epoch starts: its epoch, the optimizer steps already trained, the one-process permutation
    seed, and each stream's generators (None: seed them afresh)."""

    epoch: int
    batches_done: int
    epoch_seed: int | None
    slots: list[Streams] | None


class ResumableLoader(DataLoader):
    """A shuffled loader of whole optimizer steps, ``micro_batches`` micro-batches of ``batch_size`` images each
    (module docstring), whose iterators are resumable: ``position(batches_done)`` says where it stands after
    ``batches_done`` steps, ``resume(...)`` makes the next iterator start there. ``prefetch_factor``: the
    micro-batches each worker makes ahead (torch's default, 2, when None)."""

    def __init__(self, dataset: Dataset, batch_size: int, seed: int, num_workers: int = 0,
                 collate_fn: Callable | None = None, pin_memory: bool = False, micro_batches: int = 1,
                 prefetch_factor: int | None = None) -> None:
        self.seeding = WorkerSeeding()
        self.micro_batches = int(micro_batches)
        order = EpochOrder(len(dataset), seed)
        order.multiple = int(batch_size) * self.micro_batches
        super().__init__(dataset, batch_size=batch_size, sampler=order, drop_last=True, num_workers=num_workers,
                         collate_fn=CollateWithState(collate_fn), pin_memory=pin_memory,
                         worker_init_fn=self.seeding, persistent_workers=False,
                         prefetch_factor=prefetch_factor if num_workers else None)
        self._resume: Resume | None = None
        self._start = 0  # the first micro-batch of the current iterator in its epoch
        self._slot_start: list[Streams] | None = None  # each stream's generators at that micro-batch (None: fresh)
        self._base_seed = 0  # the current iterator's base seed (fresh streams start from it)
        self._after: dict[int, Streams] = {}  # micro-batch index in the epoch -> its stream's generators after it

    def __len__(self) -> int:
        """Optimizer steps per epoch: the epoch's micro-batches // ``micro_batches`` (a whole number: the order is
        cut to whole steps)."""
        return super().__len__() // self.micro_batches

    @property
    def slots(self) -> int:
        """The random streams of an epoch: one per worker, one for the main process without workers."""
        return max(1, self.num_workers)

    def resume(self, state: Resume) -> None:
        """Start the next iterator at ``state`` (``LoaderPosition`` calls this before a resumed fit begins)."""
        order: EpochOrder = self.sampler
        order.set_epoch(state.epoch)
        order.skip = state.batches_done * self.micro_batches * int(self.batch_size)
        order.resume_seed = state.epoch_seed
        self._resume = state

    def __iter__(self) -> Iterator[Any]:
        resume, self._resume = self._resume, None
        rank, _ = rank_and_world()
        self.seeding.rank = rank
        self._start = resume.batches_done * self.micro_batches if resume else 0
        self._slot_start = None
        if resume is not None and resume.slots is not None:
            shift = self._start % self.slots  # worker j continues the stream of slot (start + j) mod W
            self._slot_start = list(resume.slots)
            self.seeding.start = [resume.slots[(shift + j) % self.slots] for j in range(self.slots)]
        if resume is None:
            base = super().__iter__()
        else:
            # The iterator draws its base seed (and with workers the epoch's permutation seed) from torch's
            # generator; the resumed run's generator must stay where the checkpoint left it.
            with torch.random.fork_rng(devices=[]):
                base = super().__iter__()
        self.seeding.start = None  # the workers have their copy; the next epoch's start afresh
        self._base_seed = int(base._base_seed)
        self._after = {}
        return self._batches(base)

    def _batches(self, base: Iterator[WorkerBatch]) -> Iterator[Any]:
        own: Streams | None = None
        if self.num_workers == 0:  # the main process's data stream, kept apart from its own generators
            own = self._slot_start[0] if self._slot_start else worker_streams(self._base_seed, 0, self.seeding.rank)
        index = self._start
        # what position() may still ask for: the last micro-batch of every stream before the step being trained,
        # while the loader may already be gathering the next step
        kept = 2 * (self.slots + self.micro_batches) + 4
        step: list[Any] = []
        while True:
            if own is not None:
                mine = Streams.now()
                own.restore()
            try:
                item = next(base)
            except StopIteration:
                return  # the order holds whole steps: nothing is gathered here
            finally:
                if own is not None:
                    own = Streams.now()
                    mine.restore()
            self._after[index] = item.streams
            self._after.pop(index - kept, None)
            index += 1
            step.append(item.batch)
            if len(step) == self.micro_batches:
                yield step[0] if self.micro_batches == 1 else MicroBatches(step)
                step = []

    def position(self, batches_done: int) -> dict[str, Any]:
        """This process's position after ``batches_done`` optimizer steps of the current epoch: the permutation
        seed and, per stream, the generators after its last trained micro-batch (or where it started)."""
        micro_done = batches_done * self.micro_batches
        slots = []
        for slot in range(self.slots):
            done = [k for k in self._after if k < micro_done and k % self.slots == slot]
            if done:
                slots.append(self._after[max(done)])
            elif self._slot_start is not None:
                slots.append(self._slot_start[slot])
            else:
                slots.append(worker_streams(self._base_seed, slot, self.seeding.rank))
        order: EpochOrder = self.sampler
        return {"epoch": order.epoch, "epoch_seed": order.epoch_seed, "workers": self.num_workers,
                "micro_batches": self.micro_batches, "slots": [s.saved() for s in slots]}


class LoaderPosition(pl.Callback):
    """Every rank's ``ResumableLoader`` position in every checkpoint, given back on resume (module docstring).

    ``state_dict`` runs on every rank when a checkpoint is written (as ``RNGState``'s), so the ranks' positions
    are gathered there for rank 0 to write. ``batches_done`` and ``batches_total`` (the same on every rank)
    say how far the epoch had gone, in optimizer steps; ``run_start.checkpoint_position`` reads them for the run's
    log."""

    def __init__(self, loader: ResumableLoader) -> None:
        self.loader = loader
        self.batches_done = 0
        self.batches_total = 0

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.batches_done, self.batches_total = 0, int(trainer.num_training_batches)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self.batches_done = batch_idx + 1  # the index within the epoch, also in an epoch resumed in its middle
        self.batches_total = int(trainer.num_training_batches)

    def state_dict(self) -> dict[str, Any]:
        own = self.loader.position(self.batches_done)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            ranks: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(ranks, own)
        else:
            ranks = [own]
        return {"batches_done": self.batches_done, "batches_total": self.batches_total, "ranks": ranks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rank, _ = rank_and_world()
        own = state["ranks"][rank]
        done, total = int(state["batches_done"]), int(state["batches_total"])
        if done >= total:  # written at the epoch's end: the next epoch starts at its beginning
            self.loader.sampler.set_epoch(int(own["epoch"]) + 1)
            return
        slots = [Streams.from_saved(s) for s in own["slots"]]
        dealt = int(own.get("micro_batches", 1))  # a checkpoint from before micro-batches: one batch per step
        if len(slots) != self.loader.slots or dealt != self.loader.micro_batches:
            if rank == 0:
                other = (f"train.num_workers is {self.loader.num_workers} and the checkpoint's epoch ran with "
                         f"{own['workers']}" if len(slots) != self.loader.slots else
                         f"the loader deals {self.loader.micro_batches} micro-batch(es) per step and the checkpoint's "
                         f"epoch dealt {dealt}")
                print(f"{other}: the rest of epoch {int(own['epoch']) + 1} draws its augmentations from fresh "
                      "random streams, not those an uninterrupted run would have drawn", flush=True)
            slots = None
        self.loader.resume(Resume(int(own["epoch"]), done, own["epoch_seed"], slots))
        self.batches_done, self.batches_total = done, total
