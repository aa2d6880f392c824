"""The ``lm_init`` section of ``make bench``: the causal language model at initialisation (issue 49).

For five initialisations of the LM (``CONFIGS``) and two window lengths, from one forward of random token
sequences (ids uniform over the vocabulary, ``torch.Generator`` seed ``SEED``) on the explicit attention path,
per block (``skipless.analysis.lm_signals``):

- the attention's **self-weight**: the mean over heads and sequences of ``A[t, t]``, the weight the token at
  position ``t`` puts on itself, read at the token that sees ``n`` tokens (itself and the ``n - 1`` before
  it) for ``n`` in ``SEEN`` (2, 16, 128, 2,048; those up to the window, and the window's last token). Uniform causal attention gives
  exactly ``1 / n``, an identity-like one about 1. ``n = 1`` is left out: the first token sees only
  itself, its self-weight is 1 whatever the init;
- the **token cosine**: the mean cosine between distinct token representations of a sequence after the
  block, averaged over sequences (the rank-collapse signal: near 1 when the tokens have collapsed onto one
  direction); ``emb`` is that of the token embeddings, the first block's input.

The five (seed 000 App. A.8: alpha 0, beta 0.5; c 3 ours; every model drawn after ``torch.manual_seed(SEED)``,
so all five share the embedding's draw):

- ``skip fla``: the residual model with flash-linear-attention's init, the baseline;
- ``skipless fla``: the "standard skipless Transformer" the seed says "diverges immediately" (``skipless-plain``);
- ``cutskip layer a=0``: skipless with the paper's init, Eq. 11 on the whole layer, the LM's default;
- ``cutskip head a=0*``: the per-head reading at alpha 0, which ``models/init.py`` refuses: built here with
  that one refusal bypassed (``head_reading_at_alpha_zero``), the init's own code otherwise, to show what it
  gives (issue 49's trap: every head the same ``W^Q_h = W^K_h = sqrt(beta) [e_1 .. e_dh]``);
- ``cutskip head a=0.1``: the per-head reading at a small alpha it accepts. Its heads differ again: the best
  rank-d_h factors of ``0.1 Z_h + 0.5 I`` follow ``Z_h``'s top singular directions, so ``head`` is
  discontinuous at alpha 0.

Sizes (``settings``): on a GPU lm_110m (12 blocks, 12 heads) at 128 tokens x 64 sequences and 2,048 x 8; on a
CPU the same model at 128 x 16 and 2,048 x 2 (every block; the paper's inits of lm_110m take about half a
minute (``layer``) and a minute (``head``) of float64 SVDs on 2 cores); ``--quick`` lm_demo (4 blocks, 4
heads) at 128 x 4 and its whole window, 256 x 2. The model runs in float32.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator
from unittest import mock

import torch

import skipless.models.init as init_module
from skipless.analysis.lm_signals import distinct_query_key_heads, lm_init_signals, self_weight_at
from skipless.models.causal_lm import create_causal_lm

from .table import markdown_table

SEED = 0
SEEN = (2, 16, 128, 2048)  # the tokens a position sees (itself included); uniform attention puts 1/n on itself
# name, create_causal_lm arguments, whether the qk=head refusal at alpha 0 is bypassed (the module docstring)
CONFIGS: tuple[tuple[str, dict[str, Any], bool], ...] = (
    ("skip fla", dict(residual="skip", init="fla"), False),
    ("skipless fla", dict(residual="skipless", init="fla"), False),
    ("cutskip layer a=0", dict(residual="skipless", init="cutskip", init_args={"qk": "layer", "alpha": 0.0}), False),
    ("cutskip head a=0*", dict(residual="skipless", init="cutskip", init_args={"qk": "head", "alpha": 0.0}), True),
    ("cutskip head a=0.1", dict(residual="skipless", init="cutskip", init_args={"qk": "head", "alpha": 0.1}), False),
)
# (arch, [(window length, sequences), ...]) per device; the module docstring says why.
GPU_SETTINGS = ("lm_110m", [(128, 64), (2048, 8)])
CPU_SETTINGS = ("lm_110m", [(128, 16), (2048, 2)])
QUICK_SETTINGS = ("lm_demo", [(128, 4), (256, 2)])


@contextmanager
def head_reading_at_alpha_zero() -> Iterator[None]:
    """Inside, ``models/init.py`` builds ``qk=head`` at alpha 0 instead of refusing it: its check
    (``qk_reading_problem``) is asked about ``qk`` alone, so the refusal of that one pair goes and every other
    check and all of the init's code stay. For this bench only: what the per-head reading gave before it
    was refused."""
    check = init_module.qk_reading_problem
    with mock.patch.object(init_module, "qk_reading_problem",
                           lambda qk, alpha=None, prefix="": check(qk, None, prefix)):
        yield


def settings(quick: bool) -> tuple[str, list[tuple[int, int]]]:
    if quick:
        return QUICK_SETTINGS
    return GPU_SETTINGS if torch.cuda.is_available() else CPU_SETTINGS


def build(arch: str, kwargs: dict[str, Any], bypass: bool, **sizes: int) -> torch.nn.Module:
    torch.manual_seed(SEED)
    if bypass:
        with head_reading_at_alpha_zero():
            return create_causal_lm(arch, **kwargs, **sizes)
    return create_causal_lm(arch, **kwargs, **sizes)


def random_tokens(vocab: int, sequences: int, length: int) -> torch.Tensor:
    """Token ids uniform over ``0 .. vocab - 1``, (sequences, length), from a generator seeded ``SEED``."""
    return torch.randint(0, vocab, (sequences, length), generator=torch.Generator().manual_seed(SEED))


def seen_points(length: int) -> list[int]:
    """The ``n`` of ``SEEN`` a window of ``length`` tokens has, and its last token's ``length`` if not among them."""
    return [n for n in SEEN if n <= length] + ([length] if length not in SEEN else [])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(model: torch.nn.Module, length: int, sequences: int, device: torch.device) -> dict[str, Any]:
    """One window length: per block the token cosine and norm and the self-weight at ``SEEN`` and at every
    power of two up to the window (``self_weight_curve``), with the forward's time."""
    tokens = random_tokens(model.vocab_size, sequences, length).to(device)
    lm_init_signals(model, tokens[:1, :8])  # warm-up: thread pools, kernels (not timed)
    _sync(device)
    start = time.perf_counter()
    s = lm_init_signals(model, tokens)
    _sync(device)
    seconds = time.perf_counter() - start
    powers = sorted({2**i for i in range(length.bit_length()) if 2**i <= length} | {length})
    blocks = [{"block": i, "token_cosine": s.token_cosine[i], "token_norm": s.token_norm[i],
               "self_weight": {str(n): self_weight_at(curve, n) for n in seen_points(length)},
               "self_weight_curve": {str(n): self_weight_at(curve, n) for n in powers}}
              for i, curve in enumerate(s.self_weight)]
    return {"length": length, "sequences": sequences, "forward_s": seconds, "embedding_cosine": s.embedding_cosine,
            "blocks": blocks}


def section_lm_init(quick: bool = False, *, arch: str | None = None, windows: list[tuple[int, int]] | None = None,
                    configs=CONFIGS, **sizes: int) -> tuple[dict, str]:
    """The measurements and their tables (``arch``, ``windows``, ``configs``, ``sizes``: smaller cases for a
    test; by default ``settings(quick)``)."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    default_arch, default_windows = settings(quick)
    arch, windows = arch or default_arch, windows or default_windows
    result: dict[str, Any] = {
        "arch": arch, "sizes": sizes, "device": device.type, "windows": [list(w) for w in windows],
        "tokens": f"ids uniform over the vocabulary, torch.Generator seed {SEED}; models after torch.manual_seed({SEED})",
        "dtype": "float32", "configs": []}
    for name, kwargs, bypass in configs:
        start = time.perf_counter()
        model = build(arch, kwargs, bypass, **sizes)
        build_s = time.perf_counter() - start
        model = model.to(device)
        row = {"name": name, **kwargs, "head_refusal_bypassed": bypass,
               "init_args_resolved": model.skipless_args["init_args"], "build_s": build_s,
               "distinct_heads": [distinct_query_key_heads(b.attn) for b in model.blocks],
               "num_heads": model.num_heads, "depth": model.depth,
               "windows": [measure(model, length, n, device) for length, n in windows]}
        result["configs"].append(row)
        del model
    return result, tables(result)


def tables(result: dict) -> str:
    configs = result["configs"]
    depth = configs[0]["depth"]
    blocks = [f"b{i}" for i in range(depth)]
    where = "CUDA" if result["device"] == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    text = (f"\nthe language model at initialisation ({result['arch']}, {depth} blocks, {configs[0]['num_heads']} "
            f"heads, {where}, float32; random tokens: {result['tokens']}):\n")
    text += markdown_table([{"config": c["name"], "build_s": c["build_s"],
                             "distinct_heads": f"{min(c['distinct_heads'])}-{max(c['distinct_heads'])}",
                             **{f"forward_s@{w['length']}": w["forward_s"] for w in c["windows"]}} for c in configs],
                           ["config", "build_s", "distinct_heads"]
                           + [f"forward_s@{w['length']}" for w in configs[0]["windows"]])
    for k, window in enumerate(configs[0]["windows"]):
        length, sequences = window["length"], window["sequences"]
        rows = [{"config": c["name"], "emb": c["windows"][k]["embedding_cosine"],
                 **{f"b{b['block']}": b["token_cosine"] for b in c["windows"][k]["blocks"]}} for c in configs]
        text += (f"\n\ntoken cosine after each block ({length} tokens x {sequences} sequences; mean over pairs of "
                 f"distinct tokens, 1 = collapsed onto one direction):\n"
                 + markdown_table(rows, ["config", "emb", *blocks]))
        rows = [{"config": c["name"], "n": int(n), "uniform": 1.0 / int(n),
                 **{f"b{b['block']}": b["self_weight"][n] for b in c["windows"][k]["blocks"]}}
                for c in configs for n in c["windows"][k]["blocks"][0]["self_weight"]]
        text += (f"\n\nattention self-weight ({length} tokens x {sequences} sequences; mean over heads and sequences "
                 f"of A[t, t] at the token that sees n tokens; uniform attention: 1/n):\n"
                 + markdown_table(rows, ["config", "n", "uniform", *blocks]))
    return text
