"""The precision of a training run: which one ``train.precision=auto`` picks and why, and the mixed-precision
plugin every training run uses.

What runs in low precision (both mixed modes): the forward passes and the loss, under the autocast that
Lightning opens around ``training_step``. Everything after the backward pass (gradient clipping, the
last-layer freeze, the optimizer step, the EMA teacher, DINO's center) runs in fp32 outside it: the
modules wrap it in ``full_precision()``, and ``StepOutsideAutocast.optimizer_step`` leaves autocast
for the step itself, as the official DINO's ``main_dino.py`` (whose autocast covers only the forward
passes and the loss).

16-mixed (fp16 with loss scaling): the gradients are unscaled as soon as the backward pass ends, before
any hook sees them, so per-parameter clipping, the freeze and the logged gradient norms all read the
true gradients (DINO: ``fp16_scaler.unscale_`` before ``clip_gradients``). Lightning's own plugin
unscales only inside its optimizer step, after the module has already clipped. A step whose
gradients are not finite is skipped by the GradScaler and counted (``skipped_steps``; TensorBoard
``train/amp_skipped_steps`` and ``train/loss_scale``, ``LossScaleMonitor``). Under gradient accumulation
(``train.global_batch``, ``training/micro_batches.py``) the backward passes of the micro-batches before the
last run inside ``keep_scaled``: their gradients add up scaled by the one loss scale of the step, and the
sum is unscaled once, after the last backward pass, before the clipping reads it.

The pure low-precision modes (bf16-true, 16-true) are refused by the schemas: they would keep the
weights, the optimizer's moments and the EMA teacher in bf16/fp16, where an EMA at momentum 0.996 loses
most of each update to rounding (measured: a bf16 teacher moved 56% as far as an fp32 one).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

import lightning.pytorch as pl
import torch
from lightning.pytorch.plugins.precision import DoublePrecision, MixedPrecision, Precision
from omegaconf import DictConfig

from ..devices.full_precision import full_precision
from ..devices.world import runs_on_cuda

MIXED = ("16-mixed", "bf16-mixed")


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN runs bf16 natively on this CPU (AVX512-BF16 or AMX visible to it;
    ``ONEDNN_MAX_CPU_ISA=AVX2`` hides them).

    Without it bf16 autocast is emulated: measured on this project's 2-core CPU (an AMD EPYC VM whose
    /proc/cpuinfo shows AVX2 only), a ViT-S/16 forward + backward of 8 images at 224 px took 7.3-8.2 s
    in fp32 and 85-95 s under bf16 autocast, 11x slower."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def gpu_has_bf16() -> bool:
    """Whether the current CUDA device has bf16 tensor cores (compute capability 8.0+: A100, H100, RTX 30xx
    and later). ``torch.cuda.is_bf16_supported()`` also says yes where bf16 is only emulated (V100, T4)."""
    return torch.cuda.get_device_capability() >= (8, 0)


def choose_precision(cfg: DictConfig) -> tuple[str, str]:
    """``(precision, why)`` for ``train.precision``; ``auto`` decides by the hardware:

    - a GPU with bf16 tensor cores: bf16-mixed (DINO's fp16 needs loss scaling; bf16 has fp32's range);
    - a GPU without (V100, T4): 16-mixed, fp16 with loss scaling, as the official DINO's ``use_fp16``;
    - a CPU: fp32, ``cpu_precision`` says why.
    """
    chosen = str(cfg.train.precision)
    if chosen != "auto":
        return chosen, "set by train.precision"
    if runs_on_cuda(cfg):
        if gpu_has_bf16():
            return "bf16-mixed", "auto: GPU with bf16"
        return "16-mixed", "auto: GPU without bf16 (compute capability < 8.0), fp16 with loss scaling"
    return cpu_precision(cpu_has_native_bf16())


def cpu_precision(native_bf16: bool) -> tuple[str, str]:
    """``auto`` on a CPU: fp32 (``32-true``) on every CPU kind, with or without native bf16.

    Why (issue 26; the measurements are in docs/results.md, "Precision on every device"): the CPU
    demo is a smoke test that must give one result on every CPU a user has, and bf16 would make its
    arithmetic depend on the CPU kind (native in oneDNN on AVX512-BF16 or AMX, emulated elsewhere).
    What it buys differs by kind too: the AdamW demo took 348 s in bf16-mixed against 385 s in
    fp32 on a Zen 4 (AVX512-BF16); about 3x faster on an AMX Intel, where fp32 still keeps the demo
    near its 10 minutes; emulated (AVX2 only) it is 11x slower. ``train.precision=bf16-mixed`` uses a
    CPU's native bf16 when asked for."""
    if native_bf16:
        return "32-true", "auto: CPU, fp32 on every CPU kind; train.precision=bf16-mixed uses this one's native bf16"
    return "32-true", "auto: CPU, fp32 on every CPU kind; bf16 would be emulated here, ~11x slower"


def autocast_device(cfg: DictConfig) -> str:
    """The device type autocast and the GradScaler work on."""
    if runs_on_cuda(cfg):
        return "cuda"
    return "mps" if cfg.train.accelerator == "mps" else "cpu"


class StepOutsideAutocast(MixedPrecision):
    """Lightning's ``MixedPrecision`` (autocast around the forward passes and the loss; a GradScaler for
    16-mixed) with the optimizer step outside autocast and, for 16-mixed, the gradients unscaled right
    after the backward pass (module docstring). Used for any optimizer, fused AdamW included: the
    scaler's ``step`` sees them already unscaled and only skips a step whose gradients are not finite."""

    INIT_SCALE = 2.0**16  # GradScaler's default, and the official DINO's (its fp16_scaler is a default one)

    def __init__(self, precision: str, device: str) -> None:
        scaler = torch.amp.GradScaler(device, init_scale=self.INIT_SCALE) if precision == "16-mixed" else None
        super().__init__(precision, device, scaler=scaler)  # type: ignore[arg-type]
        self.skipped_steps = 0
        self._unscaled: set[int] = set()
        self._keep_scaled = False

    def _unscale(self, optimizer: Any) -> None:
        if id(optimizer) not in self._unscaled:
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    @contextmanager
    def keep_scaled(self) -> Iterator[None]:
        """Backward passes inside leave the gradients scaled: the micro-batches of an accumulated step but
        its last (``training/micro_batches.py``), whose backward pass unscales the sum."""
        self._keep_scaled = True
        try:
            yield
        finally:
            self._keep_scaled = False

    def post_backward(self, tensor: torch.Tensor, module: pl.LightningModule) -> torch.Tensor:
        if self.scaler is not None and not self._keep_scaled:
            if self._unscaled:
                raise RuntimeError("a second backward pass after the gradients were unscaled: 16-mixed unscales "
                                   "them after the last backward pass of a step, and the micro-batches before it "
                                   "run inside keep_scaled (training/micro_batches.py)")
            with full_precision():
                for optimizer in module.trainer.optimizers:
                    self._unscale(optimizer)
        return super().post_backward(tensor, module)

    def optimizer_step(self, optimizer: Any, model: pl.LightningModule, closure: Callable[[], Any],
                       **kwargs: Any) -> Any:
        with full_precision():
            if self.scaler is None:
                return super().optimizer_step(optimizer, model=model, closure=closure, **kwargs)
            closure_result = closure()
            if closure_result is None and model.automatic_optimization:
                return None  # backward skipped by the module: nothing to step
            self._unscale(optimizer)
            self._unscaled.discard(id(optimizer))
            self._after_closure(model, optimizer)
            # A skipped step is exactly one after which update() lowered the scale (it only grows otherwise).
            # get_scale() reads the device twice per step, under 16-mixed only, where the scaler's own
            # step already waits for its found-inf flag.
            scale = self.scaler.get_scale()
            out = self.scaler.step(optimizer, **kwargs)
            self.scaler.update()
            self.skipped_steps += int(self.scaler.get_scale() < scale)
            return out

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.scaler is not None:
            state = {**state, "skipped_steps": self.skipped_steps}
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        self.skipped_steps = int(state.pop("skipped_steps", 0))
        super().load_state_dict(state)


def describe_precision(cfg: DictConfig) -> str:
    """What the run header and ``summary.json`` say: ``bf16-mixed (auto: GPU with bf16)``."""
    return "{} ({})".format(*choose_precision(cfg))


def plugin_for(precision: str, device: str) -> Precision:
    """Lightning's precision plugin for ``precision`` on ``device`` (cpu | cuda | mps): the mixed modes as
    ``StepOutsideAutocast``. For the bench's trainers too, so they time the step every run takes."""
    if precision in MIXED:
        return StepOutsideAutocast(precision, device)
    if precision == "64-true":
        return DoublePrecision()
    if precision == "32-true":
        return Precision()
    raise ValueError(f"precision {precision} is not supported")  # the schemas refuse it first


def precision_plugin(cfg: DictConfig) -> tuple[Precision, str]:
    """The Trainer's precision plugin for ``cfg``, and ``describe_precision``."""
    precision, why = choose_precision(cfg)
    return plugin_for(precision, autocast_device(cfg)), f"{precision} ({why})"


class LossScaleMonitor(pl.Callback):
    """16-mixed: the loss scale and the GradScaler's skipped steps (cumulative) to TensorBoard every
    ``log_every_n_steps``, and the total in the log at each epoch end that skipped any."""

    def __init__(self) -> None:
        self._reported = 0

    @staticmethod
    def _plugin(trainer: pl.Trainer) -> StepOutsideAutocast | None:
        plugin = trainer.precision_plugin
        return plugin if isinstance(plugin, StepOutsideAutocast) and plugin.scaler is not None else None

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs, batch, batch_idx) -> None:
        plugin = self._plugin(trainer)
        if plugin is None or trainer.global_step % trainer.log_every_n_steps:
            return
        for logger in trainer.loggers:
            logger.log_metrics({"train/amp_skipped_steps": float(plugin.skipped_steps),
                                "train/loss_scale": float(plugin.scaler.get_scale())}, step=trainer.global_step)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        plugin = self._plugin(trainer)
        if plugin is None or plugin.skipped_steps == self._reported or not trainer.is_global_zero:
            return
        self._reported = plugin.skipped_steps
        print(f"epoch {trainer.current_epoch + 1}: fp16 loss scaling skipped {plugin.skipped_steps} steps so far "
              f"(gradients not finite; loss scale now {plugin.scaler.get_scale():g})", flush=True)
