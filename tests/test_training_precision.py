"""train.precision: bf16-mixed and 16-mixed train the fp32 numbers to their tolerance (issue 15's rule for
every speed key), on a short deterministic DINO run and a supervised one. On a CPU without native bf16
this runs emulated (slow at scale, fine at this size); on a GPU one of them is the default (``auto``)."""
import json

import lightning.pytorch as pl
import pytest
import torch

from skipless.config import load_config
from skipless.pretrain import pretrain
from skipless.train import train
from skipless.training.precision import StepOutsideAutocast
from tiny_runs import DINO_TINY, SUP_TINY, Losses

LONGER = ["model.depth=2", "train.epochs=2"]  # two blocks, four steps
# bf16 keeps 8 bits of mantissa (eps 2^-8 = 3.9e-3 per rounding). DINO's loss sharpens the teacher by
# 1/0.04 before the softmax, so its rounding shows more (measured 1.1% against 0.09% supervised).
# fp16 keeps 11 bits (eps 2^-11): the same runs agree about 8x closer. Measured (AMD EPYC with
# AVX512-BF16): DINO 1.2% bf16 / 0.11% fp16, supervised 0.12% / 0.03%.
RTOL = {("pretrain", "bf16-mixed"): 3e-2, ("train", "bf16-mixed"): 1e-2,
        ("pretrain", "16-mixed"): 5e-3, ("train", "16-mixed"): 2e-3}


@pytest.mark.parametrize("mixed", ["bf16-mixed", "16-mixed"])
@pytest.mark.parametrize("entry,run,tiny", [("pretrain", pretrain, DINO_TINY), ("train", train, SUP_TINY)])
def test_mixed_precision_trains_the_fp32_losses_to_its_tolerance(tmp_path, monkeypatch, entry, run, tiny, mixed):
    # A loss scale this tiny DINO's fp16 gradients do not overflow at (from ~2^10 they do, and the
    # skipped steps would make the losses another run's: test_training_mixed_precision.py counts them).
    monkeypatch.setattr(StepOutsideAutocast, "INIT_SCALE", 2.0**4)
    losses = {}
    for precision in ("32-true", mixed):
        rec = Losses()
        cfg = load_config(entry, [*tiny, *LONGER, f"train.precision={precision}", f"data.root={tmp_path / 'data'}",
                                  f"run.root={tmp_path}", f"run.name={precision}"])
        run(cfg, extra_callbacks=[rec])
        losses[precision] = torch.tensor(rec.values)
    fp32, low = losses["32-true"], losses[mixed]
    assert len(fp32) == 4 and len(set(fp32.tolist())) > 1
    assert not torch.equal(low, fp32)  # autocast really ran
    torch.testing.assert_close(low, fp32, rtol=RTOL[entry, mixed], atol=0)


class Dtypes(pl.Callback):
    """The dtypes of every step's loss and of the module's floating parameters."""

    def __init__(self):
        self.loss, self.params = set(), set()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.loss.add((outputs["loss"] if isinstance(outputs, dict) else outputs).dtype)
        self.params |= {p.dtype for p in pl_module.parameters() if p.is_floating_point()}


MAE_TINY = ["ssl=mae", "model=decayed", "model.arch=vit_tiny", "model.depth=1", "model.img_size=32",
            "mae.input_size=32", "mae.decoder.dim=32", "mae.decoder.depth=1", "mae.decoder.heads=2",
            "mae.reconstructions_every_n_epochs=1", "mae.reconstruction_images=2", "data.n_train=8",
            "data.n_val=4", "train.batch_size_per_device=4", "train.num_workers=0", "train.knn_every_n_epochs=1",
            "train.knn_k=3", "train.epochs=1", "optim.warmup_epochs=0", "diagnostics.every_n_epochs=0",
            "diagnostics.signals_every_n_steps=0", "diagnostics.rank_images=4"]


@pytest.mark.parametrize("entry,run,tiny", [("pretrain", pretrain, [*DINO_TINY, "diagnostics.rank_images=4"]),
                                            ("pretrain", pretrain, MAE_TINY), ("train", train, SUP_TINY)],
                         ids=["dino", "mae", "supervised"])
def test_64_true_trains_in_float64_through_the_losses_and_the_monitors(tmp_path, entry, run, tiny):
    """The losses upcast only 16-bit tensors (``full_precision.at_least_float32``): a ``.float()`` there
    rounded the float64 run to float32, and DINO's head failed on it; the monitors feed float32 images to
    the float64 backbone (``features.embed_tokens`` casts them). SOAP, whose statistics follow the weights'
    dtype, on the DINO run."""
    rec = Dtypes()
    extra = ["optim=soap"] if tiny is not MAE_TINY and entry == "pretrain" else []
    cfg = load_config(entry, [*tiny, *extra, "train.precision=64-true", f"data.root={tmp_path / 'data'}",
                              f"run.root={tmp_path}", "run.name=f64"])
    run(cfg, extra_callbacks=[rec])
    assert rec.loss == {torch.float64} and rec.params == {torch.float64}
    summary = json.loads((tmp_path / "f64" / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["precision"].startswith("64-true")
