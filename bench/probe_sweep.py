"""Benchmark of the probe's cache: a whole lr sweep with cached features vs the backbone every step.

A probe sweep should cost one backbone pass. This measures, on the embedded
default, the wall time of the same sweep done two ways, and the mIoU of each:

- cached (what ``eval.probe`` does): one backbone pass over the train and val images, then every
  lr trained side by side for all epochs over the cache, then scoring;
- naive: images decoded and the backbone run for every batch of every epoch, one lr at a time, as
  a probe without a cache would. One lr (the cached sweep's best) is run for all epochs and
  scored; since every lr costs the same, the naive time of the sweep is that time x the number of
  lrs (reported as extrapolated). Its mIoU should equal the cached one at that lr up to float16
  rounding of the cache: same head init, same batches in the same order.

``python -m bench.probe_sweep [--quick]`` prints the result; ``make bench`` runs it as section
``probe`` (``python -m bench``).
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Subset

from skipless.eval.shared.backbones import load_spec, resolve_backbones
from skipless.eval.shared.devices import resolve_device
from skipless.eval.probe.feature_cache import ProbeSamples, build_cache, stacked_patches
from skipless.eval.probe.linear_probe import LinearHeads, cache_batches, epoch_order, evaluate_full, train_heads
from skipless.eval.probe.settings import round_to_patch
from skipless.data import build_split
from skipless.models import resolve_layers


def _naive_batches(model: torch.nn.Module, dataset: Any, layers: list[int], resolution: int, label_size: int,
                   batch_size: int, seed: int, device: torch.device, num_workers: int, norm: bool):
    """Epoch -> batches with features computed now, by the backbone, from decoded images."""
    samples = ProbeSamples(dataset, resolution, label_size)

    def batches(epoch: int):
        order = epoch_order(np.arange(len(dataset)), epoch, seed)
        chunks = [np.sort(order[s:s + batch_size]) for s in range(0, len(order), batch_size)]
        loader = DataLoader(Subset(samples, np.concatenate(chunks).tolist()), batch_size=batch_size,
                            num_workers=num_workers)
        for x, y, _ in loader:
            with torch.inference_mode():
                f = stacked_patches(model, x.to(device), layers, norm)
            yield f.permute(0, 3, 1, 2).float().clone(), y.to(device).long()

    return batches


def bench_probe(quick: bool = False, ckpt: str | None = None, device: str = "auto", root: str = "data/default",
                runs_root: str = "runs", num_workers: int = 2, cpu_threads: int | None = 1) -> dict[str, Any]:
    """Time the cached sweep and the naive one on the embedded default; returns a JSON-able dict.

    ``cpu_threads`` is set for the measurement (and restored after), as ``eval.probe`` does: with
    torch's default (every core) on a CPU shared with other jobs, small ops slow down erratically.
    """
    threads = torch.get_num_threads()
    if cpu_threads is not None:
        torch.set_num_threads(cpu_threads)
    try:
        return _bench(quick, ckpt, device, root, runs_root, num_workers)
    finally:
        torch.set_num_threads(threads)


def _bench(quick: bool, ckpt: str | None, device: str, root: str, runs_root: str, num_workers: int) -> dict[str, Any]:
    dev = resolve_device(device)
    # the naive sweep runs the backbone n_train x epochs x lrs times: 100 images keep it ~10 min on a 2-core CPU
    n_train, n_val, epochs = (64, 32, 4) if quick else ((500, 500, 30) if dev.type == "cuda" else (100, 100, 30))
    lrs, resolution, label_size, batch_size, seed = [3e-4, 1e-3, 3e-3, 1e-2], 160, 20, 16, 0
    train_ds = build_split("default", root, "train", n_train, seed)
    val_ds = build_split("default", root, "val", n_val, seed)
    spec = resolve_backbones(ckpt, runs_root=runs_root)[0]
    model = load_spec(spec, dev, seed=seed)
    resolution = round_to_patch(resolution, int(model.patch_embed.patch_size[0]))  # as the probe does
    layers = resolve_layers([-1], len(model.blocks))
    k = train_ds.num_classes
    n_train, n_val = len(train_ds), len(val_ds)  # smaller when the dataset is
    steps = -(-n_train // batch_size)

    t0 = time.perf_counter()
    caches = [build_cache(model, ds, layers, resolution=resolution, label_size=label_size, device=dev,
                          num_workers=num_workers, progress=False) for ds in (train_ds, val_ds)]
    t_extract = time.perf_counter() - t0
    heads = LinearHeads({"single": caches[0].channels(layers)}, k, lrs, seed=seed).to(dev)
    init = {j: {n: p.detach().clone() for n, p in heads.heads["single"][j].state_dict().items()} for j in range(len(lrs))}
    trained = train_heads(heads, cache_batches(caches[0], batch_size, seed, dev), steps, epochs=epochs, progress=False)
    t1 = time.perf_counter()
    conf = evaluate_full(heads, caches[1], val_ds, dev, num_workers=num_workers, progress=False)
    t_eval = time.perf_counter() - t1
    cached_total = time.perf_counter() - t0
    mious = [conf[("single", j)].miou() for j in range(len(lrs))]
    best = int(np.nanargmax(mious))

    t0 = time.perf_counter()
    naive = LinearHeads({"single": np.arange(caches[0].feats.shape[-1])}, k, [lrs[best]]).to(dev)
    naive.heads["single"][0].load_state_dict(init[best])
    train_heads(naive, _naive_batches(model, train_ds, layers, resolution, label_size, batch_size, seed, dev,
                                      num_workers, True), steps, epochs=epochs, progress=False)
    val_cache = build_cache(model, val_ds, layers, resolution=resolution, label_size=label_size, device=dev,
                            num_workers=num_workers, progress=False)  # a naive probe runs the backbone to score, too
    naive_conf = evaluate_full(naive, val_cache, val_ds, dev, num_workers=num_workers, progress=False)
    naive_one = time.perf_counter() - t0
    return {
        "backbone": spec.name, "device": str(dev), "cpu_threads": torch.get_num_threads(), "n_train": n_train, "n_val": n_val, "epochs": epochs,
        "lrs": lrs, "resolution": resolution, "label_size": label_size, "batch_size": batch_size,
        "cached": {"extract_s": t_extract, "train_s": trained.train_s, "eval_s": t_eval, "total_s": cached_total,
                   "miou_per_lr": [round(100 * m, 3) for m in mious], "best_lr": lrs[best],
                   "best_miou": round(100 * mious[best], 3)},
        "naive": {"one_lr_total_s": naive_one, "sweep_total_s_extrapolated": naive_one * len(lrs),
                  "lr": lrs[best], "miou": round(100 * naive_conf[("single", 0)].miou(), 3)},
        "speedup": naive_one * len(lrs) / cached_total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description="probe sweep: cached features vs the backbone every step")
    parser.add_argument("--quick", action="store_true", help="a few images and epochs (a smoke run)")
    parser.add_argument("--ckpt", default=None, help="run folder or backbone file (default: the newest run)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    print(json.dumps(bench_probe(args.quick, args.ckpt, args.device), indent=1))


if __name__ == "__main__":
    main()
