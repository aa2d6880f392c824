"""Lightning checkpoints written atomically (a crash mid-write never leaves a truncated file).

Lightning's own ``TorchCheckpointIO`` streams into the destination file, so a crash mid-write leaves
a truncated ``last.ckpt``; ours writes a temporary file and renames it over the old one.
"""
from __future__ import annotations

from typing import Any

from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..atomic import atomic_torch_save


class AtomicCheckpointIO(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        atomic_torch_save(checkpoint, path)
