"""A byte-level BPE trained at data time on a corpus's training split, with the ``tokenizers`` library: the
tokenizer of the embedded default (``bible-bpe4k``, 4,096 tokens, ``registry.py``).

The recipe is GPT-2's (Radford et al., 2019, Sec. 2.2), as ``tokenizers``' ``ByteLevelBPETokenizer`` sets it
up: text is cut by GPT-2's pre-tokenization regex and mapped byte by byte to 256 printable symbols
(``pre_tokenizers.ByteLevel``, no prefix space), so every string encodes and nothing is unknown; BPE merges the
most frequent adjacent pair until the vocabulary holds ``vocab_size`` tokens: ``EOS`` (id 0, a special token,
never split or merged), the 256 byte symbols (all of them, seen or not), then the merges. The decoder maps the
symbols back to bytes.

Deterministic: the same documents in the same order give the same ``tokenizer.json``, byte for byte (the
trainer counts words in parallel, but its ties between pairs of equal count are broken by the pairs' ids, and
those follow the sorted alphabet and the merge order; ``tests/test_text_tokenizers.py`` trains twice).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ...atomic import atomic_write

EOS = "<|endoftext|>"  # GPT-2's name for it, so the suite's tokenizers share one end-of-text token


def train_bpe(documents: Iterable[str], out: str | os.PathLike, vocab_size: int, length: int | None = None) -> Path:
    """Train a byte-level BPE of ``vocab_size`` tokens (``EOS`` and the 256 byte symbols included) on
    ``documents`` and write its ``tokenizer.json`` to ``out`` atomically. ``length``: how many documents there
    are, for the trainer's bookkeeping (optional). Returns ``out``."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(documents, trainer=trainer, length=length)
    return atomic_write(out, lambda tmp: tokenizer.save(tmp))
