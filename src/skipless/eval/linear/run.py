"""Linear classification of frozen global features: ``python -m skipless.eval.linear dataset=default ckpt="runs/a random"``.

A linear classifier on the cached global features, as one of three published protocols, chosen with
``linear-preset=`` (``make linear PRESET=``; ``configs/linear-preset/``, ``eval/linear/recipe.py``):

- ``dino`` (the default, the behaviour of before presets): DINO's linear evaluation (Caron et al.
  2021, Section 4.1; facebookresearch/dino ``eval_linear.py``): no BatchNorm, N(0, 0.01^2) weights,
  SGD momentum 0.9, no weight decay, cosine lr over the epochs, lr x batch / 256, on two inputs
  trained side by side: ``cls``, the CLS tokens of the last ``n_last_blocks`` blocks after the final
  norm, concatenated (``--n_last_blocks 4``, DINO's choice for ViT-S), and ``cls+avgpool``, the same
  followed by the average of the last block's normed patch tokens (``--avgpool_patchtokens``, ViT-B);
- ``zhang``: seed 002's ImageNet-100 probe (App. 8.1): one linear layer on the class token of the
  last block (``last_cls``), batch 1024, 200 epochs, lr 1e-2 with a cosine to 0;
- ``zhang-in1k``: seed 002's ImageNet-1k probe (App. 8.1): the same layer, AdamW, 20 warm-up epochs to 1e-2
  then a cosine, batch 5120, 200 epochs, on four feature sets per image (three random views and the
  centre crop, ``views=4``), one drawn per epoch;
- ``mae``: MAE's linear probing (He et al. 2022, App. A.2): BatchNorm without affine before the head,
  LARS, base lr 0.1 x batch / 256, 90 epochs of which 10 of warm-up, on ``last_cls``.

``last_cls`` is sliced from the same cache as DINO's inputs (the last of its CLS tokens), so every
preset and ``make knn`` share one backbone pass.

Every learning rate of ``lrs`` trains its own head over the same batches. The reported number of a
group is the head with the best top-1 on the **val split** after the last epoch, as in DINO, whose
script reports the best val accuracy it saw (over validated epochs; here over lrs, at the last epoch
only), so it is an optimistic estimate: there is no held-out test split. When the lowest or the highest lr
of the sweep scores strictly better than every other, the run warns and the JSON says so (``best_lr_at_edge``).

Augmentation: DINO and MAE train their linear layer on random resized crops and flips of each image,
which needs a backbone pass per image and epoch; here the features are cached
(``eval/shared/global_features.py``, shared with ``make knn``). By default (``views=1``) that is one centre
crop per image, so every epoch sees the same feature of an image (so does ``zhang``, whose ImageNet-100
probe has no augmentation): the usual price of a fast linear evaluation, and numbers comparable between
backbones of this suite, not to DINO's or MAE's published ones. ``views=k`` caches the centre crop and
k - 1 random views (MAE's probe augmentation) of every training image and trains each epoch on one set
drawn with the seed (``eval/linear/views.py``): seed 002's way to MAE's augmentation at the cost of k
backbone passes instead of one per epoch (``zhang-in1k``, ``views=4``).

Per backbone, ``<run>/eval/<stem>.json`` and TensorBoard scalars in ``<run>/eval/tb/<stem>/``
(``write_events``), with ``<stem>`` ``linear-<dataset>`` for ``dino`` and ``linear-<preset>-<dataset>``
for the others (``result_stem``); the table (rows backbones, top-1 / top-5 / best lr per input) is
printed, and with several backbones written to ``<runs_root>/compare/<stem>.md``.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Mapping, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from skipless.config import ConfigError, load_config
from skipless.errors import exit_on_user_error
from skipless.devices.cpu_threads import set_cpu_threads

from ..shared.backbones import BackboneSpec
from ..shared.global_eval import (POOLED_FAMILIES, refuse_cls_without_token, GlobalSettings, backbone_features, describe_splits, features_summary, finish_table,
                                  load_splits, loader_workers, resolve_settings, write_json)
from ..shared.global_features import VIEW_AUGMENTATION, GlobalFeatures
from ..shared.lr_sweep import sweep_edge
from ..shared.output_dirs import backbones_to_evaluate
from ..shared.report import markdown_table
from ..shared.tb_events import SweepWriter
from .heads import ClassifierHeads, Inputs, best_lr_index, evaluate_heads, train_heads
from .recipe import RULES, Recipe
from .views import check_views_agree, view_draws

INPUT_FEATURES = {"cls": GlobalFeatures.cls_concat, "cls+avgpool": GlobalFeatures.cls_avgpool,
                  "last_cls": GlobalFeatures.last_cls, "pooled": GlobalFeatures.knn}  # pooled: k-NN's feature


def result_stem(dataset: str, preset: str) -> str:
    """``linear-<dataset>`` for DINO's preset (the name of before presets), ``linear-<preset>-<dataset>`` else,
    so the presets of one backbone keep their results side by side."""
    return f"linear-{dataset}" if preset == "dino" else f"linear-{preset}-{dataset}"


def train_and_score(train_inputs: Inputs | Sequence[Inputs], train_y: torch.Tensor, val_inputs: Inputs,
                    val_y: torch.Tensor, num_classes: int, recipe: Recipe, *, seed: int = 0, progress: bool = False,
                    desc: str = "linear") -> dict[str, Any]:
    """Train a head per (group, lr) and score each on val; per group, the sweep and the best head; and the
    batch used with its lr scale (``Recipe.batch_for``) and the feature set of each epoch (``view_draws``).
    ``train_inputs``: one feature set, or a list of them (the centre crop first, then the random views)."""
    views = [train_inputs] if isinstance(train_inputs, Mapping) else list(train_inputs)
    draws = view_draws(seed, recipe.epochs, len(views))
    n = int(train_y.shape[0])
    batch = recipe.batch_for(n)
    if recipe.norm == "batchnorm" and (batch == 1 or (not recipe.drop_last and n % batch == 1)):
        raise ConfigError(f"head.norm=batchnorm needs at least 2 samples per batch, and the last batch of {n} "
                          f"training images at batch_size {batch} holds 1; set drop_last=true or another batch_size")
    lrs = recipe.scaled_lrs(batch)
    heads = ClassifierHeads({g: x.shape[1] for g, x in views[0].items()}, num_classes, lrs, recipe, seed)
    heads.to(train_y.device)
    t0 = time.perf_counter()
    losses = train_heads(heads, views, train_y, recipe, batch, seed=seed, progress=progress, desc=desc, draws=draws)
    train_s = time.perf_counter() - t0
    scores = evaluate_heads(heads, val_inputs, val_y)
    out: dict[str, Any] = {}
    for g in heads.group_names:
        sweep = [dict(lr=lrs[j], **scores[(g, j)], final_train_loss=losses[(g, j)][-1]) for j in range(len(lrs))]
        best = best_lr_index(sweep)
        out[g] = {"top1": sweep[best]["top1"], "top5": sweep[best]["top5"], "best_lr": lrs[best],
                  "best_lr_at_edge": sweep_edge(lrs, [(s["top1"], s["top5"] or 0.0) for s in sweep]), "dim": int(views[0][g].shape[1]),
                  "sweep": sweep}
    out["train_s"] = train_s
    out["losses"] = losses
    out["batch_size"] = batch
    out["lr_scale"] = recipe.lr_scale(batch)
    out["view_draws"] = draws
    return out


def recipe_summary(recipe: Recipe) -> dict[str, Any]:
    """The JSON's account of how the heads were built and trained (the preset and what it resolved to)."""
    return {"preset": recipe.preset, "inputs": list(recipe.inputs), "lrs": list(recipe.lrs), "lr_batch": recipe.lr_batch,
            "epochs": recipe.epochs, "warmup_epochs": recipe.warmup_epochs,
            "lr_update": "step" if recipe.per_step else "epoch", "batch_size_configured": recipe.batch_size,
            "drop_last": recipe.drop_last, "views": recipe.views,
            "head": {"norm": recipe.norm, "norm_eps": recipe.norm_eps, "init": recipe.init, "init_std": recipe.init_std},
            "optimizer": {"name": recipe.optimizer, "momentum": recipe.momentum, "weight_decay": recipe.weight_decay,
                          "trust_coefficient": recipe.trust_coefficient, "betas": list(recipe.betas)}}


def evaluate_backbone(settings: GlobalSettings, recipe: Recipe, spec: BackboneSpec, train: Any,
                      val: Any) -> tuple[dict, dict[tuple[str, int], list[float]]]:
    """Features (cached), heads and scores of one backbone: its JSON, and each head's loss per epoch."""
    cfg, device = settings.cfg, settings.device
    feats = backbone_features(settings, spec, train, val, views=recipe.views)
    train_sets = [feats.train, *feats.train_views]  # the centre crop, then the random views
    check_views_agree(train_sets, getattr(train, "name", "the train split"))

    def inputs(f):
        return {name: INPUT_FEATURES[name](f).to(device) for name in recipe.inputs}

    train_inputs = inputs(feats.train) if recipe.views == 1 else [inputs(f) for f in train_sets]
    result = train_and_score(train_inputs, feats.train.valid_labels().to(device), inputs(feats.val),
                             feats.val.valid_labels().to(device), train.num_classes, recipe, seed=int(cfg.seed),
                             progress=bool(cfg.progress), desc=f"{spec.name}: linear {recipe.preset}")
    train_s, losses = result.pop("train_s"), result.pop("losses")
    batch, scale = result.pop("batch_size"), result.pop("lr_scale")
    draws = result.pop("view_draws")
    views = {} if recipe.views == 1 else {"view_augmentation": VIEW_AUGMENTATION, "view_draws": draws}
    return {"evaluation": "linear", "dataset": settings.dataset, "backbone": spec.name,
            "checkpoint": str(spec.path) if spec.path else spec.kind, "groups": result,
            "selection": "best val top-1 over lrs, last epoch (no test split: optimistic, as DINO's best val accuracy)",
            **recipe_summary(recipe), "lr_scale": scale, "batch_size": batch,
            "num_classes": train.num_classes, "resize": settings.resize,
            "crop": settings.crop, **features_summary(feats), **views,
            "timings": {"features_s": feats.extract_s, "train_s": train_s, "total_s": feats.total_s + train_s,
                        "cache_reused": feats.reused,
                        **({"view_features_s": [f.extract_s for f in train_sets]} if recipe.views > 1 else {})},
            "config": OmegaConf.to_container(cfg, resolve=True)}, losses


def write_events(spec: BackboneSpec, stem: str, result: dict, losses: dict[tuple[str, int], list[float]]) -> None:
    """TensorBoard, in the backbone's ``tb/<stem>``, per input: each lr's training loss per epoch,
    its val top-1 after the last epoch, and the best val top-1 (lrs unscaled, as configured)."""
    epochs, scale = result["epochs"], result["lr_scale"]
    with SweepWriter(spec.out_dir, stem) as writer:
        for g, x in result["groups"].items():
            for j, s in enumerate(x["sweep"]):
                lr = f"{s['lr'] / scale:g}"
                for epoch, loss in enumerate(losses[(g, j)], 1):
                    writer.add_scalar(f"{stem}/{g}/head_loss/lr={lr}", loss, epoch)
                writer.add_scalar(f"{stem}/{g}/val_top1/lr={lr}", s["top1"], epochs)
            writer.add_scalar(f"{stem}/{g}/val_top1", x["top1"], epochs)  # the best lr's, on the sweep's chart


def comparison_table(specs: Sequence[BackboneSpec], results: dict[str, dict], groups: Sequence[str]) -> str:
    """Rows backbones; per input, top-1, top-5 and the best (unscaled) lr."""
    headers = ["backbone", "residual", "init"]
    for g in groups:
        headers += [f"{g} top-1", f"{g} top-5", f"{g} lr"]
    rows = []
    for spec in specs:
        r = results[spec.name]
        row = [spec.name, spec.args.get("residual"), spec.args.get("init")]
        for g in groups:
            x = r["groups"][g]
            row += [x["top1"], x["top5"], f"{x['best_lr'] / r['lr_scale']:g}"]
        rows.append(row)
    return markdown_table(headers, rows)


INPUT_WORDS = {"cls": "normed CLS of the last {n} blocks", "cls+avgpool": "the same + avgpooled patches",
               "last_cls": "normed CLS of the last block", "pooled": "the backbone's pooled feature"}


def caption(settings: GlobalSettings, recipe: Recipe, n_val: int) -> str:
    cfg = settings.cfg
    inputs = "; ".join(f"{g}: " + INPUT_WORDS[g].format(n=cfg.features.n_last_blocks) for g in recipe.inputs)
    views = "" if recipe.views == 1 else f", {recipe.views} feature sets per training image (centre + random), one per epoch"
    return (f"Linear evaluation on {settings.dataset}, preset {recipe.preset} ({recipe.optimizer}"
            f"{', BatchNorm' if recipe.norm == 'batchnorm' else ''}): val top-1 / top-5 (%) of the best of lrs "
            f"{list(recipe.lrs)} (x batch/{recipe.lr_batch}), {recipe.epochs} epochs{views}, {inputs}; "
            f"{settings.resize} -> {settings.crop} px, {n_val} val images.")


def run_linear(cfg: DictConfig) -> dict[str, dict]:
    """Linear evaluation of every backbone of ``cfg.ckpt``; returns ``{backbone name: result}``."""
    settings = resolve_settings(cfg, RULES)
    recipe = Recipe.from_config(cfg)
    set_cpu_threads(cfg.cpu_threads, loader_workers(cfg))
    specs = backbones_to_evaluate(cfg, families=POOLED_FAMILIES)
    if set(recipe.inputs) - {"pooled"}:
        refuse_cls_without_token(specs, f"inputs={list(recipe.inputs)}", "inputs=[pooled]")
    train, val = load_splits(settings)
    stem = result_stem(settings.dataset, recipe.preset)
    views = "" if recipe.views == 1 else f", {recipe.views} feature sets (centre crop + {recipe.views - 1} random views)"
    print(f"linear (preset {recipe.preset}) {describe_splits(settings, train, val)}, inputs {list(recipe.inputs)}, "
          f"lrs {list(recipe.lrs)} x batch/{recipe.lr_batch}, batch {recipe.batch_size}, {recipe.epochs} epochs "
          f"({recipe.optimizer}){views}, backbones: {', '.join(s.name for s in specs)}", flush=True)
    results = {}
    for spec in specs:
        r, losses = evaluate_backbone(settings, recipe, spec, train, val)
        results[spec.name] = r
        if r["batch_size"] < recipe.batch_size:
            print(f"  note: batch_size {recipe.batch_size} is more than the {r['train_images']} training images: one "
                  f"batch of {r['batch_size']} per epoch, lrs x {r['batch_size']}/{recipe.lr_batch}", flush=True)
        path = write_json(spec.out_dir / f"{stem}.json", r)
        write_events(spec, stem, r, losses)
        t = r["timings"]
        for g in recipe.inputs:
            x = r["groups"][g]
            top5 = "" if x["top5"] is None else f", top-5 {x['top5']:.1f}"
            print(f"  {spec.name} {g}: top-1 {x['top1']:.1f}{top5} at lr {x['best_lr'] / r['lr_scale']:g}", flush=True)
            if x["best_lr_at_edge"]:
                print(f"  warning: {spec.name} {g}: the best lr is the {x['best_lr_at_edge']} of the sweep "
                      f"{list(cfg.lrs)}; the optimum may lie beyond it (widen lrs)", flush=True)
        print(f"  {spec.name}: [features {t['features_s']:.0f} s{' (cached)' if t['cache_reused'] else ''}, "
              f"heads {t['train_s']:.0f} s] -> {path}", flush=True)
    finish_table(comparison_table(specs, results, recipe.inputs), caption(settings, recipe, len(val)), stem, specs, cfg)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_user_error(lambda: run_linear(load_config("linear", argv)))
    return 0
