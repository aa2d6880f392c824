"""A tiny C4-layout corpus and the smallest language-model runs the ``test_lm_*`` files train end to end.

The corpus is ``write_c4``'s layout (``text_fixtures.py``): 2 train shards and 1 validation shard of short
sentences over a 12-word vocabulary, tokenized by ``bible-bpe4k`` (the byte-level BPE trained on the training
split; on so little text it stops short of 4,096 tokens). ``TINY`` is a model of 2 blocks of width 32 over
windows of 16 tokens, 4 per step: a run of a few steps takes a few seconds. Runs pin ``train.precision=32-true``
so that comparisons of two runs do not depend on the machine's precision choice (``tiny_runs.py``)."""
from __future__ import annotations

from pathlib import Path

from text_fixtures import WORDS, write_c4


def sentence(k: int) -> str:
    words = [WORDS[(k * 5 + 3 * i + i * i) % len(WORDS)] for i in range(5 + k % 4)]
    return f"The {' and the '.join(words)} {'rose' if k % 3 else 'fell'}."


def write_corpus(root: Path) -> Path:
    """2 train shards of 150 documents, 1 validation shard of 40 (each document 3 sentences)."""
    doc = lambda k: " ".join(sentence(k * 3 + j) for j in range(3))  # noqa: E731
    return write_c4(root, {"train": [[doc(k) for k in range(150)], [doc(k) for k in range(150, 300)]],
                           "validation": [[doc(k) for k in range(1000, 1040)]]})


TINY = ["data=c4", "data.tokenizer=bible-bpe4k", "data.shards=null", "data.val_shards=null", "recipe=demo",
        "model.arch=lm_demo", "model.embed_dim=32", "model.depth=2", "model.num_heads=2", "model.mlp_hidden=64",
        "model.context=16", "train.batch_size_per_device=4", "train.steps=6", "optim.warmup_steps=2",
        "train.val_every_n_steps=3", "train.num_workers=0", "train.log_every_n_steps=1", "train.precision=32-true"]


def tiny_args(data: tuple[Path, Path], runs: Path, *extra: str) -> list[str]:
    """``TINY`` reading the corpus at ``data[0]`` with its built files cached in ``data[1]``, runs under ``runs``."""
    root, cache = data
    return [*TINY, f"data.root={root}", f"data.cache={cache}", f"run.root={runs}", *extra]
