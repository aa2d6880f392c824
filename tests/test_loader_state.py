"""The resumable training loader (``training/loader_state.py``): its order is RandomSampler's on one process and
DistributedSampler's on several, and an epoch cut after any batch and resumed from ``position()`` gives the rest of
the batches an uninterrupted epoch gives, with the same random draws, with and without workers, without moving
the main process's generators; with k micro-batches per optimizer step the same holds of its steps, each a
``MicroBatches`` of k micro-batches, and without workers they are the rows of the whole steps it dealt before."""
import random

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, DistributedSampler, RandomSampler

from skipless.training import loader_state
from skipless.training.loader_state import EpochOrder, LoaderPosition, ResumableLoader, Resume, Streams
from skipless.training.micro_batches import MicroBatches
from tiny_runs import cut_and_resumed, epoch


class Draws(Dataset):
    """Each item: its index and one draw of torch's, NumPy's and Python's generators, as an augmentation makes."""

    def __len__(self) -> int:
        return 20

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index, float(torch.rand(())), np.random.rand(), random.random()], dtype=torch.float64)


def test_one_process_order_is_random_samplers_and_several_processes_distributed_samplers(monkeypatch):
    data = list(range(11))
    torch.manual_seed(3)
    expected = list(RandomSampler(data))
    torch.manual_seed(3)
    assert list(EpochOrder(len(data), seed=0)) == expected
    for rank in (0, 1, 2):
        monkeypatch.setattr(loader_state, "rank_and_world", lambda rank=rank: (rank, 3))
        theirs = DistributedSampler(data, num_replicas=3, rank=rank, shuffle=True, seed=5)
        ours = EpochOrder(len(data), seed=5)
        for e in (0, 4):
            theirs.set_epoch(e)
            ours.set_epoch(e)
            assert list(ours) == list(theirs) and len(ours) == len(theirs)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("cut", [1, 3])
def test_an_epoch_resumed_after_any_batch_gives_the_rest_of_the_uninterrupted_epoch(workers, cut):
    def loader():
        return ResumableLoader(Draws(), batch_size=3, seed=0, num_workers=workers)

    torch.manual_seed(0)
    straight = epoch(loader())
    assert len(straight) == 6  # 20 images in full batches of 3: drop_last
    # the resumed process's generator is the checkpoint's, whatever it was, and the resumed iterator does not move it
    head, tail, before = cut_and_resumed(loader, cut)
    assert torch.equal(torch.get_rng_state(), before)
    for got, want in zip(head + tail, straight, strict=True):
        assert torch.equal(got, want)
    assert len({round(float(b[0, 1]), 12) for b in straight}) == 6  # the draws differ batch to batch: a real test


def test_without_workers_the_datas_draws_are_kept_apart_from_the_models():
    def batches(model_draws: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        found = []
        for batch in ResumableLoader(Draws(), batch_size=4, seed=0):
            found.append(batch)
            if model_draws:  # dropout, MAE's masks: draws of the training process between two batches
                torch.rand(7), np.random.rand(3), random.random()
        return found

    for a, b in zip(batches(False), batches(True), strict=True):
        assert torch.equal(a, b)


def test_a_resume_with_other_workers_says_the_streams_are_fresh_and_an_epoch_end_starts_the_next(capsys):
    loader = ResumableLoader(Draws(), batch_size=3, seed=0, num_workers=0)
    epoch(loader, stop=2)
    state = {"batches_done": 2, "batches_total": 6, "ranks": [loader.position(2)]}
    other = ResumableLoader(Draws(), batch_size=3, seed=0, num_workers=2)
    LoaderPosition(other).load_state_dict(state)
    assert "train.num_workers is 2 and the checkpoint's epoch ran with 0" in capsys.readouterr().out
    assert len(epoch(other)) == 4 and other.sampler.epoch == 0  # the rest of the epoch, from fresh streams
    ended = ResumableLoader(Draws(), batch_size=3, seed=0)
    LoaderPosition(ended).load_state_dict({**state, "batches_done": 6})
    assert ended.sampler.epoch == 1 and ended.sampler.skip == 0  # written at the epoch's end: the next epoch


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("cut", [1, 2])
def test_an_epoch_of_accumulated_steps_resumed_after_any_step_gives_the_rest_of_the_uninterrupted_epoch(workers, cut):
    """2 micro-batches of 2 images per step: 20 images, 5 steps; the workers take the micro-batches in turn, so
    with 2 workers the two micro-batches of a step come from different streams and a cut after step 1 leaves
    each stream in the middle of the epoch."""
    def loader():
        return ResumableLoader(Draws(), batch_size=2, seed=0, num_workers=workers, micro_batches=2)

    torch.manual_seed(0)
    straight = epoch(loader())
    assert len(loader()) == len(straight) == 5
    assert all(isinstance(step, MicroBatches) and [len(part) for part in step] == [2, 2] for step in straight)
    torch.manual_seed(0)
    first = loader()
    head = epoch(first, stop=cut)
    saved = first.position(cut)
    assert saved["micro_batches"] == 2
    resumed = loader()
    resumed.resume(Resume(saved["epoch"], cut, saved["epoch_seed"], [Streams.from_saved(s) for s in saved["slots"]]))
    torch.manual_seed(123)
    before = torch.get_rng_state()
    tail = epoch(resumed)
    assert torch.equal(torch.get_rng_state(), before)
    for got, want in zip(head + tail, straight, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
    draws = [round(float(part[0, 1]), 12) for step in straight for part in step]
    assert len(set(draws)) == 10


def test_without_workers_the_micro_batches_of_a_step_are_the_rows_of_the_whole_step_and_an_epoch_ends_on_a_step():
    """A step of 2 micro-batches of 3 images holds the images and draws of one batch of 6 (one stream, drawn in
    the same order); the 2 images of the 20 that fill no step are not dealt: 3 steps, as with batches of 6."""
    torch.manual_seed(0)
    whole = epoch(ResumableLoader(Draws(), batch_size=6, seed=0))
    torch.manual_seed(0)
    parts = ResumableLoader(Draws(), batch_size=3, seed=0, micro_batches=2)
    steps = epoch(parts)
    assert len(parts) == len(steps) == len(whole) == 3 and len(parts.sampler) == 18
    for step, batch in zip(steps, whole, strict=True):
        assert torch.equal(torch.cat(step), batch)


def test_a_checkpoint_dealt_in_other_micro_batches_continues_the_order_from_fresh_streams(capsys):
    """A checkpoint written before the loader dealt micro-batches (no ``micro_batches`` in its position: one per
    step) resumed with 2 per step: the images continue where they stopped, the streams cannot."""
    loader = ResumableLoader(Draws(), batch_size=4, seed=0)
    epoch(loader, stop=2)
    position = loader.position(2)
    del position["micro_batches"]
    accumulated = ResumableLoader(Draws(), batch_size=2, seed=0, micro_batches=2)
    LoaderPosition(accumulated).load_state_dict({"batches_done": 2, "batches_total": 5, "ranks": [position]})
    assert ("the loader deals 2 micro-batch(es) per step and the checkpoint's epoch dealt 1: the rest of epoch 1 "
            "draws its augmentations from fresh random streams") in capsys.readouterr().out
    assert accumulated.sampler.skip == 8 and len(epoch(accumulated)) == 3
