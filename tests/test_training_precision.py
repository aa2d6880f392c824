"""train.precision: bf16-mixed and 16-mixed train the fp32 numbers to their tolerance (issue 15's rule for
every speed key), on a short deterministic DINO run and a supervised one. On a CPU without native bf16
this runs emulated (slow at scale, fine at this size); on a GPU one of them is the default (``auto``)."""
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
