"""The GPU-hours of a training recipe, estimated from its FLOPs: an estimate, and the pre-flight says so.

    hours = epochs x train images x training FLOPs per image / (GPU's dense bf16 peak x MFU) / 3600

FLOPs per image are ``skipless/flops.py``'s count of one training step at the job's own config (DINO: 3 x
the student on every crop + the teacher on the globals, heads included; MAE: 3 x encoder on the visible
patches + decoder; supervised: 3 x backbone + head; matrix products only). The train images are those
of the real dataset, not of the fake one the pre-flight read: the dataset is named by the folder under
``data/`` that the job's data root names once the root variables are unset (``data/imagenet100/train``
-> ``imagenet100``; ``data/README.md``'s arrangement), else by ``data.name``, and its size comes from
``preflight.datasets`` in ``configs/paper.yaml``. The peak is ``skipless/flops.py``'s for the GPU named in
``preflight.gpu``; the MFU is ``preflight.mfu`` of the job's method (DINO, MAE or supervised).

The language model (``make lm``, seed 000's App. A.8) is counted per sequence and per step instead:

    hours = train.steps x sequences per step (train.global_batch) x training FLOPs per sequence / (peak x MFU) / 3600

FLOPs per sequence are ``skipless/flops.lm_step_flops`` at the model's context and the vocabulary of the tokenizer
the run built (``vocab``: the pre-flight reads it from the run's ``tokenizer/``); the validation passes every
``train.val_every_n_steps`` are not counted.

Not counted: the evaluations, the diagnostics and monitors during training, data loading stalls,
restarts; every image of the train set is counted once per epoch (a last partial batch included).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import PurePath
from typing import Any, Mapping

from omegaconf import DictConfig

from skipless.devices.world import global_batch
from skipless.flops import dino_step_flops, lm_step_flops, mae_step_flops, peak_bf16_tflops, supervised_step_flops
from skipless.language.module import lm_args, lm_context


@dataclass(frozen=True)
class Estimate:
    """One training recipe's cost; ``hours`` is the estimate."""

    method: str
    dataset: str
    epochs: int
    train_images: int
    flop_per_image: float
    gpu: str
    peak_tflops: float
    mfu: float
    unit: str = "image"      # what flop_per_image is per: an image, or a sequence of the language model
    passes: str = "epochs"   # what ``epochs`` counts: epochs over the train set, or the language model's steps

    def counts_text(self) -> str:
        """``300 epochs x 1,281,167 images`` / ``20,000 steps x 128 sequences``."""
        return f"{self.epochs:,} {self.passes} x {self.train_images:,} {self.unit}s"

    @property
    def images(self) -> int:
        return self.epochs * self.train_images

    @property
    def hours(self) -> float:
        return self.images * self.flop_per_image / (self.peak_tflops * 1e12 * self.mfu) / 3600

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "images": self.images, "gpu_hours": self.hours}


def method_of(entry: str, cfg: DictConfig) -> str:
    """``dino`` or ``mae`` (``make pretrain``'s ``ssl``), ``lm`` (``make lm``), ``supervised`` (``make train``)."""
    if entry == "lm":
        return "lm"
    return str(cfg.ssl) if entry == "pretrain" else "supervised"


def dataset_of(cfg: DictConfig) -> str:
    """The real dataset a training reads: the folder under ``data/`` its root names, else ``data.name``."""
    parts = PurePath(str(cfg.data.root)).parts
    return parts[1] if len(parts) > 1 and parts[0] == "data" else str(cfg.data.name)


def step_flops(method: str, cfg: DictConfig, classes: int) -> int:
    """Training FLOPs per image of one step of ``cfg`` (``skipless/flops.py``)."""
    if method == "dino":
        return dino_step_flops(cfg)
    if method == "mae":
        return mae_step_flops(cfg)
    return supervised_step_flops(cfg, classes)


def peak_tflops(gpu: str) -> float | None:
    """The dense bf16 peak of ``gpu`` (``skipless/flops.py``'s table), None for a GPU it does not list."""
    return peak_bf16_tflops(gpu)


def lm_estimate(cfg: DictConfig, settings: Mapping[str, Any], vocab: int, peak: float) -> Estimate:
    """The language model's estimate (module docstring): steps x sequences per step x FLOPs per sequence."""
    args = lm_args(cfg.model, vocab)
    context = lm_context(cfg.model)
    return Estimate("lm", dataset_of(cfg), int(cfg.train.steps), int(global_batch(cfg)),
                    float(lm_step_flops(args, context)), str(settings["gpu"]), peak, float(settings["mfu"]["lm"]),
                    unit="sequence", passes="steps")


def estimate(entry: str, cfg: DictConfig, settings: Mapping[str, Any], vocab: int | None = None) -> Estimate | str:
    """The estimate of the training ``cfg`` of ``entry`` under ``settings`` (the ``preflight`` section of
    the ``paper`` config), or the sentence saying why there is none; ``vocab``: the language model's vocabulary
    (its tokenizer's), which its config does not hold."""
    method, dataset = method_of(entry, cfg), dataset_of(cfg)
    known = settings["datasets"]
    if method != "lm" and dataset not in known:
        return f"no estimate: {dataset} has no size in preflight.datasets (known: {', '.join(known)})"
    if method not in settings["mfu"]:
        return f"no estimate: {method} has no MFU in preflight.mfu (known: {', '.join(settings['mfu'])})"
    peak = peak_tflops(str(settings["gpu"]))
    if peak is None:
        return f"no estimate: preflight.gpu={settings['gpu']} is not a GPU of skipless/flops.py's PEAK_BF16_TFLOPS"
    if method == "lm":
        if vocab is None:
            return "no estimate: the run's tokenizer, whose vocabulary the model has, was not found"
        return lm_estimate(cfg, settings, vocab, peak)
    size = known[dataset]
    return Estimate(method, dataset, int(cfg.train.epochs), int(size["train_images"]),
                    float(step_flops(method, cfg, int(size["classes"]))), str(settings["gpu"]), peak,
                    float(settings["mfu"][method]))
