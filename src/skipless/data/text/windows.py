"""The training windows of a packed token stream (``packing.py``): a map-style torch ``Dataset``, so that the
suite's training loader (``training/loader_state.py``: shuffled, dealt over ranks and workers, resumable at any
step) serves text as it serves images.

Window ``i`` is the ``context + 1`` tokens starting at ``i * context``; its inputs are the first ``context``,
its targets the last ``context`` (the inputs shifted by one), as in nanoGPT's ``get_batch``, but cut at fixed
places instead of random ones, so that an epoch of the ``(tokens - 1) // context`` windows feeds every
position of the stream once as an input and predicts every token after the first once; only the last
``(tokens - 1) mod context`` positions, too few for a window, are left out. Consecutive windows share one
token: the last target of one is the first input of the next.

The stream is memory-mapped on first use in each process (a loader worker maps its own; the map is never
pickled), and each window is copied out as ``int64``, the dtype an embedding lookup takes.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from ..errors import MalformedDatasetError
from .packing import PackedStream


class PackedWindows(Dataset):
    """``(inputs, targets)``, two int64 tensors of ``context`` tokens, for each window of ``stream``."""

    def __init__(self, stream: PackedStream, context: int) -> None:
        if context < 1:
            raise ValueError(f"context must be at least 1 token, not {context}")
        if stream.tokens < context + 1:
            raise MalformedDatasetError(f"{stream.path} holds {stream.tokens} tokens, fewer than one window of "
                                        f"context + 1 = {context + 1}; expected a longer corpus or a shorter context")
        self.stream, self.context = stream, int(context)
        self._tokens: np.memmap | None = None

    def __len__(self) -> int:
        return (self.stream.tokens - 1) // self.context

    def start(self, index: int) -> int:
        """The stream position of window ``index``'s first input token."""
        return index * self.context

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} of {len(self)}")
        if self._tokens is None:
            self._tokens = self.stream.array()
        start = self.start(index)
        window = torch.from_numpy(self._tokens[start:start + self.context + 1].astype(np.int64))
        return window[:-1], window[1:]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tokens": None}
