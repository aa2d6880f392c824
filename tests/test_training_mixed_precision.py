"""Mixed precision as every training run uses it (training/precision.py): bf16-mixed and 16-mixed forced
on the CPU (CPU autocast runs both, emulated where the CPU has no native kernels), whatever ``auto`` picks.

- 16-mixed: clipping, the last-layer freeze and the logged gradient norms see the unscaled gradients,
  the same as a 32-true step on the same batch; skipped steps are counted in TensorBoard.
- bf16-mixed: every preset with both optimizers, pretraining and supervised, trains, checkpoints and
  resumes; SOAP's statistics stay float32.
"""
from __future__ import annotations

import json

import lightning.pytorch as pl
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from skipless.config import load_config
from skipless.pretrain import pretrain, run_dir_of
from skipless.ssl.dino import module as dino_module
from skipless.train import run_dir_of as train_run_dir_of
from skipless.train import train
from skipless.training import diagnostics_callbacks
from skipless.training.precision import StepOutsideAutocast
from tiny_runs import DINO_TINY, SUP_TINY, Losses


class GradientsAtStep(pl.Callback):
    """The gradient of every student parameter as the optimizer receives it (after clipping and the freeze),
    at each step: Lightning calls ``on_before_optimizer_step`` just before ``optimizer.step``."""

    def __init__(self):
        self.steps: list[dict[str, torch.Tensor | None]] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.steps.append({n: None if p.grad is None else p.grad.detach().clone()
                           for n, p in pl_module.student.named_parameters()})


def _dino_step(tmp_path, monkeypatch, precision, clip):
    """One DINO step (a batch of 4) at ``precision``: the gradients at the step, the gradient norms
    clipping saw, the gradient norms BlockSignals logged."""
    clip_saw, logged = [], []
    original_clip, original_norms = dino_module.clip_gradients_per_parameter, diagnostics_callbacks.gradient_norms

    def clip_spy(params, max_norm):
        params = list(params)
        clip_saw.append([p.grad.norm().item() for p in params if p.grad is not None])
        return original_clip(params, max_norm)

    def norms_spy(model):
        logged.append(original_norms(model))
        return logged[-1]

    grads = GradientsAtStep()
    cfg = load_config("pretrain", [*DINO_TINY, "model.depth=2", "train.max_steps=1", f"train.precision={precision}",
                                   f"optim.clip_grad={clip}", "diagnostics.signals_every_n_steps=1",
                                   f"data.root={tmp_path / 'data'}", f"run.root={tmp_path}", f"run.name={precision}"])
    with monkeypatch.context() as m:
        m.setattr(dino_module, "clip_gradients_per_parameter", clip_spy)
        m.setattr(diagnostics_callbacks, "gradient_norms", norms_spy)
        trainer, _ = pretrain(cfg, extra_callbacks=[grads])
    return trainer, grads.steps[0], clip_saw[0], logged[0]


def test_16_mixed_clips_freezes_and_logs_the_unscaled_gradients(tmp_path, monkeypatch):
    """With a loss scale of 16, scaled gradients would be 16x the true ones: the gradients clipping and
    BlockSignals read, and those the optimizer gets (clipped at 0.05, the last layer frozen in epoch 0),
    must equal a 32-true step's to fp16's tolerance. The scale is lowered from 2^16 so that the very first
    step does not overflow: in this tiny DINO the fp16 gradient into the L2 normalisation overflows from
    a scale of about 2^10 on (measured), and the step is skipped (next test)."""
    monkeypatch.setattr(StepOutsideAutocast, "INIT_SCALE", 2.0**4)
    runs = {p: _dino_step(tmp_path, monkeypatch, p, clip=0.05) for p in ("32-true", "16-mixed")}
    (_, at_step32, clip32, logged32), (trainer16, at_step16, clip16, logged16) = runs["32-true"], runs["16-mixed"]
    assert trainer16.precision_plugin.scaler.get_scale() >= 2.0**4 and trainer16.precision_plugin.skipped_steps == 0
    torch.testing.assert_close(torch.tensor(clip16), torch.tensor(clip32), rtol=2e-2, atol=1e-6)
    assert max(clip32) > 0.05  # clipping is active: some parameter's gradient is above the threshold
    assert logged16.keys() == logged32.keys() and logged32
    for block in logged32:
        assert logged16[block] == pytest.approx(logged32[block], rel=2e-2)
    for name, g32 in at_step32.items():
        g16 = at_step16[name]
        if name.startswith("head.last_layer"):
            assert g32 is None and g16 is None  # frozen during the first epoch
        elif g32 is not None:
            assert g16.norm() <= 0.05 * (1 + 1e-3)
            # relative to the whole tensor: single tiny entries sit in fp16's subnormal range at a scale of 16
            assert float((g16 - g32).norm()) <= 5e-2 * float(g32.norm()), name


def test_16_mixed_counts_the_steps_the_loss_scaler_skips(tmp_path):
    """At the default scale 2^16 the tiny DINO's fp16 gradients overflow, and the GradScaler skips steps
    (halving the scale each time): the count is the plugin's, it reaches TensorBoard, and a skipped step
    leaves the student's weights as they were."""
    cfg = load_config("pretrain", [*DINO_TINY, "model.depth=2", "train.epochs=2", "train.precision=16-mixed",
                                   "train.log_every_n_steps=1", f"data.root={tmp_path / 'data'}",
                                   f"run.root={tmp_path}", "run.name=fp16"])
    trainer, module = pretrain(cfg)
    plugin = trainer.precision_plugin
    assert isinstance(plugin, StepOutsideAutocast) and 0 < plugin.skipped_steps <= 4
    assert plugin.scaler.get_scale() == 2.0**16 / 2**plugin.skipped_steps
    events = EventAccumulator(str(run_dir_of(cfg) / "tb"))
    events.Reload()
    skipped = [e.value for e in events.Scalars("train/amp_skipped_steps")]
    assert skipped[-1] == plugin.skipped_steps and skipped == sorted(skipped)
    assert [e.value for e in events.Scalars("train/loss_scale")][-1] == plugin.scaler.get_scale()


PRESETS = ["skip", "skipless", "skipless-plain", "decayed", "osa"]


@pytest.mark.parametrize("entry", ["pretrain", "train"])
@pytest.mark.parametrize("optim", ["adamw", "soap"])
@pytest.mark.parametrize("model", PRESETS)
def test_every_preset_trains_checkpoints_and_resumes_in_bf16_mixed(tmp_path, entry, optim, model):
    """bf16-mixed forced: finite losses, a checkpoint, a resumed second epoch, SOAP's state in float32."""
    run, tiny, run_dir = {"pretrain": (pretrain, DINO_TINY, run_dir_of),
                          "train": (train, SUP_TINY, train_run_dir_of)}[entry]
    args = [*tiny, f"model={model}", f"optim={optim}", "train.precision=bf16-mixed", "train.epochs=2",
            "train.limit_train_batches=1", f"data.root={tmp_path / 'data'}", f"run.root={tmp_path}", "run.name=r"]
    first, second = Losses(), Losses()

    class StopAfterFirstEpoch(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            trainer.should_stop = True

    run(load_config(entry, args), extra_callbacks=[first, StopAfterFirstEpoch()])
    assert (run_dir(load_config(entry, args)) / "checkpoints" / "last.ckpt").is_file()
    trainer, module = run(load_config(entry, [*args, "run.resume=true"]), extra_callbacks=[second])
    assert trainer.global_step == 2 and len(first.values) == 1 and len(second.values) == 1
    assert all(torch.isfinite(torch.tensor(first.values + second.values)))
    summary = json.loads((run_dir(load_config(entry, args)) / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["precision"] == "bf16-mixed (set by train.precision)"
    if optim == "soap":
        states = [s for s in trainer.optimizers[0].state.values() if "exp_avg" in s]
        assert states and all(s["exp_avg"].dtype == torch.float32 and all(
            q is None or q.dtype == torch.float32 for q in s["Q"]) for s in states)
