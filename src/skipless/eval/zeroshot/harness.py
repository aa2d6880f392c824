"""lm-evaluation-harness's log-likelihood requests, as its 0.4.x scores them for a causal model.

A multiple-choice item becomes one request per choice, ``(context, continuation)``; the model's answer to a
request is the continuation's summed log-probability given the context. How lm-eval turns the two strings into
tokens and scores them (``lm_eval/api/model.py``: ``TemplateLM.loglikelihood`` and ``_encode_pair``;
``lm_eval/models/huggingface.py``: ``HFLM._loglikelihood_tokens``), read from 0.4.12 and 0.4.13 and written
again here:

1. the task puts its target delimiter, one space, before each continuation (``" " + choice``);
2. trailing whitespace of the context is moved to the front of the continuation (``"Answer: "`` + ``"x"`` ->
   ``"Answer:"`` + ``" x"``), so a word keeps its leading space as byte-level BPEs tokenize it;
3. the context and the whole string (context + continuation) are encoded, each without special tokens, and the
   continuation's tokens are **the whole's tokens after the context's count** (``whole[len(ctx):]``): where a
   token straddles the boundary, the split is by count, not by text;
4. an empty context becomes the prefix token (the end-of-text token here; lm-eval takes a tokenizer's BOS
   when it has one, ours have none), unless the continuation itself starts with that token, which then serves
   as the context;
5. the model reads ``(context + continuation)[-(max_length + 1):][:-1]``: the last ``max_length + 1`` tokens, left
   truncated, minus the last (which is only predicted); the continuation's log-probabilities are those of its
   tokens at the input's last ``len(continuation)`` positions. A continuation longer than ``max_length`` is
   refused (lm-eval asserts it).

Requests are scored in batches, padded on the right (position t of a causal model reads tokens 0..t only, so
padding after a request leaves its values unchanged), longest first, log-softmax in float32; a ``CausalLM`` is
projected to its vocabulary only at the continuations' positions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch
import torch.nn.functional as F

from skipless.errors import SkiplessError

TARGET_DELIMITER = " "  # lm-eval's TaskConfig.target_delimiter, the same for the five tasks


class RequestError(SkiplessError, ValueError):
    """A request the model cannot score (a continuation longer than its context)."""


@dataclass(frozen=True)
class Request:
    """One ``loglikelihood`` request: the continuation's log-probability given the context."""

    context: str
    continuation: str


def move_trailing_space(context: str, continuation: str) -> tuple[str, str]:
    """Step 2: the context's trailing whitespace moved to the front of the continuation."""
    stripped = context.rstrip()
    return stripped, context[len(stripped):] + continuation


def encode_request(encode: Callable[[str], list[int]], request: Request, prefix_id: int) -> tuple[list[int], list[int]]:
    """Steps 2-4: ``(context tokens, continuation tokens)`` of ``request``; ``encode`` maps a text to its ids
    without special tokens, ``prefix_id`` is the token an empty context becomes."""
    if request.context == "":
        continuation = encode(request.continuation)
        if continuation and continuation[0] == prefix_id:
            return continuation[:1], continuation[1:]
        return [prefix_id], continuation
    context, continuation = move_trailing_space(request.context, request.continuation)
    whole, context_ids = encode(context + continuation), encode(context)
    return context_ids, whole[len(context_ids):]


def model_input(context_ids: Sequence[int], continuation_ids: Sequence[int], max_length: int) -> list[int]:
    """Step 5: the tokens the model reads, at most ``max_length``, the continuation's last token excluded."""
    if len(continuation_ids) > max_length:
        raise RequestError(f"a continuation of {len(continuation_ids)} tokens is longer than the model's context of "
                           f"{max_length} tokens and cannot be scored")
    return (list(context_ids) + list(continuation_ids))[-(max_length + 1):][:-1]


def _continuation_rows(model: Callable[[torch.Tensor], torch.Tensor], batch: torch.Tensor,
                       spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """The log-softmax (float32) at the positions ``spans`` (``(row, start, stop)`` per request, concatenated).
    A model with ``forward_features`` and ``forward_head`` (``CausalLM``) projects to the vocabulary only there,
    not at every context position; any other model is called whole and its logits picked."""
    rows = torch.tensor([r for r, a, b in spans for _ in range(a, b)], dtype=torch.int64, device=batch.device)
    cols = torch.tensor([t for _, a, b in spans for t in range(a, b)], dtype=torch.int64, device=batch.device)
    if hasattr(model, "forward_features") and hasattr(model, "forward_head"):
        logits = model.forward_head(model.forward_features(batch)[rows, cols])
    else:
        logits = model(batch)[rows, cols]
    return F.log_softmax(logits.float(), dim=-1)


@torch.no_grad()
def continuation_log_probs(model: Callable[[torch.Tensor], torch.Tensor], inputs: Sequence[Sequence[int]],
                           continuations: Sequence[Sequence[int]], device: torch.device | str = "cpu",
                           batch_size: int = 32, progress: Callable[[int], None] | None = None
                           ) -> list[tuple[float, bool]]:
    """``(summed log-probability, greedy)`` of each continuation after its input (``model_input``).

    ``model`` maps token ids (B, T) to next-token logits (B, T, V). ``greedy``: every continuation token is the
    model's argmax (lm-eval's ``is_greedy``). Batches of ``batch_size`` requests, longest first; ``progress`` is
    called with the number of requests each batch finished.
    """
    order = sorted(range(len(inputs)), key=lambda i: -len(inputs[i]))
    out: list[tuple[float, bool]] = [(0.0, True)] * len(inputs)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        width = max(len(inputs[i]) for i in chunk)
        batch = torch.zeros(len(chunk), width, dtype=torch.int64)
        for row, i in enumerate(chunk):
            batch[row, :len(inputs[i])] = torch.tensor(inputs[i], dtype=torch.int64)
        # the continuation's n tokens are predicted at the input's last n positions
        spans = [(row, len(inputs[i]) - len(continuations[i]), len(inputs[i])) for row, i in enumerate(chunk)]
        log_probs = _continuation_rows(model, batch.to(device), spans)
        targets = torch.tensor([t for i in chunk for t in continuations[i]], dtype=torch.int64,
                               device=log_probs.device)
        picked = log_probs.gather(-1, targets[:, None]).squeeze(-1)
        hits = log_probs.argmax(-1) == targets
        at = 0
        for i in chunk:
            n = len(continuations[i])
            out[i] = (float(picked[at:at + n].sum()), bool(hits[at:at + n].all()))
            at += n
        if progress is not None:
            progress(len(chunk))
    return out


def score_requests(model: Callable[[torch.Tensor], torch.Tensor], encode: Callable[[str], list[int]],
                   requests: Iterable[Request], prefix_id: int, max_length: int, device: torch.device | str = "cpu",
                   batch_size: int = 32, progress: Callable[[int], None] | None = None) -> list[tuple[float, bool]]:
    """Steps 2-5 on every request: ``(log-likelihood, greedy)`` per request, in order."""
    pairs = [encode_request(encode, r, prefix_id) for r in requests]
    inputs = [model_input(c, x, max_length) for c, x in pairs]
    return continuation_log_probs(model, inputs, [x for _, x in pairs], device, batch_size, progress)


__all__ = ["TARGET_DELIMITER", "Request", "RequestError", "continuation_log_probs", "encode_request", "model_input",
           "move_trailing_space", "score_requests"]
