"""Linear classification of frozen global features: ``python -m eval.linear dataset=default ckpt="runs/a random"``.

DINO's linear evaluation (Caron et al. 2021, Section 4.1; facebookresearch/dino ``eval_linear.py``):
a linear classifier (``eval/linear/heads.py``: no BatchNorm, N(0, 0.01^2) weights, SGD momentum 0.9,
no weight decay, cosine lr over the epochs, lr x batch / 256) on two inputs, trained side by side:

- ``cls``: the CLS tokens of the last ``n_last_blocks`` blocks after the final norm, concatenated
  (``--n_last_blocks 4``, DINO's choice for ViT-S);
- ``cls+avgpool``: the same followed by the average of the last block's normed patch tokens
  (``--avgpool_patchtokens``, DINO's choice for ViT-B).

Every learning rate of ``lrs`` trains its own head over the same batches. The reported number of a
group is the head with the best top-1 on the **val split** after the last epoch, as in DINO, whose
script reports the best val accuracy it saw (over validated epochs; here over lrs, at the last epoch
only), so it is an optimistic estimate: there is no held-out test split. When the lowest or the highest lr
of the sweep scores strictly better than every other, the run warns and the JSON says so (``best_lr_at_edge``).

No augmentation: DINO trains its linear layer on random resized crops and flips of each image,
which needs a backbone pass per image and epoch; here the features are cached
(``eval/shared/global_features.py``, one centre crop per image, shared with ``make knn``), so every epoch
sees the same feature of an image. That is the usual price of a fast linear evaluation; numbers
are comparable between backbones of this suite, not to DINO's published ones.

Per backbone, ``<run>/eval/linear-<dataset>.json`` and TensorBoard scalars in
``<run>/eval/tb/linear-<dataset>/`` (``write_events``); the table (rows backbones, top-1 / top-5 / best
lr per input) is printed, and with several backbones written to ``<runs_root>/compare/linear-<dataset>.md``.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from skipless.config import load_config
from skipless.config_rules import integer, non_empty_list, number
from skipless.errors import exit_on_user_error

from ..shared.backbones import BackboneSpec
from ..shared.global_eval import (GlobalSettings, backbone_features, describe_splits, features_summary, finish_table,
                                  load_splits, resolve_settings, write_json)
from ..shared.lr_sweep import sweep_edge
from ..shared.output_dirs import backbones_to_evaluate
from ..shared.report import markdown_table
from ..shared.tb_events import event_writer
from .heads import ClassifierHeads, best_lr_index, evaluate_heads, train_heads

GROUPS = ("cls", "cls+avgpool")
RULES = {
    "lrs": non_empty_list(number(0, low_open=True), "finite numbers > 0"),
    "epochs": integer(1),
    "batch_size": integer(1),
}


def scaled_lrs(cfg: DictConfig) -> list[float]:
    """DINO's linear scaling rule: ``lr * batch_size / 256``."""
    return [float(lr) * int(cfg.batch_size) / 256.0 for lr in cfg.lrs]


def train_and_score(train_inputs: dict[str, torch.Tensor], train_y: torch.Tensor, val_inputs: dict[str, torch.Tensor],
                    val_y: torch.Tensor, num_classes: int, lrs: Sequence[float], *, epochs: int, batch_size: int,
                    seed: int = 0, progress: bool = False, desc: str = "linear") -> dict[str, Any]:
    """Train a head per (group, lr) and score each on val; per group, the sweep and the best head."""
    heads = ClassifierHeads({g: x.shape[1] for g, x in train_inputs.items()}, num_classes, lrs, seed)
    heads.to(train_y.device)
    t0 = time.perf_counter()
    losses = train_heads(heads, train_inputs, train_y, epochs=epochs, batch_size=batch_size, seed=seed,
                         progress=progress, desc=desc)
    train_s = time.perf_counter() - t0
    scores = evaluate_heads(heads, val_inputs, val_y)
    out: dict[str, Any] = {}
    for g in heads.group_names:
        sweep = [dict(lr=lrs[j], **scores[(g, j)], final_train_loss=losses[(g, j)][-1]) for j in range(len(lrs))]
        best = best_lr_index(sweep)
        out[g] = {"top1": sweep[best]["top1"], "top5": sweep[best]["top5"], "best_lr": lrs[best],
                  "best_lr_at_edge": sweep_edge(lrs, [(s["top1"], s["top5"] or 0.0) for s in sweep]), "dim": int(train_inputs[g].shape[1]),
                  "sweep": sweep}
    out["train_s"] = train_s
    out["losses"] = losses
    return out


def evaluate_backbone(settings: GlobalSettings, spec: BackboneSpec, train: Any,
                      val: Any) -> tuple[dict, dict[tuple[str, int], list[float]]]:
    """Features (cached), heads and scores of one backbone: its JSON, and each head's loss per epoch."""
    cfg, device = settings.cfg, settings.device
    feats = backbone_features(settings, spec, train, val)

    def inputs(f):
        return {"cls": f.cls_concat().to(device), "cls+avgpool": f.cls_avgpool().to(device)}

    lrs = scaled_lrs(cfg)
    result = train_and_score(inputs(feats.train), feats.train.valid_labels().to(device), inputs(feats.val),
                             feats.val.valid_labels().to(device), train.num_classes, lrs, epochs=int(cfg.epochs),
                             batch_size=int(cfg.batch_size), seed=int(cfg.seed), progress=bool(cfg.progress),
                             desc=f"{spec.name}: linear")
    train_s, losses = result.pop("train_s"), result.pop("losses")
    return {"evaluation": "linear", "dataset": settings.dataset, "backbone": spec.name,
            "checkpoint": str(spec.path) if spec.path else spec.kind, "groups": result,
            "selection": "best val top-1 over lrs, last epoch (no test split: optimistic, as DINO's best val accuracy)",
            "lrs": [float(lr) for lr in cfg.lrs], "lr_scale": int(cfg.batch_size) / 256.0, "epochs": int(cfg.epochs),
            "batch_size": int(cfg.batch_size), "num_classes": train.num_classes, "resize": settings.resize,
            "crop": settings.crop, **features_summary(feats),
            "timings": {"features_s": feats.extract_s, "train_s": train_s, "total_s": feats.total_s + train_s,
                        "cache_reused": feats.reused},
            "config": OmegaConf.to_container(cfg, resolve=True)}, losses


def write_events(spec: BackboneSpec, result: dict, losses: dict[tuple[str, int], list[float]]) -> None:
    """TensorBoard, in the backbone's ``tb/linear-<dataset>``, per input: each lr's training loss per epoch,
    its val top-1 after the last epoch, and the best val top-1 (lrs unscaled, as configured)."""
    stem, epochs, scale = f"linear-{result['dataset']}", result["epochs"], result["lr_scale"]
    with event_writer(spec.out_dir, stem) as writer:
        for g, x in result["groups"].items():
            for j, s in enumerate(x["sweep"]):
                lr = f"{s['lr'] / scale:g}"
                for epoch, loss in enumerate(losses[(g, j)], 1):
                    writer.add_scalar(f"{stem}/{g}/train_loss/lr={lr}", loss, epoch)
                writer.add_scalar(f"{stem}/{g}/val_top1/lr={lr}", s["top1"], epochs)
            writer.add_scalar(f"{stem}/{g}/val_top1/best", x["top1"], epochs)


def comparison_table(specs: Sequence[BackboneSpec], results: dict[str, dict]) -> str:
    """Rows backbones; per input, top-1, top-5 and the best (unscaled) lr."""
    headers = ["backbone", "residual", "init"]
    for g in GROUPS:
        headers += [f"{g} top-1", f"{g} top-5", f"{g} lr"]
    rows = []
    for spec in specs:
        r = results[spec.name]
        row = [spec.name, spec.args.get("residual"), spec.args.get("init")]
        for g in GROUPS:
            x = r["groups"][g]
            row += [x["top1"], x["top5"], f"{x['best_lr'] / r['lr_scale']:g}"]
        rows.append(row)
    return markdown_table(headers, rows)


def run_linear(cfg: DictConfig) -> dict[str, dict]:
    """Linear evaluation of every backbone of ``cfg.ckpt``; returns ``{backbone name: result}``."""
    settings = resolve_settings(cfg, RULES)
    if cfg.cpu_threads is not None:
        torch.set_num_threads(int(cfg.cpu_threads))
    specs = backbones_to_evaluate(cfg)
    train, val = load_splits(settings)
    print(f"linear {describe_splits(settings, train, val)}, lrs {list(cfg.lrs)} x {int(cfg.batch_size)}/256, "
          f"{cfg.epochs} epochs, backbones: {', '.join(s.name for s in specs)}", flush=True)
    results = {}
    for spec in specs:
        r, losses = evaluate_backbone(settings, spec, train, val)
        results[spec.name] = r
        path = write_json(spec.out_dir / f"linear-{settings.dataset}.json", r)
        write_events(spec, r, losses)
        t = r["timings"]
        for g in GROUPS:
            x = r["groups"][g]
            top5 = "" if x["top5"] is None else f", top-5 {x['top5']:.1f}"
            print(f"  {spec.name} {g}: top-1 {x['top1']:.1f}{top5} at lr {x['best_lr'] / r['lr_scale']:g}", flush=True)
            if x["best_lr_at_edge"]:
                print(f"  warning: {spec.name} {g}: the best lr is the {x['best_lr_at_edge']} of the sweep "
                      f"{list(cfg.lrs)}; the optimum may lie beyond it (widen lrs)", flush=True)
        print(f"  {spec.name}: [features {t['features_s']:.0f} s{' (cached)' if t['cache_reused'] else ''}, "
              f"heads {t['train_s']:.0f} s] -> {path}", flush=True)
    caption = (f"Linear evaluation on {settings.dataset}: val top-1 / top-5 (%) of the best of lrs {list(cfg.lrs)} "
               f"(x {int(cfg.batch_size)}/256), {cfg.epochs} epochs, normed CLS of the last "
               f"{cfg.features.n_last_blocks} blocks (+ avgpooled patches), {settings.resize} -> {settings.crop} px, "
               f"{len(val)} val images.")
    finish_table(comparison_table(specs, results), caption, f"linear-{settings.dataset}", specs, cfg)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_user_error(lambda: run_linear(load_config("linear", argv)))
    return 0

