"""The smallest pretraining and supervised runs the tests train end to end, and a callback that
records their losses: the speed keys are tested by comparing the losses of such runs.

Both pin ``train.precision=32-true``: a comparison of two code paths (compiled vs eager, one optimizer
implementation vs another) must not depend on which precision ``auto`` picks on the machine the tests
run on (bf16-mixed on a CPU with native bf16 rounds both sides differently). Tests of the mixed
modes set ``train.precision`` after these keys."""
import lightning.pytorch as pl
import torch

DINO_TINY = ["model.arch=vit_tiny", "model.depth=1", "dino.out_dim=32", "dino.hidden_dim=32",
             "dino.bottleneck_dim=16", "dino.global_crop_size=32", "dino.local_crop_size=16",
             "dino.local_crops_number=2", "data.n_train=8", "data.n_val=4", "train.batch_size_per_device=4",
             "train.num_workers=0", "train.knn_every_n_epochs=0", "train.epochs=1", "optim.warmup_epochs=0",
             "diagnostics.every_n_epochs=0", "diagnostics.signals_every_n_steps=0", "train.precision=32-true"]
SUP_TINY = ["model.arch=vit_tiny", "model.depth=1", "aug.image_size=32", "data.n_train=8", "data.n_val=4",
            "train.batch_size_per_device=4", "train.num_workers=0", "train.epochs=1", "optim.warmup_epochs=0",
            "train.precision=32-true"]


class Losses(pl.Callback):
    """The training loss of every step, as floats."""

    def __init__(self):
        self.values = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.values.append(float(outputs["loss"] if isinstance(outputs, dict) else outputs))


class PoisonAt(pl.Callback):
    """Writes a NaN into one student weight before the given global step."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step:
            with torch.no_grad():
                next(p for p in pl_module.parameters() if p.requires_grad).view(-1)[0] = float("nan")


class StepsSeen(pl.Callback):
    """The batch each training step receives, as the step receives it (after ``on_after_batch_transfer``)."""

    def __init__(self):
        self.batches = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.batches.append(batch)


def assert_steps_of_two_float_micro_batches(seen: StepsSeen, shapes: list[tuple[int, ...]]) -> None:
    """Every step arrived as two micro-batches (``MicroBatches``) of float crops of ``shapes``: the device
    augmentation coloured (and cut) each one before the step saw it."""
    from skipless.training.micro_batches import MicroBatches

    assert seen.batches and all(isinstance(step, MicroBatches) and len(step) == 2 for step in seen.batches)
    for crops in (part for step in seen.batches for part in step):
        assert [tuple(c.shape) for c in crops] == shapes
        assert all(c.dtype == torch.float32 for c in crops)


def epoch(loader, stop: int | None = None) -> list:
    """The batches of one pass over ``loader``, or of its first ``stop`` steps (the loader-position tests)."""
    batches = []
    for batch in loader:
        batches.append(batch)
        if stop is not None and len(batches) == stop:
            break
    return batches


def cut_and_resumed(loader, cut: int) -> tuple[list, list, "torch.Tensor"]:
    """An epoch of ``loader()`` (a ``ResumableLoader`` factory) stopped after ``cut`` steps under torch's seed 0,
    and a new loader resumed from its position under another seed (the resumed process's own generator):
    (the first ``cut`` steps, the rest of the epoch, torch's RNG state just before the resumed epoch ran)."""
    import torch

    from skipless.training.loader_state import Resume, Streams

    torch.manual_seed(0)
    first = loader()
    head = epoch(first, stop=cut)
    saved = first.position(cut)
    resumed = loader()
    resumed.resume(Resume(saved["epoch"], cut, saved["epoch_seed"], [Streams.from_saved(s) for s in saved["slots"]]))
    torch.manual_seed(123)
    before = torch.get_rng_state()
    return head, epoch(resumed), before
