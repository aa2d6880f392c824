"""TokenCut's eigensolve, timed: our batched normalised-Laplacian eigh against the reference's dense solve.

    python -m bench.tokencut_solvers [--images 100] [--upscale 2.5]     (also a section of `make bench`)

On the same graphs (the keys of every block of a backbone on the embedded default's val images)
this times, per image (all blocks):

- ``torch_float64`` / ``torch_float32``: ``eval.tokencut.ncut.second_eigenvectors``, one batched
  ``torch.linalg.eigh`` of ``I - D^-1/2 A D^-1/2`` for all blocks, on the features' device;
- ``lapack_float64``: ``eval.tokencut.ncut.lapack_spectrum``, eigenpairs 1..2 of the same matrix only
  (LAPACK ``syevr``), per block, on the CPU (the default solver there);
- ``scipy_dense``: ``scipy.linalg.eigh(D - A, D)``, the dense generalized float64 solve, per block;
- ``scipy_subset``: the same with ``subset_by_index=[1, 2]``, the exact call of TokenCut's code;

and counts how often each gives the same box as ``scipy_dense``. A graph whose second and third
generalized eigenvalues coincide (``eval.tokencut.ncut.UNIQUE_GAP``) has no unique second eigenvector: any vector of that
eigenspace is a valid Ncut vector, so solvers may legitimately return different boxes. That happens
when every similarity is above tau (a complete graph, e.g. collapsed tokens of a deep block), so
the shares are reported over all graphs and over the graphs with a unique answer. ``upscale``
enlarges the images first (2.2 gives ~740 patches per image, about a VOC image's 31 x 23).
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Callable

import numpy as np
import scipy.linalg
import torch
import torch.nn.functional as F

from skipless.eval.shared.backbones import BackboneNotFoundError, load_spec, resolve_backbones
from skipless.eval.shared.devices import resolve_device
from skipless.eval.shared.images import normalized, pad_to_multiple
from skipless.eval.tokencut.ncut import (EPS, TAU, UNIQUE_GAP, affinity, discover, lapack_spectrum, second_eigenvector_reference,
                                second_eigenvectors)
from skipless.data import DatasetNotFoundError, VOCDetection
from skipless.models import create_vit, freeze_for_eval, patch_features

from .table import markdown_table


def _timed(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - start


def _backbone(ckpt: str | None, runs_root: str, device: torch.device) -> tuple[str, torch.nn.Module]:
    try:
        spec = resolve_backbones(ckpt, runs_root)[0]
        return spec.name, load_spec(spec, device)
    except BackboneNotFoundError:
        if ckpt is not None:
            raise
        torch.manual_seed(0)  # no run yet: a random ViT-Ti/16, so `make bench` works in a fresh clone
        return "random vit_tiny", freeze_for_eval(create_vit("vit_tiny", residual="skipless", init="cutskip"), device)


@torch.inference_mode()
def bench_tokencut(ckpt: str | None = None, root: str = "data/default", split: str = "val", n_images: int = 100,
                   upscale: float = 1.0, feature: str = "k", tau: float = TAU, eps: float = EPS,
                   runs_root: str = "runs", device: str = "auto") -> dict[str, Any]:
    """Time the solvers on the graphs of ``n_images`` images and compare their boxes (module docstring)."""
    dev = resolve_device(device)
    name, model = _backbone(ckpt, runs_root, dev)
    data = VOCDetection(root, split)
    patch = model.patch_embed.patch_size[0]
    blocks = list(range(len(model.blocks)))
    solvers: dict[str, Callable[[torch.Tensor], np.ndarray]] = {
        "torch_float64": lambda a: second_eigenvectors(a, torch.float64).cpu().numpy(),
        "torch_float32": lambda a: second_eigenvectors(a, torch.float32).cpu().numpy(),
        "lapack_float64": lambda a: np.stack([lapack_spectrum(g)[0] for g in a.double().cpu().numpy()]),
        "scipy_dense": lambda a: np.stack([second_eigenvector_reference(g, subset=False) for g in a.double().cpu().numpy()]),
        "scipy_subset": lambda a: np.stack([second_eigenvector_reference(g, subset=True) for g in a.double().cpu().numpy()]),
    }
    seconds = {k: [] for k in solvers}
    same = {k: [] for k in solvers if k != "scipy_dense"}
    unique, tokens, gaps, where = [], [], [], []
    count = min(n_images, len(data))
    for i in range(-1, count):  # image 0 is solved twice: once to warm up, untimed
        image, _ = data[max(i, 0)]
        x = normalized(image)
        if upscale != 1.0:
            x = F.interpolate(x[None], scale_factor=upscale, mode="bilinear", align_corners=False)[0]
        size = tuple(x.shape[-2:])
        x = pad_to_multiple(x, patch)[None].to(dev)
        feats = patch_features(model, x, blocks, feature)  # {block: (1, rows, cols, C)}
        grid = tuple(feats[blocks[0]].shape[1:3])
        a = affinity(torch.cat([f.flatten(1, 2) for f in feats.values()]).float(), tau, eps)
        boxes = {}
        for key, solve in solvers.items():
            vectors, dt = _timed(lambda: solve(a), dev)
            boxes[key] = [discover(v, grid, patch, size).box for v in vectors]
            if i >= 0:
                seconds[key].append(dt)
        if i < 0:
            continue
        tokens.append(grid[0] * grid[1])
        for g in a.double().cpu().numpy():
            d = np.diag(g.sum(1))
            values = scipy.linalg.eigh(d - g, d, eigvals_only=True, subset_by_index=[1, 2])
            unique.append(values[1] - values[0] >= UNIQUE_GAP)
            gaps.append(float(values[1] - values[0]))
        where += [(str(data.ids[i]), b) for b in blocks]
        for key in same:
            same[key] += [bool(np.array_equal(p, q)) for p, q in zip(boxes[key], boxes["scipy_dense"])]
    unique_mask = np.array(unique)
    # graphs with a unique Ncut vector where a solver's box still differs from scipy_dense's
    differences = [{"image": where[j][0], "block": where[j][1], "gap": gaps[j],
                    "solvers": [k for k, v in same.items() if not v[j]]}
                   for j in range(len(unique)) if unique[j] and not all(v[j] for v in same.values())]
    per_image = {k: float(np.median(v)) for k, v in seconds.items()}
    return {
        "backbone": name, "device": str(dev), "images": count, "blocks": len(blocks), "graphs": len(unique),
        "tokens_per_graph_mean": float(np.mean(tokens)), "upscale": upscale, "feature": feature,
        "median_seconds_per_image": per_image,
        "speedup_over_scipy_dense": {k: per_image["scipy_dense"] / v for k, v in per_image.items()},
        "graphs_with_unique_second_eigenvector": int(unique_mask.sum()),
        "identical_boxes": {k: float(np.mean(v)) for k, v in same.items()},
        "identical_boxes_where_unique": {k: float(np.mean(np.array(v)[unique_mask])) if unique_mask.any() else None
                                         for k, v in same.items()},
        "differences_where_unique": differences,
    }


def bench_section(quick: bool = False) -> tuple[list[dict[str, Any]], str]:
    """The ``tokencut`` section of ``make bench``: native and VOC-sized graphs; results and a table."""
    n = 10 if quick else 100
    try:
        rows = [bench_tokencut(n_images=n), bench_tokencut(n_images=max(3, n // 5), upscale=2.2)]
    except DatasetNotFoundError as err:
        return [], f"\ntokencut section skipped: {err}"
    flat = [{"upscale": r["upscale"], "tokens": r["tokens_per_graph_mean"], "graphs": r["graphs"],
             **{f"s_{k}": v for k, v in r["median_seconds_per_image"].items()},
             **{f"x_{k}": r["speedup_over_scipy_dense"][k] for k in ("torch_float64", "lapack_float64")},
             "same_box_all": r["identical_boxes"]["lapack_float64"],
             **{f"same_box_unique_{k}": v for k, v in r["identical_boxes_where_unique"].items()}} for r in rows]
    text = (f"\nTokenCut eigensolve per image, all {rows[0]['blocks']} blocks of {rows[0]['backbone']} on "
            f"{rows[0]['device']}: median seconds (s_), speed-up over scipy_dense (x_), share of boxes equal to "
            "scipy_dense's over all graphs (lapack) and over the graphs with a unique Ncut vector:\n"
            + markdown_table(flat, list(flat[0])))
    return rows, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", default=None, help="a run folder or backbone file (default: the newest run)")
    parser.add_argument("--root", default="data/default")
    parser.add_argument("--images", type=int, default=100)
    parser.add_argument("--upscale", type=float, default=1.0, help="2.2: VOC-sized graphs (~740 patches)")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    result = bench_tokencut(args.ckpt, args.root, n_images=args.images, upscale=args.upscale, device=args.device)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
