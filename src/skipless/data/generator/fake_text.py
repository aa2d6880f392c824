"""Tiny text data in the layouts of the real ones, for the language model's pre-flight (``make paper EXP=table7
SCALE=full PREFLIGHT=1``, ``paper/preflight.py``), the text counterpart of ``fake_layouts.py``:

    c4/       c4-train.NNNNN-of-01024.json.gz (the first ``train_shards``) and c4-validation.NNNNN-of-00008.json.gz
              (the first ``val_shards``): gzipped JSON lines ``{"text", "timestamp", "url"}``, as allenai/c4's ``en``
    lm-val/   the five zero-shot tasks in their original releases' layouts (``demo_tasks.py``'s writers: PIQA's
              ``valid.jsonl`` + ``valid-labels.lst``, HellaSwag's ``hellaswag_val.jsonl``, ...), which the
              zero-shot evaluator reads as it reads ``make data DATA=lm-val``'s files

The text is sentences of common English words drawn with a seeded generator (``WORDS``), so that every
tokenizer, GPT-2's included, reads it as ordinary text. What a run on it proves: the readers, the tokenizer,
the packing, the model and the scoring at the recipe's sizes (shards, context, vocabulary); not a loss, not an
accuracy. Each folder holds ``fake_layouts.FAKE_TAG``; a folder without it is never written into.
"""
from __future__ import annotations

import json
import os
import random
from pathlib import Path

from ...atomic import atomic_write
from ..errors import MalformedDatasetError
from ..text.bible import gzip_bytes
from ..text.c4 import shard_name
from ..text.demo_tasks import MIN_WORDS, demo_task_files
from .fake_layouts import FAKE_TAG

C4_SHARDS = {"train": 1024, "validation": 8}  # allenai/c4 en's shard counts (c4.py)
TIMESTAMP = "2019-04-25T12:00:00Z"
WORDS_PER_DOCUMENT = 400
# A few hundred of the most frequent English words: each is one GPT-2 token with its leading space.
WORDS = tuple("""
the of and to in is was for on are as with his they at be this from have or by one had not but what all were
when we there can an your which their said if do will each about how up out them then she many some so these
would other into has more her two like him see time could no make than first been its who now people my made over
did down only way find use may water long little very after words called just where most know get through back
much go good new write our me man too any day same right look think also around another came come work three word
must because does part even place well such here take why things help put years different away again off went old
number great tell men say small every found still between name should home big give air line set own under read
last never us left end along while might next sound below saw something thought both few those always looked show
large often together asked house world going want school important until form food keep children feet land side
without boy once animals life enough took sometimes four head above kind began almost live page got earth need far
hand high year mother light parts country father let night following picture being study second eyes soon times
story boys since white days ever paper hard near sentence better best across during today others however sure means
knew try told young miles sun ways thing whole hear example heard several change answer room sea against top turned
learn point city play toward five using himself usually
""".split())
CHANCE_WORDS = (MIN_WORDS, 2 * MIN_WORDS)  # a task "verse" has 9 to 18 words: halves and thirds as the demo's


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(6, 16))]
    return " ".join(words).capitalize() + "."


def fake_document(rng: random.Random, words: int) -> str:
    """Sentences of ``WORDS`` until the text has at least ``words`` words."""
    sentences, count = [], 0
    while count < words:
        sentences.append(_sentence(rng))
        count += len(sentences[-1].split())
    return " ".join(sentences)


def _check_folder(folder: Path) -> None:
    if folder.exists() and not (folder / FAKE_TAG).exists():
        raise MalformedDatasetError(f"{folder} exists and is no fake dataset (no {FAKE_TAG}); not writing fake text "
                                    "into it: expected a new or a fake folder")


def _shard(rng: random.Random, split: str, index: int, words: int) -> bytes:
    documents = max(1, -(-words // WORDS_PER_DOCUMENT))
    lines = [json.dumps({"text": fake_document(rng, WORDS_PER_DOCUMENT), "timestamp": TIMESTAMP,
                         "url": f"https://example.org/{split}/{index}/{k}"}, separators=(",", ":")) + "\n"
             for k in range(documents)]
    return gzip_bytes("".join(lines).encode("utf-8"))


def write_fake_c4(root: str | os.PathLike, train_shards: int, val_shards: int, train_words: int, val_words: int,
                  seed: int = 0) -> Path:
    """C4 ``en``'s layout at ``root``: the first ``train_shards`` train shards holding ``train_words`` words in all
    (at least one document each) and the first ``val_shards`` validation shards holding ``val_words``; returns
    ``root``. Refused in one sentence: a folder that is not a fake one, a shard count C4 does not have."""
    root = Path(root)
    for split, wanted in (("train", train_shards), ("validation", val_shards)):
        if not 1 <= wanted <= C4_SHARDS[split]:
            raise MalformedDatasetError(f"a fake C4 of {wanted} {split} shards: C4 en has 1 to {C4_SHARDS[split]}")
    _check_folder(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / FAKE_TAG).write_text("fake C4 text for make paper PREFLIGHT=1; safe to delete\n")
    rng = random.Random(f"c4-{seed}")
    for split, shards, words in (("train", train_shards, train_words), ("validation", val_shards, val_words)):
        for i in range(shards):
            data = _shard(rng, split, i, -(-words // shards))
            atomic_write(root / shard_name(split, i, C4_SHARDS[split]), lambda tmp, d=data: Path(tmp).write_bytes(d))
    return root


def write_fake_tasks(root: str | os.PathLike, items: int, seed: int = 0) -> Path:
    """The five zero-shot tasks at ``root``, ``items`` each, in their original releases' layouts, made by
    ``demo_tasks.demo_task_files`` from fake verses (``(book, text)`` of ``CHANCE_WORDS`` words: the builders cut
    them into halves and thirds)."""
    root = Path(root)
    _check_folder(root)
    rng = random.Random(f"tasks-{seed}")
    # the builders skip a few verses and draw the wrong answers from the others: four times the items
    verses = [(f"Book {k % 7}", " ".join(rng.choice(WORDS) for _ in range(rng.randint(*CHANCE_WORDS))).capitalize()
               + ".") for k in range(4 * items + 8)]
    root.mkdir(parents=True, exist_ok=True)
    (root / FAKE_TAG).write_text("fake zero-shot tasks for make paper PREFLIGHT=1; safe to delete\n")
    for name, data in demo_task_files(verses, items).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp, d=data: Path(tmp).write_bytes(d))
    return root
