"""The ``official`` section of ``make bench``: the official DINO training step against ours, side by side.

The official side is facebookresearch/dino imported from the checkout the user names with
``DINO_REPO=/path/to/dino`` (``vision_transformer.py``, ``utils.py``, ``main_dino.py``); none of its
code is copied here. Everything of its step is built by calling its own functions and classes (its
ViT, ``DINOHead``, ``MultiCropWrapper``, ``DINOLoss``, ``get_params_groups`` + ``torch.optim.AdamW``,
``cosine_scheduler``, ``clip_gradients``, ``cancel_gradients_last_layer``, ``MetricLogger``); only
the glue of one iteration of ``main_dino.train_one_epoch`` is written here, in its fp32 branch and
without DDP (one process, like its single-GPU run), so ``.cuda()`` and the autocast context (off in
fp32) are left out.

Why the glue does two things the official script does not:
- ``DINOLoss.update_center`` calls ``dist.all_reduce`` unconditionally, so a world-size-1 gloo
  process group is opened for the section (and closed after it) when none exists; ours then
  all-reduces its center too (``DINOLoss.update_center`` does so whenever a group exists), so
  both sides pay the same world-size-1 collectives.
- Some checkouts (forks) name ``utils.py`` ``vit_utils`` in ``vision_transformer.py``; when the
  checkout has no ``vit_utils.py``, that name is given its ``utils`` module for the import.

Fairness: identical sizes, the CPU, the same crops (two loaders over one dataset, in order,
each fetched inside its own side's time, in-process: ``num_workers=0`` on both sides), one process,
alternating: ours runs through Lightning (``Trainer.fit``) and the official step runs in our
``on_train_batch_end`` hook. Our step is timed from the end of one official step to the start of the
next, so all of Lightning's loop, hooks, logging and the data fetch count as ours. Medians over
``steps`` steps of each side after ``warmup`` steps. ``official_over_ours`` = official step time /
ours: above 1, ours is faster. The official code trains a skip ViT with AdamW only; our skipless
and SOAP rows are timed against that same official step. Our rows run our speed keys at their
defaults (``optim.implementation``), eager and then compiled (``train.compile``; the compilation
happens in the warm-up steps and is not timed; the inductor cache on disk makes later rows of the
same model compile faster).

Precision: the official side is fp32 in every row. DINO has no CPU bf16 path: its only mixed
precision is ``--use_fp16``, CUDA fp16 (``torch.cuda.amp.autocast`` with a ``GradScaler`` in
``main_dino.train_one_epoch``). Ours runs fp32 (``32-true``, what ``auto``
picks on every CPU) and, on a CPU with native bf16 (``cpu_has_native_bf16``), ``bf16-mixed``: the
speed a user who asks for it gets on this machine. Without native bf16 the bf16 row is left out, and
a line under the table says why (emulated bf16 is about 11 times slower than fp32 there).
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

from skipless.config import load_config
from skipless.models.vit import ARCHS
from skipless.pretrain import backbone_factory
from skipless.ssl.dino.module import DINO
from skipless.ssl.dino.self_distillation import collate_multicrop
from skipless.training.precision import cpu_has_native_bf16, plugin_for

from .table import markdown_table

OFFICIAL_FILES = ("vision_transformer.py", "utils.py", "main_dino.py")
OFFICIAL_MODULES = ("utils", "vit_utils", "vision_transformer", "main_dino")
CONFIGS = (("skip", "adamw"), ("skip", "soap"), ("skipless", "adamw"), ("skipless", "soap"))
COLUMNS = ["model", "optim", "compile", "precision", "batch", "crops", "official_step_s", "ours_step_s",
           "official_over_ours", "official_images_per_s", "ours_images_per_s"]


def sizes(batch: int = 8, global_size: int = 224, local_size: int = 96, n_local: int = 8, out_dim: int = 65536,
          arch: str = "vit_small", depth: int | None = None) -> dict:
    """The step's sizes (the issue's: ViT-S/16, batch 8, 2 x 224 + 8 x 96 crops, head to 65,536);
    smaller ones let a test run the section in seconds."""
    return dict(batch=batch, global_size=global_size, local_size=local_size, n_local=n_local, out_dim=out_dim,
                arch=arch, depth=depth)


def our_config(model: str, optim: str, size: dict, compiled: bool = False, precision: str = "32-true"):
    """Our pretraining config at ``size``: the paper's recipe (ViT/16, CLS token, DINO's head and
    teacher settings) with the sizes overridden, our speed keys at their defaults except
    ``train.compile`` (``compiled``) and ``train.precision``."""
    return load_config("pretrain", [
        f"model={model}", f"optim={optim}", "recipe=paper", f"train.compile={str(compiled).lower()}",
        f"train.precision={precision}",
        f"model.arch={size['arch']}",
        f"model.depth={'null' if size['depth'] is None else size['depth']}",
        f"train.batch_size_per_device={size['batch']}", f"dino.global_crop_size={size['global_size']}",
        f"dino.local_crop_size={size['local_size']}", f"dino.local_crops_number={size['n_local']}",
        f"dino.out_dim={size['out_dim']}"])


class SameCrops(Dataset):
    """``n`` items cycling over ``distinct`` fixed random multi-crop views (2 globals, then the
    locals): both sides read the same crops, and making them costs nothing during the steps."""

    def __init__(self, n: int, distinct: int, global_size: int, local_size: int, n_local: int) -> None:
        gen = torch.Generator().manual_seed(0)
        self.n = n
        self.views = [[torch.randn(3, global_size, global_size, generator=gen) for _ in range(2)]
                      + [torch.randn(3, local_size, local_size, generator=gen) for _ in range(n_local)]
                      for _ in range(distinct)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> list[torch.Tensor]:
        return self.views[i % len(self.views)]


def official_checkout_problem(repo: str | None) -> str | None:
    """Why ``repo`` cannot be used as the official checkout (None when it can)."""
    if not repo:
        return "DINO_REPO is not set (DINO_REPO=/path/to/facebookresearch/dino)"
    missing = [f for f in OFFICIAL_FILES if not (Path(repo) / f).is_file()]
    if missing:
        return f"DINO_REPO={repo} lacks {', '.join(missing)}"
    return None


@contextmanager
def _checkout_importable(repo: str):
    """The checkout first on ``sys.path`` and its module names free while importing; afterwards
    both are as they were (DINO's generic name ``utils`` must not shadow anything else)."""
    saved = {name: sys.modules.pop(name) for name in OFFICIAL_MODULES if name in sys.modules}
    sys.path.insert(0, repo)
    try:
        yield
    finally:
        sys.path.remove(repo)
        for name in OFFICIAL_MODULES:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def import_official(repo: str) -> SimpleNamespace:
    """DINO's ``utils``, ``vision_transformer`` (as ``vits``, as main_dino names it) and ``main_dino``."""
    repo = str(Path(repo).resolve())
    with _checkout_importable(repo):
        utils = importlib.import_module("utils")
        if importlib.util.find_spec("vit_utils") is None:
            sys.modules["vit_utils"] = utils  # a fork's name for utils.py (see the module docstring)
        vits = importlib.import_module("vision_transformer")
        main = importlib.import_module("main_dino")
    return SimpleNamespace(utils=utils, vits=vits, main=main)


class OfficialStep:
    """DINO's student, teacher, loss, optimizer and schedules, built as ``main_dino.train_dino``
    builds them (from our config's values, so both sides train the same recipe), and ``step()``:
    one iteration of ``train_one_epoch``'s body, its batch fetched from its own loader."""

    def __init__(self, dino: SimpleNamespace, cfg, loader: DataLoader) -> None:
        utils, vits, main = dino.utils, dino.vits, dino.main
        m, d, o = cfg.model, cfg.dino, cfg.optim
        self.utils, self.cfg, self.loader = utils, cfg, loader
        self.batches = iter(())

        def backbone(drop_path_rate: float) -> nn.Module:
            if m.depth is None:  # DINO's own ViT-S/16 (or the arch named)
                return vits.__dict__[m.arch](patch_size=m.patch_size, drop_path_rate=drop_path_rate)
            # A shallower ViT for a quick run: DINO's class with its vit_* arguments, fewer blocks.
            a = ARCHS[m.arch]
            return vits.VisionTransformer(patch_size=m.patch_size, embed_dim=a["embed_dim"], depth=m.depth,
                                          num_heads=a["num_heads"], mlp_ratio=4, qkv_bias=True,
                                          norm_layer=partial(nn.LayerNorm, eps=1e-6), drop_path_rate=drop_path_rate)

        student, teacher = backbone(float(m.drop_path_rate)), backbone(0.0)
        embed_dim = student.embed_dim
        head = partial(main.DINOHead, embed_dim, d.out_dim, use_bn=d.use_bn_in_head, hidden_dim=d.hidden_dim,
                       bottleneck_dim=d.bottleneck_dim)
        self.student = utils.MultiCropWrapper(student, head(norm_last_layer=d.norm_last_layer))
        self.teacher = utils.MultiCropWrapper(teacher, head())
        self.teacher.load_state_dict(self.student.state_dict())
        for p in self.teacher.parameters():
            p.requires_grad = False
        epochs, per_epoch = int(cfg.train.epochs), len(loader)
        self.dino_loss = main.DINOLoss(d.out_dim, d.local_crops_number + 2, d.warmup_teacher_temp, d.teacher_temp,
                                       d.warmup_teacher_temp_epochs, epochs)
        self.optimizer = torch.optim.AdamW(utils.get_params_groups(self.student))
        batch = int(cfg.train.batch_size_per_device)
        self.lr_schedule = utils.cosine_scheduler(float(o.lr) * float(o.lr_scale) * batch / 256.0, o.min_lr, epochs,
                                                  per_epoch, warmup_epochs=o.warmup_epochs)
        self.wd_schedule = utils.cosine_scheduler(o.weight_decay, o.weight_decay_end, epochs, per_epoch)
        self.momentum_schedule = utils.cosine_scheduler(d.momentum_teacher, 1, epochs, per_epoch)
        self.metric_logger = utils.MetricLogger(delimiter="  ")
        self.clip_grad, self.freeze_last_layer = float(o.clip_grad), int(d.freeze_last_layer_epochs)
        self.it, self.epoch = 0, 0

    def next_images(self) -> list[torch.Tensor]:
        """The next batch of its loader, as ``train_one_epoch`` unpacks it (crops, labels)."""
        try:
            images, _ = next(self.batches)
        except StopIteration:
            self.batches = iter(self.loader)
            images, _ = next(self.batches)
        return images

    def step(self) -> float:
        """One training iteration of ``main_dino.train_one_epoch`` (fp32, no DDP); returns the loss."""
        utils, it, epoch = self.utils, min(self.it, len(self.lr_schedule) - 1), self.epoch
        images = self.next_images()
        for i, param_group in enumerate(self.optimizer.param_groups):
            param_group["lr"] = self.lr_schedule[it]
            if i == 0:  # only the first group is regularized
                param_group["weight_decay"] = self.wd_schedule[it]
        teacher_output = self.teacher(images[:2])
        student_output = self.student(images)
        loss = self.dino_loss(student_output, teacher_output, epoch)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"the official DINO loss is {loss.item()}")
        self.optimizer.zero_grad()
        loss.backward()
        if self.clip_grad:
            utils.clip_gradients(self.student, self.clip_grad)
        utils.cancel_gradients_last_layer(epoch, self.student, self.freeze_last_layer)
        self.optimizer.step()
        with torch.no_grad():
            m = self.momentum_schedule[it]
            for param_q, param_k in zip(self.student.parameters(), self.teacher.parameters()):
                param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)
        self.metric_logger.update(loss=loss.item())
        self.metric_logger.update(lr=self.optimizer.param_groups[0]["lr"])
        self.metric_logger.update(wd=self.optimizer.param_groups[0]["weight_decay"])
        self.it += 1
        return loss.item()


class Alternate(pl.Callback):
    """One official step after each of our batches; times both sides (see the module docstring)."""

    def __init__(self, official: OfficialStep, warmup: int) -> None:
        self.official, self.warmup = official, warmup
        self.official_times: list[float] = []
        self.ours_times: list[float] = []
        self._official_end: float | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        start = time.perf_counter()
        measured = batch_idx >= self.warmup
        if measured and self._official_end is not None:
            self.ours_times.append(start - self._official_end)
        self.official.step()
        end = time.perf_counter()
        if measured:
            self.official_times.append(end - start)
        self._official_end = time.perf_counter()


def median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2


def cpu_trainer(callbacks: list[pl.Callback], precision: str = "32-true") -> pl.Trainer:
    """One epoch on the CPU in ``precision``, nothing written."""
    return pl.Trainer(accelerator="cpu", devices=1, plugins=[plugin_for(precision, "cpu")], max_epochs=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=callbacks)


def loaders(size: dict, n_batches: int) -> tuple[DataLoader, DataLoader]:
    """Ours (our collate) and the official's (default collate of ``(crops, label)``) over one dataset."""
    data = SameCrops(size["batch"] * n_batches, size["batch"], size["global_size"], size["local_size"],
                     size["n_local"])
    ours = DataLoader(data, batch_size=size["batch"], collate_fn=collate_multicrop, num_workers=0)
    labelled = [(i, 0) for i in range(len(data))]
    official = DataLoader(labelled, batch_size=size["batch"], num_workers=0,
                          collate_fn=lambda items: ([torch.stack(c) for c in zip(*(data[i] for i, _ in items))],
                                                    torch.tensor([label for _, label in items])))
    return ours, official


def side_by_side_row(dino: SimpleNamespace, model: str, optim: str, size: dict, steps: int, warmup: int,
                     compiled: bool = False, precision: str = "32-true") -> dict:
    """One of our configurations against the official (fp32) step, alternating, ``warmup`` + ``steps``
    each; ours in ``precision``. Compiled (``train.compile``), our first step compiles every shape;
    the warm-up steps hold it."""
    if warmup < 1:
        raise ValueError("warmup must be at least 1: our first timed step starts at the end of an official one")
    cfg = our_config(model, optim, size, compiled, precision)
    ours_loader, official_loader = loaders(size, warmup + steps)
    torch.manual_seed(0)
    official = OfficialStep(dino, cfg, official_loader)
    torch.manual_seed(0)
    module = DINO(cfg, partial(backbone_factory, cfg))
    timer = Alternate(official, warmup)
    cpu_trainer([timer], precision).fit(module, ours_loader)
    off, ours = median(timer.official_times), median(timer.ours_times)
    b = size["batch"]
    return {"model": model, "optim": optim, "compile": compiled, "precision": precision,
            "official_precision": "32-true", "batch": b,
            "crops": f"2x{size['global_size']} + {size['n_local']}x{size['local_size']}",
            "official_step_s": off, "ours_step_s": ours, "official_over_ours": off / ours,
            "official_images_per_s": b / off, "ours_images_per_s": b / ours,
            "official_steps": len(timer.official_times), "ours_steps": len(timer.ours_times),
            "official_times_s": timer.official_times, "ours_times_s": timer.ours_times}


@contextmanager
def one_process_group():
    """A world-size-1 gloo group for ``DINOLoss.update_center``'s all-reduce, unless one exists."""
    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def our_precisions() -> tuple[tuple[str, ...], str | None]:
    """The precisions of our rows, and why bf16-mixed is left out (None when it is not)."""
    if cpu_has_native_bf16():
        return ("32-true", "bf16-mixed"), None
    return ("32-true",), ("no bf16-mixed row of ours: this CPU has no native bf16 (oneDNN reports none), where "
                          "bf16 autocast is emulated and about 11x slower than fp32 (training/trainer.py "
                          "cpu_has_native_bf16).")


def section_official(repo: str | None = None, quick: bool = False, *, configs=CONFIGS, size: dict | None = None,
                     steps: int | None = None, warmup: int | None = None, compiled: tuple[bool, ...] = (False, True),
                     precisions: tuple[str, ...] | None = None) -> tuple[list[dict] | None, str]:
    """Rows (None when skipped) and the text to print: the table, or the one line saying why not.
    Every configuration is timed eager and, with ``True`` in ``compiled``, with ``train.compile``; ours
    in each of ``precisions`` (None: ``our_precisions``, fp32 and bf16-mixed where the CPU has native bf16)."""
    repo = os.environ.get("DINO_REPO") if repo is None else repo
    problem = official_checkout_problem(repo)
    if problem:
        return None, f"official DINO side by side: skipped, {problem}."
    size = size or sizes()
    steps = steps or (3 if quick else 5)
    warmup = warmup or (1 if quick else 2)
    missing = None
    if precisions is None:
        precisions, missing = our_precisions()
    dino = import_official(repo)
    with one_process_group():
        rows = [side_by_side_row(dino, m, o, size, steps, warmup, c, p)
                for c in compiled for p in precisions for m, o in configs]
    text = (f"\nthe official DINO step ({repo}: skip ViT + AdamW, fp32: it has no CPU bf16 path, its mixed "
            f"precision is CUDA fp16) against ours in {', '.join(precisions)}, on the CPU "
            f"({torch.get_num_threads()} threads), alternating, median of {steps} steps after {warmup}; "
            "official_over_ours > 1: ours is faster:\n")
    return rows, text + markdown_table(rows, COLUMNS) + ("" if missing is None else "\n" + missing)
