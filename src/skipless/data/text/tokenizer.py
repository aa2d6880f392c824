"""A tokenizer as the language model's data uses it: a ``tokenizers`` ``tokenizer.json`` with its end-of-text
token, which packing puts between documents (``packing.py``).

``tokenizer.json`` has no notion of an end-of-text token of its own (Hugging Face keeps ``eos_token`` in a
``tokenizer_config.json`` beside it), so ``load_tokenizer`` takes the ``eos_token`` of a ``tokenizer_config.json``
in the same folder when there is one, else the first of ``EOS_NAMES`` that the vocabulary holds: GPT-2's and
GPT-NeoX's ``<|endoftext|>`` (the suite's own tokenizers use it too), Llama's and T5's ``</s>``, Llama 3's
``<|end_of_text|>``. A tokenizer with neither is refused in one sentence, as is a path that does not exist or
is not a tokenizer file. Documents are encoded without the tokenizer's own special tokens
(``add_special_tokens=False``: a Llama tokenizer would put ``<s>`` before each one).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tokenizers import Tokenizer

from .errors import TokenizerError
from .pinned import sha256_of

EOS_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eos|>")
CONFIG = "tokenizer_config.json"


@dataclass(frozen=True)
class TextTokenizer:
    """A loaded tokenizer: the file it came from, its sha256 (``digest``: what the token cache is keyed by),
    the ``tokenizers.Tokenizer`` and its end-of-text token and id."""

    path: Path
    digest: str
    tokenizer: Tokenizer
    eos: str
    eos_id: int

    @property
    def vocab_size(self) -> int:
        """Ids run from 0 to ``vocab_size - 1`` (the added special tokens counted)."""
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids of each text, without the tokenizer's own special tokens."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]


def _configured_eos(folder: Path) -> str | None:
    """The ``eos_token`` of ``folder/tokenizer_config.json``, a string or ``{"content": ...}``; None without one."""
    try:
        config = json.loads((folder / CONFIG).read_text())
    except (OSError, ValueError):
        return None
    eos = config.get("eos_token") if isinstance(config, dict) else None
    if isinstance(eos, dict):
        eos = eos.get("content")
    return eos if isinstance(eos, str) else None


def load_tokenizer(path: str | os.PathLike) -> TextTokenizer:
    """The tokenizer at ``path`` (a ``tokenizer.json``, or a folder holding one) and its end-of-text token.

    Raises:
        TokenizerError: nothing at ``path``, a file ``tokenizers`` cannot read, or no end-of-text token.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise TokenizerError(f"tokenizer {path} does not exist; expected a tokenizers tokenizer.json (or a folder "
                             "holding one)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as err:  # the library raises a bare Exception for every file it cannot read
        raise TokenizerError(f"{path} is not a tokenizer file the tokenizers library can read "
                             f"({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    configured = _configured_eos(path.parent)
    names = (configured,) if configured is not None else EOS_NAMES
    for name in names:
        eos_id = tokenizer.token_to_id(name)
        if eos_id is not None:
            return TextTokenizer(path, sha256_of(path), tokenizer, name, eos_id)
    said = (f"its vocabulary lacks the eos_token {configured!r} that its {CONFIG} names" if configured is not None
            else f"its vocabulary holds none of {', '.join(EOS_NAMES)} and no {CONFIG} beside it names one")
    raise TokenizerError(f"tokenizer {path} has no end-of-text token ({said}); packing puts one between documents")
