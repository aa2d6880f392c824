"""The ``osa`` section of ``make bench``: orthogonal self-attention (seeds/004) low rank against the dense ``expm``.

Three tables:

* one head at d_v = 64 (ViT-S's), batch 1, forward only, ``A V`` from ``(q, k, v)`` for N = 64 ... 4096:
  the low-rank path of ``OrthogonalAttention.fused`` with the QR and the Newton-Schulz (K = 6) basis,
  against forming ``S`` (N x N) and calling ``torch.linalg.matrix_exp`` on it. The dense side stops
  at the first N whose first call exceeds ``cap_s`` (the table says so). Time: after a warm-up call,
  ``repeats`` interleaved rounds (each way once per round); ``forward_ms`` is the best round, the cost
  without interference (on a shared machine a burst of load can multiply one call's time by ten),
  ``median_ms`` the median, and ``over_qr`` compares best rounds. Memory: on a GPU the CUDA
  allocator's peak above what was allocated before the call; on a CPU, in a fresh process, the peak
  resident set of the call above the resident set just before it (``rss_child``: Linux's ``VmHWM``
  reset after a warm-up call, glibc told to give every block of 64 KiB or more back to the OS on
  free): what the OS actually had to give, LAPACK's workspaces included, to within about 1 MB of
  small-block heap and thread stacks (the low-rank rows at small N read 0.03-1 MB).
* an OSA ViT-S block (the ``osa`` preset's: no LayerNorms) against a softmax block (``skipless``'s, with
  its LayerNorms) at 197 tokens, forward and forward + backward (best of interleaved rounds), as ratios.
* Newton-Schulz's error ``||A_K - A_QR||_2`` against K on real tokens at init: block 0 of an OSA ViT-S
  at 224 px (N = 197, d_v = 64) and of the paper's MNIST model (``vit_micro``, patch 4, 28 px: N = 50,
  d_v = 16), on a Gaussian image, worst head.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from contextlib import nullcontext

import torch

from skipless.models import OrthogonalAttention, create_vit
from skipless.models.features import embed_tokens
from skipless.models.osa import low_rank_factors

from .table import markdown_table

COLUMNS = ["N", "way", "forward_ms", "median_ms", "over_qr", "peak_mb", "note"]
BLOCK_COLUMNS = ["block", "tokens", "batch", "forward_ms", "forward_backward_ms", "forward_over_softmax",
                 "forward_backward_over_softmax"]
WAYS = ("low-rank qr", "low-rank newton-schulz", "dense expm")
SIZES = (64, 128, 256, 512, 1024, 2048, 4096)
# One torch thread on a CPU: on the shared 2-core machine of this project, two threads made one QR of
# 1024 x 128 take 500 ms against 8 ms on one (threads that wait for a descheduled sibling); one thread
# measures the work, not the scheduler. ``section_osa(cpu_threads=None)`` keeps torch's number.
CPU_THREADS = 1
# glibc: every allocation of 64 KiB or more gets its own mapping, returned to the OS when freed (no
# dynamic threshold, no retained heap), so the resident set follows the live tensors of the call.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}
ALPHA = 0.1  # seeds/004's alpha at init


def head(way: str, dv: int, device: torch.device) -> OrthogonalAttention | None:
    """One OSA head of width d_v (its ``fused`` is the model's low-rank path); None for the dense way."""
    if way == "dense expm":
        return None
    basis = "qr" if way == "low-rank qr" else "newton-schulz"
    attn = OrthogonalAttention(dv, num_heads=1)
    attn.configure(basis=basis, ns_steps=6, alpha=ALPHA)
    return attn.to(device).eval()


def dense_expm(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``expm(S) V`` with ``S = alpha / sqrt(d_v) (Q K^T - K Q^T)`` formed N x N (Eq. 5 as written)."""
    s = ALPHA / math.sqrt(q.shape[-1]) * (q @ k.transpose(-2, -1) - k @ q.transpose(-2, -1))
    return torch.linalg.matrix_exp(s) @ v


def call(way: str, dv: int, device: torch.device):
    attn = head(way, dv, device)
    return dense_expm if attn is None else attn.fused


def head_inputs(n: int, dv: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """q, k, v (1, 1, N, d_v) with unit-variance entries (tokens of unit-variance entries through the
    init's orthonormal weights)."""
    gen = torch.Generator().manual_seed(n)
    return tuple(torch.randn(1, 1, n, dv, generator=gen).to(device) for _ in range(3))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, args, device: torch.device) -> float:
    _sync(device)
    start = time.perf_counter()
    with torch.no_grad():
        fn(*args)
    _sync(device)
    return time.perf_counter() - start


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def rss_child(way: str, n: int, dv: int) -> dict:
    """In a fresh process (``MALLOC_ENV`` set): one warm-up call (loads libraries and thread pools), then
    the resident-set high-water mark is reset (Linux: ``5`` to ``/proc/self/clear_refs``) and the second,
    identical call's peak is read (``VmHWM``) above the resident set just before it, in MB."""
    device = torch.device("cpu")
    fn = call(way, dv, device)
    args = head_inputs(n, dv, device)
    with torch.no_grad():
        fn(*args)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base = _status_kib("VmRSS")
        fn(*args)
        peak = _status_kib("VmHWM")
    return {"peak_mb": max(0, peak - base) / 1024}


def peak_memory_mb(way: str, n: int, dv: int, device: torch.device) -> float:
    """The peak MB of one call: CUDA's allocator peak, or ``rss_child`` in a fresh process."""
    if device.type == "cuda":
        fn, args = call(way, dv, device), head_inputs(n, dv, device)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        with torch.no_grad():
            fn(*args)
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)),
               OMP_NUM_THREADS=str(torch.get_num_threads()), **MALLOC_ENV)
    out = subprocess.run([sys.executable, "-m", "bench.osa_cost", "--rss", way, str(n), str(dv)],
                         capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])["peak_mb"]


def head_rows(sizes, dv: int, repeats: int, cap_s: float, device: torch.device, memory: bool) -> list[dict]:
    """Per N, every way: one warm-up call (the dense way stops for good once it exceeds ``cap_s``), then
    ``repeats`` rounds that time each way once in turn (so that a burst of load on a shared machine hits
    all ways alike): the best and the median round per way."""
    rows, dense_stopped_at = [], None
    for n in sizes:
        args = head_inputs(n, dv, device)
        by_way, timed = {}, {}
        for way in WAYS:
            row = {"N": n, "way": way, "forward_ms": None, "median_ms": None, "over_qr": None, "peak_mb": None,
                   "note": ""}
            rows.append(row)
            if way == "dense expm" and dense_stopped_at is not None:
                row["note"] = f"not run: above the {cap_s:g} s cap from N = {dense_stopped_at}"
                continue
            by_way[way] = row
            fn = call(way, dv, device)
            first = _timed(fn, args, device)
            if way == "dense expm" and first > cap_s:
                dense_stopped_at = n
                row["forward_ms"] = 1e3 * first
                row["note"] = f"one call, above the {cap_s:g} s cap: larger N not run"
            else:
                timed[way] = (fn, [])
        for _ in range(repeats):
            for fn, times in timed.values():
                times.append(_timed(fn, args, device))
        for way, (_, times) in timed.items():
            times.sort()
            by_way[way]["forward_ms"], by_way[way]["median_ms"] = 1e3 * times[0], 1e3 * times[len(times) // 2]
        for way, row in by_way.items():
            row["over_qr"] = row["forward_ms"] / by_way["low-rank qr"]["forward_ms"]
            if memory:
                row["peak_mb"] = peak_memory_mb(way, n, dv, device)
    return rows


def block_rows(arch: str, tokens_side: int, batch: int, repeats: int, device: torch.device) -> list[dict]:
    """Forward and forward + backward of one block: softmax (``skipless`` preset) against OSA (``osa``)."""
    blocks = {
        "softmax (skipless, LayerNorms)": dict(residual="skipless"),
        "osa qr (no LayerNorms)": dict(residual="skipless", attention="osa", init="osa", norm="none"),
        "osa newton-schulz K=6 (no LayerNorms)": dict(residual="skipless", attention="osa", init="osa", norm="none",
                                                      attention_args={"basis": "newton-schulz"}),
    }
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else nullcontext()
    n = 1 + tokens_side * tokens_side
    calls = {}
    for name, kwargs in blocks.items():
        torch.manual_seed(0)
        model = create_vit(arch, depth=1, **kwargs)
        block = model.blocks[0].to(device)
        x = torch.randn(batch, n, model.embed_dim, device=device, requires_grad=True)

        def forward(block=block, x=x):
            with torch.no_grad(), autocast:
                block(x)

        def forward_backward(block=block, x=x):
            with autocast:
                y = block(x)
            y.float().pow(2).mean().backward()

        calls[name] = {"forward": forward, "forward_backward": forward_backward}
    times = {(name, kind): [] for name in calls for kind in ("forward", "forward_backward")}
    for round_ in range(repeats + 1):  # round 0 warms up; then each block in turn, as in head_rows
        for name, fns in calls.items():
            for kind, fn in fns.items():
                _sync(device)
                start = time.perf_counter()
                fn()
                _sync(device)
                if round_:
                    times[(name, kind)].append(time.perf_counter() - start)
    best = {key: 1e3 * min(t) for key, t in times.items()}  # the best round, as in head_rows
    rows = [{"block": name, "tokens": n, "batch": batch, "forward_ms": best[(name, "forward")],
             "forward_backward_ms": best[(name, "forward_backward")]} for name in calls]
    for r in rows:
        r["forward_over_softmax"] = r["forward_ms"] / rows[0]["forward_ms"]
        r["forward_backward_over_softmax"] = r["forward_backward_ms"] / rows[0]["forward_backward_ms"]
    return rows


@torch.no_grad()
def newton_schulz_errors(arch: str, image_px: int, steps=range(1, 11), **overrides) -> dict:
    """``||A_K - A_QR||_2`` (A orthogonal: a relative error), worst head of block 0 of an OSA model at
    init on one Gaussian image, for each K; with ``||S||_2`` (the rotation's size, radians) per head."""
    torch.manual_seed(0)
    model = create_vit(arch, residual="skipless", attention="osa", init="osa", norm="none", final_norm=False,
                       img_size=image_px, **overrides).double().eval()
    x = embed_tokens(model, torch.randn(1, 3, image_px, image_px, dtype=torch.float64))
    attn = model.blocks[0].attn
    q, k, _ = attn.qkv(x).reshape(1, x.shape[1], 3, attn.num_heads, attn.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    scale = attn.alpha * attn.scale
    n = x.shape[1]
    eye = torch.eye(n, dtype=torch.float64)
    b, d = low_rank_factors(q, k, scale, "qr")
    exact = eye + b @ d @ b.transpose(-2, -1)
    s_norm = torch.linalg.matrix_norm(scale * (q @ k.transpose(-2, -1) - k @ q.transpose(-2, -1)), 2)[0]
    errors = {}
    for steps_ in steps:
        b, d = low_rank_factors(q, k, scale, "newton-schulz", steps_)
        errors[steps_] = torch.linalg.matrix_norm(eye + b @ d @ b.transpose(-2, -1) - exact, 2).max().item()
    return {"arch": arch, "tokens": n, "d_v": attn.head_dim, "s_norm": [round(v, 3) for v in s_norm.tolist()],
            "errors": errors}


def section_osa(quick: bool = False, *, sizes=None, dv: int = 64, cap_s: float | None = None,
                repeats: int | None = None, memory: bool = True, block_arch: str = "vit_small",
                block_side: int = 14, block_batch: int | None = None, ns_models=None,
                cpu_threads: int | None = CPU_THREADS) -> tuple[dict, str]:
    """The three tables (``sizes``, ``dv``, ``block_*``, ``ns_models``: smaller cases for a test), on a CPU
    with ``cpu_threads`` torch threads (None: torch's own number)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    threads = torch.get_num_threads()
    if device.type == "cpu" and cpu_threads:
        torch.set_num_threads(cpu_threads)
    try:
        return _section(quick, sizes, dv, cap_s, repeats, memory, block_arch, block_side, block_batch, ns_models,
                        device)
    finally:
        torch.set_num_threads(threads)


def _section(quick, sizes, dv, cap_s, repeats, memory, block_arch, block_side, block_batch, ns_models,
             device) -> tuple[dict, str]:
    sizes = tuple(sizes or ((64, 256, 1024) if quick else SIZES))
    cap_s = cap_s if cap_s is not None else (1.0 if quick else 5.0)
    repeats = repeats or (3 if quick else 9)
    block_batch = block_batch or (64 if device.type == "cuda" else 8)
    ns_models = ns_models if ns_models is not None else [("vit_small", 224, {}),
                                                         ("vit_micro", 28, {"patch_size": 4})]
    result = {
        "head": head_rows(sizes, dv, repeats, cap_s, device, memory),
        "block": block_rows(block_arch, block_side, block_batch, repeats, device),
        "newton_schulz": [newton_schulz_errors(a, px, **kw) for a, px, kw in ns_models],
        "memory": ("CUDA max_memory_allocated above the allocation before the call" if device.type == "cuda" else
                   "peak RSS of the call above the RSS before it, in a fresh process (VmHWM)") if memory else None,
        "dense_cap_s": cap_s, "d_v": dv, "repeats": repeats, "threads": torch.get_num_threads(),
    }
    where = "cuda" if device.type == "cuda" else f"cpu, {result['threads']} thread(s)"
    text = (f"\nOSA, one head (d_v = {dv}, batch 1, forward, {where}, fp32, best and median of {repeats} "
            f"rounds): low rank "
            f"against the dense N x N matrix_exp; peak_mb: {result['memory'] or 'not measured'}:\n"
            + markdown_table(result["head"], COLUMNS))
    text += (f"\n\none block ({block_arch}, {result['block'][0]['tokens']} tokens x {block_batch}, "
             f"{'bf16 autocast' if device.type == 'cuda' else where + ', fp32'}, best of {repeats} rounds), "
             "OSA against softmax:\n"
             + markdown_table(result["block"], BLOCK_COLUMNS))
    ns_rows = []
    for r in result["newton_schulz"]:
        ns_rows.append({"model": f"{r['arch']} block 0 (N {r['tokens']}, d_v {r['d_v']}, "
                                 f"||S||_2 {min(r['s_norm']):.2g}-{max(r['s_norm']):.2g})",
                        **{f"K={k}": v for k, v in r["errors"].items()}})
    steps = list(result["newton_schulz"][0]["errors"]) if result["newton_schulz"] else []
    text += ("\n\nNewton-Schulz: ||A_K - A_QR||_2 at init on a Gaussian image (worst head; A orthogonal, so 2 is "
             "the largest possible):\n" + markdown_table(ns_rows, ["model"] + [f"K={k}" for k in steps]))
    return result, text


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--rss":
    print(json.dumps(rss_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
