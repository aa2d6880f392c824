"""The language model's fake data for the pre-flight (``data/generator/fake_text.py``): C4's layout that the C4
reader reads, with the words asked for, the same bytes for a seed; the five tasks the task readers load; a real
folder never written into."""
from __future__ import annotations

import pytest

from skipless.data.errors import MalformedDatasetError
from skipless.data.generator.fake_text import WORDS, write_fake_c4, write_fake_tasks
from skipless.data.text.c4 import c4_shards, split_documents
from skipless.data.text.tasks import load_task


def test_the_fake_c4_is_read_by_the_c4_reader_with_the_words_asked_for(tmp_path):
    root = write_fake_c4(tmp_path / "c4", 3, 1, 2000, 500, seed=1)
    assert [p.name for p in c4_shards(root, "train")] == [f"c4-train.0000{i}-of-01024.json.gz" for i in range(3)]
    assert [p.name for p in c4_shards(root, "validation")] == ["c4-validation.00000-of-00008.json.gz"]
    train = list(split_documents(root, "train"))
    val = list(split_documents(root, "validation"))
    assert sum(len(d.split()) for d in train) >= 2000 and sum(len(d.split()) for d in val) >= 500
    assert {w.strip(".").lower() for d in train for w in d.split()} <= set(WORDS)
    again = write_fake_c4(tmp_path / "again", 3, 1, 2000, 500, seed=1)
    assert all((root / p.name).read_bytes() == p.read_bytes() for p in c4_shards(again, "train"))


def test_the_fake_tasks_load_as_the_five_tasks_with_the_items_asked_for(tmp_path):
    root = write_fake_tasks(tmp_path / "lm-val", 8)
    for task in ("piqa", "hellaswag", "winogrande", "arc_easy", "arc_challenge"):
        assert len(load_task(task, root).docs) == 8, task
    assert all(len(d["endings"]) == 4 for d in load_task("hellaswag", root).docs)
    assert all(len(d["choices"]["text"]) == 4 for d in load_task("arc_challenge", root).docs)


def test_a_real_folder_or_a_shard_count_c4_has_not_is_refused_before_anything_is_written(tmp_path):
    real = tmp_path / "c4"
    real.mkdir()
    (real / "mine.txt").write_text("a user's file")
    with pytest.raises(MalformedDatasetError, match="exists and is no fake dataset"):
        write_fake_c4(real, 1, 1, 10, 10)
    with pytest.raises(MalformedDatasetError, match="exists and is no fake dataset"):
        write_fake_tasks(real, 8)
    with pytest.raises(MalformedDatasetError, match="a fake C4 of 9 validation shards: C4 en has 1 to 8"):
        write_fake_c4(tmp_path / "new", 1, 9, 10, 10)
    assert sorted(p.name for p in real.iterdir()) == ["mine.txt"] and not (tmp_path / "new").exists()
