"""Packing (``skipless/data/text/packing.py``, ``windows.py``): the stream is every document's ids followed by EOS,
computed here one document at a time; it is cached once, keyed by the corpus files and the tokenizer; its windows
are context + 1 tokens with targets shifted by one; the training loader's epoch covers every input position of the
stream exactly once, also dealt over two ranks; and an epoch cut after any step and resumed from the loader's
position gives the rest of the uninterrupted epoch's windows bit for bit, with and without workers."""
import os
from collections import Counter

import numpy as np
import pytest
import torch

from skipless.data.errors import MalformedDatasetError
from skipless.data.text.bpe import train_bpe
from skipless.data.text.packing import pack_split, pack_tokens, stream_dtype
from skipless.data.text.tokenizer import load_tokenizer
from skipless.data.text.windows import PackedWindows
from skipless.training import loader_state
from skipless.training.loader_state import ResumableLoader
from text_fixtures import write_c4
from tiny_runs import cut_and_resumed, epoch

DOCS = [f"Chapter {i}. " + " ".join(f"the {w}{i % 7} went {'up' if i % 2 else 'down'} to {j}" for j, w in
                                     enumerate(["river", "king", "seed", "bird"][: 1 + i % 4])) for i in range(30)]
CONTEXT = 8


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_c4(tmp_path_factory.mktemp("corpus"), {"train": [DOCS[:12], DOCS[12:25]], "validation": [DOCS[25:]]})


@pytest.fixture(scope="module")
def tokenizer(corpus, tmp_path_factory):
    return load_tokenizer(train_bpe(iter(DOCS), tmp_path_factory.mktemp("tok") / "tokenizer.json", vocab_size=300))


@pytest.fixture(scope="module")
def stream(corpus, tokenizer, tmp_path_factory):
    return pack_split(corpus, "train", tokenizer, tmp_path_factory.mktemp("cache"))


def expected_stream(tokenizer, docs):
    ids = []
    for doc in docs:
        ids += tokenizer.tokenizer.encode(doc, add_special_tokens=False).ids + [tokenizer.eos_id]
    return np.array(ids)


def test_the_stream_is_each_document_then_eos_in_shard_and_line_order(stream, tokenizer):
    assert stream.documents == 25 and stream.dtype == "uint16" and stream.eos_id == tokenizer.eos_id
    assert np.array_equal(stream.array(), expected_stream(tokenizer, DOCS[:25]))
    assert int((stream.array() == tokenizer.eos_id).sum()) == 25


def test_the_stream_is_written_once_and_keyed_by_the_corpus_files_and_the_tokenizer(corpus, tokenizer, tmp_path):
    first = pack_split(corpus, "train", tokenizer, tmp_path)
    stamp = first.path.stat().st_mtime_ns
    assert pack_split(corpus, "train", tokenizer, tmp_path) == first and first.path.stat().st_mtime_ns == stamp
    other_split = pack_split(corpus, "validation", tokenizer, tmp_path)
    assert other_split.path != first.path and other_split.documents == 5
    one_shard = pack_tokens([corpus / "c4-train.00000-of-00002.json.gz"], tokenizer, tmp_path)  # a caller's choice
    assert one_shard.documents == 12 and np.array_equal(one_shard.array(), expected_stream(tokenizer, DOCS[:12]))
    other_tok = load_tokenizer(train_bpe(iter(DOCS[:5]), tmp_path / "t2.json", vocab_size=280))
    assert pack_split(corpus, "train", other_tok, tmp_path).path != first.path
    shard = corpus / "c4-train.00001-of-00002.json.gz"
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))  # the file was rewritten
    assert pack_split(corpus, "train", tokenizer, tmp_path).path != first.path
    assert len(list(tmp_path.glob("tokens-*.bin"))) == 5 and not list(tmp_path.glob(".*.tmp"))


def test_the_dtype_is_uint16_while_every_id_fits_and_uint32_beyond():
    assert stream_dtype(65536) == np.uint16 and stream_dtype(65537) == np.uint32
    assert stream_dtype(50257) == np.uint16 and stream_dtype(128256) == np.uint32


def test_windows_are_context_plus_one_tokens_with_targets_shifted_by_one(stream):
    windows = PackedWindows(stream, CONTEXT)
    tokens = torch.from_numpy(stream.array().astype(np.int64))
    assert len(windows) == (stream.tokens - 1) // CONTEXT
    for i in (0, 1, len(windows) - 1):
        inputs, targets = windows[i]
        assert inputs.dtype == targets.dtype == torch.int64 and inputs.shape == targets.shape == (CONTEXT,)
        assert torch.equal(inputs, tokens[i * CONTEXT:(i + 1) * CONTEXT])
        assert torch.equal(targets, tokens[i * CONTEXT + 1:(i + 1) * CONTEXT + 1])
    with pytest.raises(IndexError):
        windows[len(windows)]


def test_an_epoch_of_the_training_loader_covers_every_input_position_once(stream):
    """The windows' inputs, in index order, tile the stream's first len x context positions and their targets the
    positions one further; an epoch of the loader (batches of 1, so that no window is left out of whole steps)
    deals each window once: the windows it deals, as token sequences, are those of the indices, counted alike."""
    windows = PackedWindows(stream, CONTEXT)
    tokens = torch.from_numpy(stream.array().astype(np.int64))
    covered = len(windows) * CONTEXT
    assert torch.equal(torch.cat([windows[i][0] for i in range(len(windows))]), tokens[:covered])
    assert torch.equal(torch.cat([windows[i][1] for i in range(len(windows))]), tokens[1:covered + 1])
    assert 1 <= stream.tokens - covered <= CONTEXT  # the tail left out: too short for another window
    torch.manual_seed(0)
    dealt = Counter(tuple(torch.cat([inputs[0], targets[0, -1:]]).tolist())
                    for inputs, targets in epoch(ResumableLoader(windows, batch_size=1, seed=0)))
    every = Counter(tuple(torch.cat([windows[i][0], windows[i][1][-1:]]).tolist()) for i in range(len(windows)))
    assert dealt == every and sum(dealt.values()) == len(windows)


def test_two_ranks_deal_every_window_between_them(stream, monkeypatch):
    windows = PackedWindows(stream, CONTEXT)
    dealt = []
    for rank in (0, 1):
        monkeypatch.setattr(loader_state, "rank_and_world", lambda rank=rank: (rank, 2))
        dealt.append(list(iter(ResumableLoader(windows, batch_size=1, seed=3).sampler)))
    assert not set(dealt[0]) & set(dealt[1]) or len(windows) % 2  # disjoint (one repeat pads an odd count)
    assert sorted(set(dealt[0]) | set(dealt[1])) == list(range(len(windows)))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("cut", [1, 3])
def test_an_epoch_resumed_after_any_step_gives_the_rest_of_the_windows_bit_for_bit(stream, workers, cut):
    windows = PackedWindows(stream, CONTEXT)

    def loader():
        return ResumableLoader(windows, batch_size=2, seed=0, num_workers=workers, micro_batches=2)

    torch.manual_seed(0)
    straight = epoch(loader())
    assert len(straight) == len(windows) // 4 > cut
    head, tail, _ = cut_and_resumed(loader, cut)  # the resumed process's own generator does not decide the order
    assert len(head) + len(tail) == len(straight)
    for got, want in zip(head + tail, straight, strict=True):
        for got_micro, want_micro in zip(got, want, strict=True):
            for a, b in zip(got_micro, want_micro, strict=True):
                assert torch.equal(a, b)


def test_a_stream_shorter_than_one_window_and_files_without_documents_are_refused(corpus, tokenizer, tmp_path):
    short = pack_split(corpus, "validation", tokenizer, tmp_path)
    with pytest.raises(MalformedDatasetError, match=f"holds {short.tokens} tokens, fewer than one window"):
        PackedWindows(short, short.tokens)
    empty = write_c4(tmp_path / "empty", {"train": [[]]})
    with pytest.raises(MalformedDatasetError, match="hold no document"):
        pack_split(empty, "train", tokenizer, tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("tokens-*"))
