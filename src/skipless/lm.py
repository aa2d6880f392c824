"""Language-model training: ``python -m skipless.lm [model=skipless] [optim=adamw] [data=default|c4] [key=value ...]``.

Seed 000's App. A.8 (a 110M causal Transformer on C4, with and without skips, ``configs/lm.yaml`` says every value
and its source; docs/lm.md). Flow, as the other training entry points': the config checked (``language/schema.py``)
-> the text built where missing: the corpus (the embedded World English Bible, or a C4 root read where it lies), the
tokenizer, the packed token streams (``language/data.py``) -> run folder ``runs/<name>/`` (resolved ``config.yaml``,
TensorBoard events, ``checkpoints/last.ckpt``, ``backbone.pt`` = the ``CausalLM`` with its tokenizer's record,
``tokenizer/`` = a copy of its tokenizer files, ``summary.json`` with the first and last validation). ``make lm``
maps MODEL/OPT/DATA/DATA_ROOT/RECIPE/GPUS/NODES/RESUME/ARGS onto the config. The same resume, refusal and
divergence rules as every run.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import lightning.pytorch as pl
import torch
from omegaconf import DictConfig

from .config import ConfigError, load_config
from .data.text import PackedWindows
from .devices.world import check_global_batch, check_gpus_visible, global_batch
from .language.data import (CORPORA, TextData, check_one_step, check_same_tokenizer, copy_tokenizer, prepare_text,
                            split_windows, train_loader)
from .language.module import LanguageModel, lm_args
from .language.schema import check_lm_config
from .models.causal_lm import create_causal_lm
from .reports.summary import describe_batch, lr_rule, peak_lr, threads_line
from .training.interrupt import fit, run_command
from .training.preflight import check_run_folder
from .training.run_lock import hold_run_folder
from .training.run_plan import RunPlan, plan_run
from .training.run_start import prepare_run, record_start
from .training.trainer import build_trainer


@dataclass(frozen=True)
class LMPlan(RunPlan):
    """A run plan with the text it trains on (built by ``check_config``) and the model's sizes resolved."""

    text: TextData | None = None
    model: dict | None = None  # create_causal_lm's resolved arguments and sizes (skipless_args of the model)
    parameters: int = 0


def run_dir_of(cfg: DictConfig) -> Path:
    name = cfg.run.name or f"lm-{cfg.model.name}-{cfg.optim.name}-{cfg.data.name}"
    return Path(cfg.run.root) / name


def resolved_model(cfg: DictConfig, vocab_size: int) -> tuple[dict, int]:
    """(the model's ``skipless_args``, its parameter count), built on the meta device (no memory, no init draw):
    a size the model refuses is one sentence here, before the run folder exists."""
    args = {**lm_args(cfg.model, vocab_size), "init": "fla"}  # the sizes only: the paper's init needs real tensors
    with torch.device("meta"):
        model = create_causal_lm(**args)
    return {**model.skipless_args, "init": str(cfg.model.init)}, sum(p.numel() for p in model.parameters())


def check_config(cfg: DictConfig, run_dir: Path | None = None) -> LMPlan:
    """Every key checked (``language/schema.py``), the GPUs asked for visible and the global batch a whole number of
    micro-batches on them, then the text built (``language/data.prepare_text``: the data folders only), the
    vocabulary and windows checked against it and the run folder writable, before anything of the run is written;
    the run resolved once (``training/run_plan.py``)."""
    check_lm_config(cfg)
    check_gpus_visible(cfg)
    check_global_batch(cfg)
    run_dir = run_dir_of(cfg) if run_dir is None else run_dir
    check_run_folder(run_dir)
    text = prepare_text(cfg)
    vocab = text.tokenizer.vocab_size
    if cfg.model.vocab_size is not None and cfg.model.vocab_size < vocab:
        raise ConfigError(f"model.vocab_size={cfg.model.vocab_size} is smaller than the vocabulary of tokenizer "
                          f"{text.tokenizer_name} ({vocab} tokens, {text.tokenizer.path}); expected null (the "
                          f"tokenizer's) or at least {vocab}")
    model, parameters = resolved_model(cfg, vocab)
    corpus = CORPORA[cfg.data.name]
    check_one_step(cfg, split_windows(text.train, model["context"], "training", corpus), corpus)
    split_windows(text.val, model["context"], "validation", corpus)
    plan = plan_run(cfg, run_dir)
    return LMPlan(**{f: getattr(plan, f) for f in plan.__dataclass_fields__}, text=text, model=model,
                  parameters=parameters)


def describe_lm(model: dict, parameters: int) -> str:
    """``lm_demo: width 256, 4 blocks, 4 heads, SwiGLU 768, vocabulary 4,096, context 256; 4,458,752 parameters;
    residual skipless, init cutskip (alpha 0, beta 0.5, c 3, qk layer)``."""
    m = model
    init = m["init"]
    if init == "cutskip":
        init += " (" + ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                                 for k, v in m["init_args"].items()) + ")"
    decay = f", alpha_min {m['alpha_min']:g}" if m["residual"] == "decayed" else ""
    return (f"{m['arch']}: width {m['embed_dim']}, {m['depth']} blocks, {m['num_heads']} heads, SwiGLU "
            f"{m['mlp_hidden']}, vocabulary {m['vocab_size']:,}, context {m['context']:,}, RoPE theta "
            f"{m['rope_theta']:g}; {parameters:,} parameters; residual {m['residual']}{decay}, init {init}")


def lm_header(plan: LMPlan) -> str:
    """The lines ``make lm`` prints before it starts."""
    cfg, text, m = plan.cfg, plan.text, plan.model
    o, t = cfg.optim, cfg.train
    world = plan.devices * plan.nodes
    context = m["context"]
    tokens = global_batch(cfg, world) * context
    windows = PackedWindows(text.train, context)
    epochs = int(t.steps) * global_batch(cfg, world) / max(len(windows), 1)
    val = PackedWindows(text.val, context)
    stop = f" (stopping at train.max_steps={t.max_steps})" if int(t.max_steps) > 0 and t.max_steps < t.steps else ""
    decayed = "every parameter" if o.weight_decay_params == "all" else "the matrices (not the norms' weights)"
    optimizer = (f"{o.name} betas ({o.betas[0]:g}, {o.betas[1]:g}) eps {o.eps:g}, weight decay {o.weight_decay:g} "
                 f"on {decayed}, clipping {o.clip_grad:g}")
    tok = text.tokenizer
    return "\n".join([
        f"skipless lm: model={cfg.model.name} optim={o.name} "
        f"data={cfg.data.name} recipe={cfg.choices.get('recipe', '-')} -> {plan.run_dir}",
        f"  model    {describe_lm(m, plan.parameters)}",
        f"  data     {CORPORA[cfg.data.name]} ({text.corpus}): train {text.train.tokens:,} tokens of "
        f"{text.train.documents:,} documents in {text.train_shards} shard(s), {len(windows):,} windows; validation "
        f"{val.stream.tokens:,} tokens, {len(val):,} windows",
        f"  tokens   tokenizer {text.tokenizer_name}: {tok.vocab_size:,} tokens, end of text {tok.eos!r} = "
        f"{tok.eos_id} ({tok.path}, sha256 {tok.digest[:12]})",
        f"  train    {t.steps:,} steps{stop} of {tokens:,} tokens = {global_batch(cfg, world)} sequences "
        f"({describe_batch(cfg, world).split(' = ', 1)[1]}) x {context:,} tokens; {epochs:.2f} epochs of the "
        f"training windows",
        f"  optim    {optimizer}; peak lr {peak_lr(cfg, world):.3g} ({lr_rule(cfg)}), linear warm-up "
        f"{o.warmup_steps:,} steps, cosine to {o.min_lr_ratio:g} x lr at step {t.steps:,}",
        f"  val      loss and perplexity on every validation window at step 0, every {t.val_every_n_steps:,} steps "
        f"and the last",
        f"  precision {plan.described_precision}",
        threads_line(cfg),
    ])


def train(cfg: DictConfig, extra_callbacks: Sequence[pl.Callback] = ()) -> tuple[pl.Trainer, LanguageModel]:
    """Run (or resume) the language-model training described by ``cfg``; returns the trainer and the module."""
    return run_training(check_config(cfg), extra_callbacks)


def run_training(plan: LMPlan, extra_callbacks: Sequence[pl.Callback] = ()) -> tuple[pl.Trainer, LanguageModel]:
    """Run (or resume) the training ``check_config`` resolved; returns the trainer and the module."""
    cfg, run_dir, text = plan.cfg, plan.run_dir, plan.text
    torch.set_num_threads(plan.threads)
    with hold_run_folder(run_dir):
        start = prepare_run(cfg, run_dir)
        if start.ckpt_path is not None:
            check_same_tokenizer(text, run_dir)
        pl.seed_everything(cfg.run.seed, workers=True, verbose=False)
        context = plan.model["context"]
        module = LanguageModel(cfg, text.tokenizer.vocab_size, PackedWindows(text.val, context),
                               text.tokenizer_record())
        loader = train_loader(cfg, PackedWindows(text.train, context))
        last = int(cfg.train.steps) if int(cfg.train.max_steps) < 0 else min(int(cfg.train.steps),
                                                                              int(cfg.train.max_steps))
        trainer = build_trainer(plan, list(extra_callbacks), loader, max_steps=last, num_sanity_val_steps=0,
                                limit_val_batches=0)
        if trainer.is_global_zero:
            print(lm_header(plan), flush=True)
            record_start(cfg, run_dir, start)
            copy_tokenizer(text, run_dir)
        fit(trainer, module, loader, ckpt_path=start.ckpt_path)
    return trainer, module


def main(argv: Sequence[str] | None = None, extra_callbacks: Sequence[pl.Callback] = ()) -> int:
    """The command line; ``extra_callbacks`` join the run's own."""
    return run_command(list(sys.argv[1:] if argv is None else argv), "lm",
                       lambda args: check_config(load_config("lm", args)),
                       lambda plan: run_training(plan, extra_callbacks)[0], what="language model")


if __name__ == "__main__":
    sys.exit(main())
