"""Next-token training of a causal language model (seeds/000 App. A.8) as one flat LightningModule.

The model is ``models/causal_lm.py``'s ``CausalLM`` built from ``cfg.model`` (``lm_from_config``); the data are
windows of ``context + 1`` tokens, inputs and targets one token apart (``language/data.py``). Optimisation is
manual, so the recipe reads in order in ``training_step``, as in the other methods:

1. the step's lr and weight decay from the schedules (``training/module_contract.start_step``): linear warm-up
   from 0 over ``optim.warmup_steps``, then cosine to ``optim.min_lr_ratio x lr`` at ``train.steps``
   (``lm_schedule``: flame's ``cosine_scheduler_lambda``, step for step); the weight decay constant;
2. each micro-batch of the step (``training/micro_batches.py``: ``train.global_batch`` accumulated) forwarded,
   its loss ``window_loss`` (the mean cross-entropy of every position's logits against the next token)
   backpropagated with its share of the step's tokens;
3. the global gradient norm clipped to ``optim.clip_grad``, the optimizer stepped, in fp32 outside autocast;
4. the loss recorded for the divergence guard (``training/divergence.py``), which names the lr key.

Weight decay (``optim.weight_decay_params``): ``all`` decays every parameter, as flame's torchtitan optimizer does
(one parameter group: the RMSNorm weights and the tied embedding too); ``matrices`` leaves the 1-D parameters
(the norms' weights) undecayed, as the suite's ViTs (``optim/param_groups.py``).

Validation (``validate``): the mean next-token loss over every validation window, and its perplexity ``exp``
of it, at step 0 of a fresh run, every ``train.val_every_n_steps`` optimizer steps and at the last step, reduced
over the ranks as sums of token losses and counts (so the mean is the split's, whatever the ranks' shares), under
the training's autocast, with no random draw. TensorBoard: ``val/loss``, ``val/perplexity`` at the optimizer step;
``train/loss``, ``watch/schedule/lr``, ``watch/schedule/weight_decay`` and ``watch/speed/tokens_per_s`` (tokens of
all ranks per second of wall time since the last logged step) every ``train.log_every_n_steps`` steps.

``backbone.pt`` holds the ``CausalLM`` (``family: lm``: ``models/checkpoint.load_backbone`` rebuilds it), with
the tokenizer's record (name, file, sha256, end-of-text token, vocabulary size) in its ``extra``.
"""
from __future__ import annotations

import math
import time
from contextlib import nullcontext
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from omegaconf import DictConfig

from ..data.text import PackedWindows
from ..devices.full_precision import full_precision
from ..devices.step_scalars import device_scalars
from ..devices.world import global_batch
from ..models.causal_lm import LM_ARCHS, CausalLM, create_causal_lm
from ..models.compile import compile_in_place
from ..optim import optimizer_from_config
from ..optim.param_groups import param_groups
from ..optim.schedules import cosine_schedule
from ..reports.summary import module_peak_lr
from ..training.divergence import stop_if_diverged
from ..training.micro_batches import micro_steps, rows
from ..training.module_contract import start_step
from .data import validation_batches

SIZE_KEYS = ("embed_dim", "depth", "num_heads", "mlp_hidden", "context")


def lm_args(m: DictConfig, vocab_size: int) -> dict[str, Any]:
    """``create_causal_lm``'s arguments of a ``model`` section: the arch, the residual mode and init, the sizes set
    (null keys keep the arch's) and the vocabulary: ``model.vocab_size``, or (null) the tokenizer's ``vocab_size``."""
    sizes = {k: int(m[k]) for k in SIZE_KEYS if m[k] is not None}
    return dict(arch=str(m.arch), residual=str(m.residual), init=str(m.init),
                init_args={k: v for k, v in dict(m.init_args).items() if v is not None},
                alpha_min=m.alpha_min, decay_indexing=str(m.decay.indexing), decay_branches=str(m.decay.branches),
                decay_zero_init=bool(m.decay.zero_init), rope_theta=float(m.rope_theta),
                vocab_size=int(m.vocab_size if m.vocab_size is not None else vocab_size), **sizes)


def lm_context(m: DictConfig) -> int:
    """The training window in tokens of a ``model`` section: ``model.context``, or (null) its arch's."""
    return int(m.context if m.context is not None else LM_ARCHS[str(m.arch)]["context"])


def lm_from_config(m: DictConfig, vocab_size: int) -> CausalLM:
    """The initialised ``CausalLM`` of a ``model`` section (``lm_args``), drawn from torch's global generator."""
    return create_causal_lm(**lm_args(m, vocab_size))


def window_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The mean over every position of ``-log softmax(logits)[target]``, in float32: ``logits`` (B, T, V) of the
    window's inputs, ``targets`` (B, T) the next tokens (each window's inputs shifted by one)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def lm_schedule(peak: float, steps: int, warmup: int, min_ratio: float) -> np.ndarray:
    """The lr of each optimizer step: ``peak x s / warmup`` for ``s < warmup``, then
    ``peak (r + (1 - r) (1 + cos(pi (s - warmup) / (steps - warmup))) / 2)`` with ``r = min_ratio``: flame's
    ``cosine_scheduler_lambda`` (its warm-up starts at 0 and reaches ``peak`` at step ``warmup``), which is
    ``optim.schedules.cosine_schedule`` with MAE's warm-up over one-step epochs."""
    return cosine_schedule(peak, peak * min_ratio, int(steps), 1, warmup_epochs=int(warmup),
                           warmup_reaches_base=False)


class LanguageModel(pl.LightningModule):
    """A causal language model trained on next-token prediction (module docstring).

    Args:
        cfg: the resolved ``configs/lm.yaml`` config.
        vocab_size: the tokenizer's (the model's unless ``model.vocab_size`` pads it).
        val_windows: the validation split's windows (None: no validation, a module stepped by hand).
        tokenizer: the tokenizer's record (``TextData.tokenizer_record``), written into ``backbone.pt``.
    """

    def __init__(self, cfg: DictConfig, vocab_size: int, val_windows: PackedWindows | None = None,
                 tokenizer: dict | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.schedules: dict[str, np.ndarray] = {}  # per optimizer step, from configure_optimizers
        self.automatic_optimization = False
        self.model = lm_from_config(cfg.model, vocab_size)
        compile_in_place((self.model,), cfg.train.compile)
        self.val_windows, self.tokenizer = val_windows, dict(tokenizer or {})
        self.val_history: list[dict[str, float]] = []  # every validation of the run (kept in its checkpoints)
        self._tick: tuple[float, int] | None = None  # (time, step) of the last logged step: tokens/s
        self._speed: float | None = None  # the last tokens/s measured

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens)

    # ---- the pieces the shared callbacks use ------------------------------------------------------
    def exported_backbone(self) -> CausalLM:
        """What ``backbone.pt`` holds: the whole model (its head is the tied embedding)."""
        return self.model

    def trained_backbone(self) -> CausalLM:
        return self.model

    def backbone_extra(self) -> dict[str, Any]:
        """What ``backbone.pt`` records beside the weights (``training/callbacks.ExportBackbone``): the tokenizer."""
        return {"tokenizer": self.tokenizer} if self.tokenizer else {}

    @property
    def last_val(self) -> dict[str, Any] | None:
        """The last validation and the first (``summary.json``'s ``val``, the closing lines)."""
        if not self.val_history:
            return None
        return {**self.val_history[-1], "first": self.val_history[0]}

    @property
    def tokens_per_step(self) -> int:
        """Tokens of one optimizer step over every rank: the global batch of windows x the context."""
        world = self.trainer.world_size if self._trainer is not None else None
        return global_batch(self.cfg, world) * int(self.model.context)

    @property
    def last_step(self) -> int:
        """The optimizer step the run ends at: ``train.steps``, or ``train.max_steps`` when it stops earlier."""
        steps, cut = int(self.cfg.train.steps), int(self.cfg.train.max_steps)
        return steps if cut < 0 else min(steps, cut)

    # ---- Lightning hooks ------------------------------------------------------------------------
    def configure_optimizers(self):
        o, steps = self.cfg.optim, int(self.cfg.train.steps)
        self.schedules = {
            "lr": lm_schedule(module_peak_lr(self), steps, int(o.warmup_steps), float(o.min_lr_ratio)),
            "wd": np.full(steps, float(o.weight_decay)),
        }
        if o.weight_decay_params == "all":  # flame's: one group, every parameter decayed
            groups = [{"params": [p for p in self.model.parameters() if p.requires_grad], "name": "decay"}]
        else:
            groups = param_groups(self.model)
        return optimizer_from_config(o, groups, lr=float(self.schedules["lr"][0]))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        step, values, opt = start_step(self)
        loss = 0.0
        for (inputs, targets), weight in micro_steps(self, batch, int(self.cfg.train.batch_size_per_device)):
            part = window_loss(self(inputs), targets)
            self.manual_backward(part * weight)  # 16-mixed: unscaled after the last (training/precision.py)
            loss = loss + part.detach() * weight
        with full_precision():  # only the forward pass and the loss run under autocast
            if self.cfg.optim.clip_grad:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(self.cfg.optim.clip_grad))
            opt.step()
        stop_if_diverged(self, loss, step)  # read every N steps: skipless/training/divergence.py
        scalars = {"watch/schedule/lr": values["lr"], "watch/schedule/weight_decay": values["wd"]}
        speed = self._tokens_per_s(step)
        if speed is not None:
            scalars["watch/speed/tokens_per_s"] = speed
        self.log_dict({"train/loss": loss, **device_scalars(scalars, self.device)}, on_step=True, prog_bar=False,
                      batch_size=rows(batch))
        done = step + 1  # optimizer steps done
        if done % int(self.cfg.train.val_every_n_steps) == 0 or done == self.last_step:
            # here, not in a batch-end hook: before any callback checkpoints this step, so a resumed run has it
            self.validate(done)
            self._tick = (time.perf_counter(), step)  # tokens/s counts training time only
        return loss

    def _tokens_per_s(self, step: int) -> float | None:
        """Tokens per second of every rank since the last logged step, at a step Lightning logs (None between)."""
        if self._trainer is None or (step + 1) % max(int(self.trainer.log_every_n_steps), 1):
            return None
        now, tick = time.perf_counter(), self._tick
        self._tick = (now, step)
        if tick is None or now <= tick[0]:
            return None
        self._speed = self.tokens_per_step * (step - tick[1]) / (now - tick[0])
        return self._speed

    def on_train_start(self) -> None:
        if self.global_step == 0 and not self.val_history:
            self.validate(0)  # the start of the curve: about ln(vocabulary) at init
        self._tick = (time.perf_counter(), int(self.global_step) - 1)

    @torch.no_grad()
    def validation_loss(self) -> tuple[float, int]:
        """(mean next-token loss, tokens) over every validation window, summed over the ranks (module docstring)."""
        trainer = self._trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        total = torch.zeros((), dtype=torch.float64, device=self.device)
        count = torch.zeros((), dtype=torch.float64, device=self.device)
        context = trainer.precision_plugin.forward_context() if trainer is not None else nullcontext()
        was_training = self.model.training
        self.model.eval()
        try:
            with context:
                for inputs, targets in validation_batches(self.val_windows, int(self.cfg.train.batch_size_per_device),
                                                          rank, world):
                    inputs, targets = inputs.to(self.device), targets.to(self.device)
                    logits = self.model(inputs)
                    total += F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum")
                    count += targets.numel()
        finally:
            self.model.train(was_training)
        if trainer is not None and world > 1:
            total = trainer.strategy.reduce(total, reduce_op="sum")
            count = trainer.strategy.reduce(count, reduce_op="sum")
        return float(total / count.clamp(min=1)), int(count)

    def validate(self, step: int = 0) -> dict[str, float] | None:
        """Validate now (every rank together), after ``step`` optimizer steps; log ``val/loss`` and ``val/perplexity``
        at that step and print the line (rank 0); None without validation windows."""
        if self.val_windows is None:
            return None
        loss, _ = self.validation_loss()
        result = {"step": step, "loss": loss, "perplexity": math.exp(min(loss, 700.0))}
        self.val_history.append(result)
        trainer = self._trainer
        if trainer is not None and trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics({"val/loss": loss, "val/perplexity": result["perplexity"]}, step=step)
            rate = f", {self._speed:,.0f} tokens/s" if self._speed is not None and step else ""
            print(f"\nstep {step}: val loss {loss:.4f}, perplexity {result['perplexity']:.1f}{rate}", flush=True)
        return result

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["lm_val_history"] = [dict(v) for v in self.val_history]

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self.val_history = [dict(v) for v in checkpoint.get("lm_val_history", [])]


__all__ = ["LanguageModel", "lm_args", "lm_from_config", "lm_schedule", "window_loss"]
