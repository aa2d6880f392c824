"""``make bench`` (``python -m bench``): speed and memory, written to ``bench/results.json`` and printed as tables.

Sections (each can be chosen with ``--only``):
- ``pretrain``: a full DINO training step, skip vs skipless, AdamW vs SOAP (``pretrain_step.py``).
- ``train``: a supervised training step, skip vs skipless, AdamW vs SOAP (``train_step.py``).
- ``mae``: an MAE training step, skip vs decayed encoder, with and without the U-Net skips, against
  DINO's step at the same encoder (``mae_step.py``).
- ``init``: attention conditioning at initialisation (the paper's Proposition 1) on ViT-S (``pretrain_step.py``).
- ``probe``: a linear-probe lr sweep with cached features vs running the backbone every step, on
  the embedded default (``probe_sweep.py``; needs a run under ``runs/``, the repo root as cwd).
- ``conditioning``: kappa(J J^T) matrix-free against dense, on ViT-S at 224 px, and ``make
  conditioning`` on one ViT-S backbone (``conditioning.py``).
- ``tokencut``: TokenCut's eigensolve per image against the dense generalized float64 scipy solve,
  and the share of identical boxes (``tokencut_solvers.py``).
- ``official``: the official DINO step (facebookresearch/dino, imported from ``DINO_REPO`` or
  ``--dino-repo``) against ours, alternating, as a ratio; one line saying why when no checkout is
  given (``side_by_side.py``).
- ``profile``: where the time of our DINO step goes, by torch.profiler (``profile_step.py``).
- ``loader``: over ImageNet-sized JPEGs with natural-image statistics generated once into ``--cache``
  (``natural_images.py``): CPU ms per image of DINO's multi-crop, MAE's and the supervised transform
  at full scale, beside the official ``DataAugmentationDINO`` (``DINO_REPO``), where DINO's multi-crop
  time goes, and the pretraining loader's images/s per worker count against the step's demand
  (``loader_throughput.py``; the demand from ``pretrain`` when it runs in the same call).
- ``end_to_end``: DINO pretraining over those JPEGs, per worker count and ``data.augment_on`` path, each step's
  cycle split into the wait for the loader, the device's augmentation and the step (``end_to_end.py``).
- ``compile``: a backbone's forward + backward eager, with each block compiled and compiled whole
  (``compile_step.py``).
- ``optim``: one optimizer step alone, for each ``optim.implementation`` of AdamW and SOAP
  (``optimizer_step.py``).
- ``variants``: a supervised step with linear attention, OSA and SVD / DCT token graying against
  softmax attention, and the graying alone (``attention_variants.py``).
- ``osa``: orthogonal self-attention's low-rank path (QR, Newton-Schulz) against the dense N x N
  ``matrix_exp``, time and memory per N; an OSA ViT-S block against a softmax one; Newton-Schulz's
  error against K (``osa_cost.py``).
- ``lm_init``: the causal language model at initialisation (issue 49): per block the attention's self-weight at
  positions 2, 16, 128, 2,048 and the token cosine, for the residual and skipless models with the anchor's init
  and the skipless one with the paper's, both readings of Eq. 11 (``lm_init.py``).

The benchmarks live here, beside ``eval/`` and outside the installed package: they may import both
``skipless`` and ``eval``, while nothing under ``src/`` imports either ``eval`` or ``bench``.
Speed is measured here and never asserted in tests, where a shared CI machine would make them flaky.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from skipless.atomic import atomic_write

from .attention_variants import section_variants
from .compile_step import section_compile
from .conditioning import section_conditioning
from .end_to_end import section_end_to_end
from skipless.flops import mfu_note
from .pretrain_step import device_name, section_init, section_pretrain
from .lm_init import section_lm_init
from .loader_throughput import section_loader
from .mae_step import section_mae
from .optimizer_step import section_optim
from .osa_cost import section_osa
from .probe_sweep import bench_probe
from .profile_step import section_profile
from .side_by_side import section_official
from .table import markdown_table
from .tokencut_solvers import bench_section
from .train_step import section_train

# The FLOP columns of the pretrain and train tables (``flops.py``: a training step's FLOPs, 3 x forward).
UTILISATION = ("gflop_per_image", "model_tflops_per_s", "mfu")
SECTIONS = ("pretrain", "train", "mae", "init", "probe", "tokencut", "conditioning", "official", "profile", "optim",
            "loader", "end_to_end", "compile", "variants", "osa", "lm_init")
# The sections that take only ``quick`` and return (result, the text to print), run last in this order.
TEXT_SECTIONS = {"mae": section_mae, "tokencut": bench_section, "conditioning": section_conditioning,
                 "profile": section_profile, "end_to_end": section_end_to_end, "compile": section_compile, "optim": section_optim,
                 "variants": section_variants, "osa": section_osa, "lm_init": section_lm_init}


def main() -> None:
    parser = argparse.ArgumentParser(description="skipless benchmarks")
    parser.add_argument("--only", nargs="*", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run of the bench)")
    parser.add_argument("--out", default="bench/results.json")
    parser.add_argument("--dino-repo", default=None,
                        help="a facebookresearch/dino checkout for the official and loader sections (default: "
                        "$DINO_REPO)")
    parser.add_argument("--cache", default="bench/cache",
                        help="where the loader section keeps its generated JPEGs (written once, reused)")
    parser.add_argument("--batches", type=lambda v: [int(b) for b in v.split(",")], default=None,
                        help="the pretrain section's per-device batches, e.g. 64,128,256 (default: 64 on a GPU)")
    parser.add_argument("--compile", type=lambda v: v.split(","), default=None,
                        help="the pretrain section's train.compile settings, e.g. false,true,reduce-overhead")
    parser.add_argument("--rows", type=lambda v: v.split(","), default=None,
                        help="the pretrain section's model:optim rows, e.g. skip:adamw,skipless:soap (default: all four)")
    args = parser.parse_args()
    results: dict = {"device": device_name(), "torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M")}
    if "init" in args.only:
        results["init"] = section_init()
        print("attention conditioning at init (ViT-S, 197 Gaussian tokens, block 0, median over heads):")
        for k, v in results["init"].items():
            print(f"  {k:8s} kappa = {v['median_condition']:.4g}, mean diagonal weight = {v['mean_diagonal']:.3f}")
    if "pretrain" in args.only:
        rows = section_pretrain(args.quick, args.batches, args.compile, args.rows)
        results["pretrain"] = rows
        print(f"\nDINO pretraining step on {results['device']}:")
        print(markdown_table(rows, ["model", "optim", "batch", "compile", "crops", "step_s", "images_per_s",
                                    "soap_over_adamw", "skipless_over_skip", "compiled_over_eager", *UTILISATION,
                                    "peak_memory_mb", "wall_s"]))
        print(mfu_note())
    if "train" in args.only:
        rows = section_train(args.quick)
        results["train"] = rows
        print(f"\nsupervised training step on {results['device']}:")
        print(markdown_table(rows, ["model", "optim", "arch", "batch", "image_px", "step_s", "images_per_s",
                                    "soap_over_adamw", "skipless_over_skip", *UTILISATION, "peak_memory_mb"]))
        print(mfu_note())
    if "probe" in args.only:
        results["probe"] = r = bench_probe(args.quick)
        rows = [{"way": "cached features", "sweep_s": r["cached"]["total_s"], "lr": r["cached"]["best_lr"],
                 "miou": r["cached"]["best_miou"]},
                {"way": f"backbone every step (1 lr x {len(r['lrs'])})", "sweep_s":
                 r["naive"]["sweep_total_s_extrapolated"], "lr": r["naive"]["lr"], "miou": r["naive"]["miou"]}]
        print(f"\nprobe sweep ({len(r['lrs'])} lrs x {r['epochs']} epochs, {r['n_train']} train images, {r['backbone']}; "
              f"speed-up of the cache {r['speedup']:.1f}x):")
        print(markdown_table(rows, ["way", "sweep_s", "lr", "miou"]))
    if "official" in args.only:
        rows, text = section_official(args.dino_repo, args.quick)
        if rows is not None:
            results["official"] = rows
        print(text)
    if "loader" in args.only:
        demand = max((r["images_per_s"] for r in results.get("pretrain", [])), default=None)
        results["loader"], text = section_loader(args.quick, demand, args.dino_repo, cache=args.cache)
        print(text)
    for name, section in TEXT_SECTIONS.items():
        if name in args.only:
            results[name], text = section(args.quick)
            print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    merged = merge_results(out, results)
    atomic_write(out, lambda tmp: Path(tmp).write_text(json.dumps(merged, indent=1)))
    print(f"\nwritten to {out} (sections of earlier runs that this one did not run are kept)")


def merge_results(out: Path, results: dict) -> dict:
    """The sections of ``results`` over those already in ``out``, each stamped with the device, torch
    and date it was measured with (``measured``): a ``--only`` run never drops another section."""
    try:
        merged = json.loads(out.read_text())
    except (OSError, json.JSONDecodeError):
        merged = {}
    stamp = {k: results[k] for k in ("device", "torch", "date")}
    measured = merged.setdefault("measured", {})
    for key, value in results.items():
        if key not in stamp:
            merged[key] = value
            measured[key] = stamp
    return {**merged, **stamp}


if __name__ == "__main__":
    main()
