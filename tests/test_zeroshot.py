"""make zeroshot: the scoring's sharp edges, each against a hand-written scoring with the model's own next-token
log-probabilities (the window's logits, a log-softmax per position in float64, no padding, no batching): the space moved from the
context to the continuation, the context/continuation token split, an empty context, left truncation, acc_norm by
characters, WinoGrande's two contexts and one continuation, HellaSwag's preprocessing; lm-eval's standard error;
and every refusal, in one sentence, before anything is written (an image backbone, a tokenizer that is missing,
of another vocabulary or not the recorded one, a task file with a wrong field, bad settings)."""
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
import torch

from skipless.config import ConfigError, load_config
from skipless.data.errors import DatasetNotFoundError, MalformedDatasetError
from skipless.data.text.bpe import train_bpe
from skipless.data.text.tokenizer import load_tokenizer
from skipless.errors import user_message
from skipless.eval.zeroshot.harness import (Request, RequestError, encode_request, model_input, move_trailing_space,
                                            score_requests)
from skipless.eval.zeroshot.run import ZeroshotError, main, run_zeroshot
from skipless.eval.zeroshot.tasks import (Item, chance, hellaswag_item, hellaswag_preprocess, item_metrics,
                                          mean_stderr, winogrande_item)
from skipless.models import create_vit
from skipless.models.checkpoint import BackboneLoadError, load_backbone, save_backbone

PARITY = Path(__file__).resolve().parent / "zeroshot_parity"
CONTEXT = 32


@pytest.fixture(scope="module")
def lm():
    return load_backbone(PARITY / "backbone.pt").eval()


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(PARITY / "tokenizer.json")


def encoder(tok):
    return lambda text: tok.encode_batch([text])[0]


def by_hand(model, context_ids, continuation_ids, max_length=CONTEXT):
    """The continuation's log-likelihood written out: the last max_length + 1 tokens of context + continuation,
    each token's log-probability given the ones before it in that window, the continuation's summed."""
    window = (list(context_ids) + list(continuation_ids))[-(max_length + 1):]
    with torch.no_grad():
        logits = model(torch.tensor([window[:-1]]))[0].double()
    total = 0.0
    for t in range(len(window) - len(continuation_ids), len(window)):  # the continuation's positions in the window
        total += float(logits[t - 1].log_softmax(-1)[window[t]])  # position t - 1 predicts token t
    return total


def scored(model, tok, request, max_length=CONTEXT):
    return score_requests(model, encoder(tok), [request], tok.eos_id, max_length)[0][0]


def test_a_trailing_space_moves_from_the_context_to_the_continuation(lm, tok):
    encode = encoder(tok)
    assert move_trailing_space("Answer: \n ", "x") == ("Answer:", " \n x")
    ctx, cont = encode_request(encode, Request("Question: boil water?\nAnswer: ", "in a pot"), tok.eos_id)
    assert ctx == encode("Question: boil water?\nAnswer:")
    assert tok.tokenizer.decode(cont) == " in a pot"  # the word keeps its leading space, as BPE saw it in training
    # without the move the model would be asked for other tokens: " " alone, then "in" without its space
    assert encode("Question: boil water?\nAnswer: ") + encode("in a pot") != ctx + cont
    assert scored(lm, tok, Request("Question: boil water?\nAnswer: ", "in a pot")) == pytest.approx(
        by_hand(lm, ctx, cont), abs=1e-4)
    assert scored(lm, tok, Request("Question: boil water?\nAnswer: ", "in a pot")) == \
        scored(lm, tok, Request("Question: boil water?\nAnswer:", " in a pot"))


def test_the_continuation_is_the_whole_strings_tokens_after_the_contexts_count(lm, tok):
    """A token that straddles the boundary ("wa" + "ter" -> one " water" token): lm-eval's split is by count of
    the context's own tokens, so the continuation loses what the merged token took (not encode("ter"))."""
    encode = encoder(tok)
    context, continuation = "Put it in a pot and boil the wa", "ter"
    whole, alone = encode(context + continuation), encode(context)
    assert whole[:len(alone)] != alone  # the boundary token merged across
    ctx, cont = encode_request(encode, Request(context, continuation), tok.eos_id)
    assert ctx == alone and cont == whole[len(alone):] and cont != encode(continuation)
    assert scored(lm, tok, Request(context, continuation)) == pytest.approx(by_hand(lm, ctx, cont), abs=1e-4)


def test_an_empty_context_is_the_end_of_text_token(lm, tok):
    encode = encoder(tok)
    ctx, cont = encode_request(encode, Request("", " went home."), tok.eos_id)
    assert ctx == [tok.eos_id] and cont == encode(" went home.")
    assert scored(lm, tok, Request("", " went home.")) == pytest.approx(by_hand(lm, [tok.eos_id], cont), abs=1e-4)
    # a continuation that starts with the end-of-text token lends it as the context (lm-eval's rule)
    ctx, cont = encode_request(encode, Request("", "<|endoftext|> went home."), tok.eos_id)
    assert ctx == [tok.eos_id] and cont == encode(" went home.")


def test_left_truncation_keeps_the_last_tokens_and_refuses_a_continuation_longer_than_the_context(lm, tok):
    encode = encoder(tok)
    context = "Question: " + "the dog ran to the park and the cat stayed home by the window " * 3 + "\nAnswer:"
    ctx, cont = encode_request(encode, Request(context, " in the sun"), tok.eos_id)
    assert len(ctx) + len(cont) > CONTEXT + 1
    window = model_input(ctx, cont, CONTEXT)
    assert len(window) == CONTEXT and window == (ctx + cont)[-(CONTEXT + 1):-1]
    assert scored(lm, tok, Request(context, " in the sun")) == pytest.approx(by_hand(lm, ctx, cont), abs=1e-4)
    short = 8  # a smaller max_length: the same rule, another window
    assert scored(lm, tok, Request(context, " in the sun"), short) == pytest.approx(by_hand(lm, ctx, cont, short),
                                                                                    abs=1e-4)
    with pytest.raises(RequestError, match="longer than the model's context of 8 tokens"):
        scored(lm, tok, Request("Q:", " the dog ran to the park and the cat stayed home"), short)


def test_batching_and_padding_change_no_value(lm, tok):
    requests = [Request("Question: how do you boil water?\nAnswer:", c) for c in (" pot", " in a pot on the stove",
                                                                                  " freezer")]
    requests.append(Request("", " the dog ran"))
    one = [score_requests(lm, encoder(tok), [r], tok.eos_id, CONTEXT)[0][0] for r in requests]
    batched = [s[0] for s in score_requests(lm, encoder(tok), requests, tok.eos_id, CONTEXT, batch_size=3)]
    assert batched == pytest.approx(one, abs=1e-5)


def test_acc_norm_divides_by_the_choices_length_in_characters():
    """Log-likelihoods -10 and -12 for a 2-character and an 8-character choice: acc picks the first, acc_norm
    (-5 against -1.5) the second. Characters, not bytes: "café" is 4 characters and 5 bytes."""
    item = Item([Request("q", " ab"), Request("q", " abcdefgh")], gold=1, choices=["ab", "abcdefgh"])
    assert item_metrics([-10.0, -12.0], item) == {"acc": 0.0, "acc_norm": 1.0}
    accents = Item([Request("q", " café"), Request("q", " cafe ")], gold=0, choices=["café", "cafe "])
    # per character -8/4 = -2.0 > -10.5/5 = -2.1: the first; per byte -8/5 = -1.6 < -10.5/5 = -2.1 also first, so
    # make the bytes disagree: -8.4/4 = -2.1 (chars) vs -10.2/5 = -2.04 (second); bytes -8.4/5 = -1.68 (first)
    assert item_metrics([-8.4, -10.2], accents)["acc_norm"] == 0.0
    ties = Item([Request("q", " a"), Request("q", " b")], gold=0, choices=["a", "b"])
    assert item_metrics([-1.0, -1.0], ties) == {"acc": 1.0, "acc_norm": 1.0}  # the first among equals


def test_winogrande_is_two_contexts_and_one_continuation():
    doc = {"sentence": "The trophy did not fit in the suitcase because _ was too big.", "option1": "the trophy",
           "option2": "the suitcase", "answer": "1"}
    item = winogrande_item(doc)
    assert [(r.context, r.continuation) for r in item.requests] == [
        ("The trophy did not fit in the suitcase because the trophy", " was too big."),
        ("The trophy did not fit in the suitcase because the suitcase", " was too big.")]
    assert item.gold == 0 and item.choices == [r.context for r in item.requests]
    assert winogrande_item({**doc, "answer": "2"}).gold == 1


def test_winogrande_scores_the_shared_continuation_under_each_context(lm, tok):
    item = winogrande_item({"sentence": "The dog ran to the park because _ wanted to play.", "option1": "the dog",
                            "option2": "the park", "answer": "1"})
    encode = encoder(tok)
    got = score_requests(lm, encode, item.requests, tok.eos_id, CONTEXT)
    for (ll, _), context in zip(got, ["The dog ran to the park because the dog", "The dog ran to the park because "
                                                                                  "the park"]):
        ctx, whole = encode(context), encode(context + " wanted to play.")
        assert ll == pytest.approx(by_hand(lm, ctx, whole[len(ctx):]), abs=1e-4)


def test_hellaswag_preprocessing():
    assert hellaswag_preprocess(" [header] How to clean [title] Mix water.  Then [step] wipe  it. ") == \
        " How to clean. Mix water. Then wipe it."  # the first bracket goes after the strip: its space stays
    doc = {"activity_label": "Home and Garden", "ctx_a": "[header] How to clean a window [title] Mix water and soap.",
           "ctx_b": "then You Wipe", "endings": ["[step] the  glass.", "x", "y", "z"], "label": "0"}
    item = hellaswag_item(doc)
    # ctx_b.capitalize() lowercases all but its first letter; " [title]" becomes ". "; brackets go; double spaces
    assert item.requests[0].context == "Home and Garden: How to clean a window. Mix water and soap. Then you wipe"
    # an ending's leading "[step]" leaves a leading space, so the continuation starts with two (as in lm-eval)
    assert item.choices[0] == " the glass." and item.requests[0].continuation == "  the glass."
    # a context ending in " [title]" keeps a trailing space, which the request moves to the continuation
    trailing = hellaswag_item({**doc, "ctx_a": "Mix water.", "ctx_b": "stir [title]"})
    assert trailing.requests[0].context == "Home and Garden: Mix water. Stir. "
    assert move_trailing_space(trailing.requests[1].context, trailing.requests[1].continuation) == (
        "Home and Garden: Mix water. Stir.", "  x")


def test_the_standard_error_is_lm_evals_mean_stderr_and_chance_the_mean_inverse_choices():
    values = [1.0, 0.0, 0.0, 1.0, 1.0]
    assert mean_stderr(values) == pytest.approx(statistics.stdev(values) / math.sqrt(5), rel=1e-12)
    assert mean_stderr([1.0]) is None
    items = [Item([], 0, ["a", "b"]), Item([], 0, ["a", "b", "c", "d"])]
    assert chance(items) == pytest.approx((0.5 + 0.25) / 2)


# ---- the entry point: refusals, before anything is written -------------------------------------------------------

def _copy_run(tmp_path, name="lm", tokenizer=True):
    run = tmp_path / "runs" / name
    run.mkdir(parents=True)
    shutil.copy(PARITY / "backbone.pt", run / "backbone.pt")
    if tokenizer:
        shutil.copy(PARITY / "tokenizer.json", run / "tokenizer.json")
    return run


def _cfg(tmp_path, *items):
    return load_config("zeroshot", [f"root={PARITY / 'tasks'}", f"runs_root={tmp_path / 'runs'}", "progress=false",
                                    "device=cpu", *items])


def _nothing_written(tmp_path):
    return not list((tmp_path / "runs").rglob("zeroshot-*"))


def test_an_image_backbone_is_refused_in_one_sentence(tmp_path):
    run = tmp_path / "runs" / "vit"
    run.mkdir(parents=True)
    save_backbone(run / "backbone.pt", create_vit("vit_tiny", depth=1, img_size=32, residual="skip"))
    with pytest.raises(BackboneLoadError) as err:
        run_zeroshot(_cfg(tmp_path, f"ckpt={run}"))
    assert "is an image backbone" in str(err.value) and "make zeroshot scores causal language models only" in str(err.value)
    assert "\n" not in user_message(err.value) and _nothing_written(tmp_path)


def test_the_newest_run_must_be_a_language_model(tmp_path):
    (tmp_path / "runs").mkdir()
    with pytest.raises(BackboneLoadError, match="no language-model run with a backbone.pt under"):
        run_zeroshot(_cfg(tmp_path))
    _copy_run(tmp_path)
    with pytest.raises(BackboneLoadError, match="CKPT=random copies the architecture of a language model"):
        run_zeroshot(_cfg(tmp_path, "ckpt=random"))


def test_a_missing_tokenizer_and_one_of_another_vocabulary_are_refused(tmp_path):
    run = _copy_run(tmp_path, tokenizer=False)
    with pytest.raises(ZeroshotError, match="no tokenizer for lm: no tokenizer.json or tokenizer/tokenizer.json beside .* pass tokenizer="):
        run_zeroshot(_cfg(tmp_path, f"ckpt={run}"))
    other = train_bpe(iter(["a small text about nothing at all"] * 3), tmp_path / "other.json", 280)
    with pytest.raises(ZeroshotError, match=r"has a vocabulary of 300 tokens and the tokenizer .* one of \d+"):
        run_zeroshot(_cfg(tmp_path, f"ckpt={run}", f"tokenizer={other}"))
    assert _nothing_written(tmp_path)


def test_make_lms_copy_of_the_tokenizer_in_the_run_folder_is_found(tmp_path):
    run = _copy_run(tmp_path, tokenizer=False)
    (run / "tokenizer").mkdir()
    shutil.copy(PARITY / "tokenizer.json", run / "tokenizer" / "tokenizer.json")
    result = run_zeroshot(_cfg(tmp_path, f"ckpt={run}", "tasks=[piqa]", "limit=1", "random_floor=false"))["lm"]
    assert result["tokenizer"]["path"] == str(run / "tokenizer" / "tokenizer.json")


def test_the_tokenizer_a_backbone_records_is_used_when_its_hash_matches(tmp_path):
    run = _copy_run(tmp_path, tokenizer=False)
    model = load_backbone(run / "backbone.pt")
    tok = load_tokenizer(PARITY / "tokenizer.json")
    save_backbone(run / "backbone.pt", model, extra={"tokenizer": {"path": str(tok.path), "sha256": "0" * 64}})
    with pytest.raises(ZeroshotError, match="has sha256 .* not the 0000"):
        run_zeroshot(_cfg(tmp_path, f"ckpt={run}", "tasks=[piqa]"))
    save_backbone(run / "backbone.pt", model, extra={"tokenizer": {"path": str(tok.path), "sha256": tok.digest}})
    results = run_zeroshot(_cfg(tmp_path, f"ckpt={run}", "tasks=[piqa]", "limit=2"))
    assert list(results) == ["lm", "random"]  # the random floor takes the trained backbone's tokenizer
    assert results["lm"]["tasks"]["piqa"]["n"] == 2 and results["lm"]["tokenizer"]["sha256"] == tok.digest


def test_outputs_json_table_requests_tensorboard_and_the_comparison(tmp_path):
    run = _copy_run(tmp_path)
    results = run_zeroshot(_cfg(tmp_path, f"ckpt={run}", "limit=3"))
    floor = results["random"]
    assert results["lm"]["tasks"]["winogrande"]["acc_norm"] is None and floor["checkpoint"] == "random"
    eval_dir = run / "eval"
    written = json.loads((eval_dir / "zeroshot-demo.json").read_text())
    assert written["mean"] == pytest.approx(sum(t["value"] for t in written["tasks"].values()) / 5, rel=1e-5)
    assert {t["headline"] for t in written["tasks"].values()} == {"acc", "acc_norm"}
    table = (eval_dir / "zeroshot-demo.md").read_text()
    assert "| PIQA | validation | 3 | acc |" in table and "| mean of 5 |" in table
    assert "ARC-Easy and ARC-Challenge: the validation split" in table
    lines = (eval_dir / "zeroshot-demo-requests.jsonl").read_text().splitlines()
    assert len(lines) == sum(t["requests"] for t in written["tasks"].values()) == 6 + 12 + 6 + 12 + 11
    assert list((eval_dir / "tb" / "zeroshot-demo").glob("events.out.tfevents.*"))
    compare = (tmp_path / "runs" / "compare" / "zeroshot-demo.md").read_text()
    assert "| lm |" in compare and "| random |" in compare and "HellaSwag acc_norm" in compare


def test_a_task_file_with_a_wrong_field_names_file_item_and_field(tmp_path):
    bad = tmp_path / "arc.jsonl"
    bad.write_text(json.dumps({"question": "q?", "choices": {"text": ["a", "b"], "label": ["A", "B"]},
                               "answerKey": "C"}) + "\n")
    with pytest.raises(MalformedDatasetError) as err:
        run_zeroshot(_cfg(tmp_path, f"files.arc_easy={bad}", "ckpt=nothing"))
    assert str(err.value) == f"{bad} item 1: field 'answerKey' must be one of the choices' labels ['A', 'B'], got 'C'"
    with pytest.raises(DatasetNotFoundError, match="no piqa file under .*piqa/valid.jsonl, piqa/validation.jsonl"):
        run_zeroshot(load_config("zeroshot", [f"root={tmp_path}", "ckpt=nothing"]))


@pytest.mark.parametrize("item, message", [
    ("tasks=[piqa,piqa]", "tasks names a task twice"),
    ("tasks=[mmlu]", "tasks must be a non-empty list of task names"),
    ("dataset=c4", "dataset must be one of"),
    ("batch_size=0", "batch_size must be an integer >= 1"),
])
def test_bad_settings_are_refused_first(tmp_path, item, message):
    with pytest.raises(ConfigError, match=message):
        run_zeroshot(_cfg(tmp_path, item))


def test_main_says_one_sentence_and_help_lists_the_keys(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([f"root={tmp_path}", "ckpt=nothing"])
    assert str(exit_.value).startswith("error: no piqa file under") and "\n" not in str(exit_.value)
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0 and "tokenizer: null" in capsys.readouterr().out


def test_the_demo_tasks_are_written_from_the_corpus_on_first_use(tmp_path, monkeypatch):
    """DATA=demo (the default): the held-out chapters of the corpus make lm wrote become the five task files under
    data/lm-demo-tasks/ (relative to where the command runs), which are then scored."""
    import random

    from skipless.data.text import bible

    rng = random.Random(0)
    words = "the dog cat sun sea king fish bird tree seed Moses Aaron".split()  # short: the model reads 32 tokens
    chapters = [bible.Chapter(1 + k // 20, f"Book {1 + k // 20}", 1 + k % 20, tuple(
        " ".join(rng.choice(words) for _ in range(rng.randint(9, 10))) + "." for _ in range(8))) for k in range(80)]
    bible.write_bible_corpus(chapters, tmp_path / "corpus")
    run = _copy_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    cfg = load_config("zeroshot", [f"ckpt={run}", f"corpus={tmp_path / 'corpus'}", f"cache={tmp_path / 'nowhere'}",
                                   f"runs_root={tmp_path / 'runs'}", "random_floor=false", "limit=2", "progress=false",
                                   "device=cpu"])
    result = run_zeroshot(cfg)["lm"]
    assert (tmp_path / "data" / "lm-demo-tasks" / "piqa" / "valid-labels.lst").is_file()
    assert {t: (r["n"], r["chance"]) for t, r in result["tasks"].items()} == {
        "piqa": (2, 0.5), "hellaswag": (2, 0.25), "winogrande": (2, 0.5), "arc_easy": (2, 0.25),
        "arc_challenge": (2, 0.25)}
    assert not (tmp_path / "nowhere").exists()  # the corpus was complete: nothing downloaded


def test_an_item_longer_than_the_context_is_refused_or_with_too_long_skip_left_out_and_counted(tmp_path):
    run = _copy_run(tmp_path)
    long = {"goal": "Boil water", "sol1": "pot " * 40, "sol2": "pan", "label": 1}
    short = {"goal": "Boil water", "sol1": "pot", "sol2": "freezer", "label": 0}
    path = tmp_path / "piqa.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in (short, long, short)))
    base = [f"ckpt={run}", f"files.piqa={path}", "tasks=[piqa]", "random_floor=false"]
    with pytest.raises(RequestError, match=r"^1 items have a continuation longer than the 32 tokens lm reads "
                                           r"\(piqa item 2: \d+ tokens\) .* pass too_long=skip"):
        run_zeroshot(_cfg(tmp_path, *base))
    assert _nothing_written(tmp_path)
    result = run_zeroshot(_cfg(tmp_path, *base, "too_long=skip"))["lm"]
    assert (result["tasks"]["piqa"]["n"], result["tasks"]["piqa"]["skipped"]) == (2, 1)
    assert "Left out (too_long=skip: a continuation longer than 32 tokens): PIQA 1 items." in \
        (run / "eval" / "zeroshot-demo.md").read_text()
    logged = [json.loads(line) for line in (run / "eval" / "zeroshot-demo-requests.jsonl").open()]
    assert [r["item"] for r in logged] == [0, 0, 2, 2]  # the file's own item numbers


def test_the_newest_run_of_make_lm_is_found_by_its_arch_and_image_evaluators_pass_it_over(tmp_path):
    """make lm's config.yaml names an LM preset in model.arch and no model.family: the language-model run is the
    default of make zeroshot, and the newest *image* run stays the default of the image evaluators."""
    import os

    from skipless.models.backbone_items import newest_run, run_family

    vit = tmp_path / "runs" / "vit"
    vit.mkdir(parents=True)
    save_backbone(vit / "backbone.pt", create_vit("vit_tiny", depth=1, img_size=32, residual="skip"))
    (vit / "config.yaml").write_text("model:\n  arch: vit_tiny\n")
    run = _copy_run(tmp_path)
    (run / "config.yaml").write_text("model:\n  arch: lm_demo\n  residual: skip\n")
    os.utime(vit / "backbone.pt", (1, 1))  # the LM is the newest run
    assert (run_family(run), run_family(vit)) == ("lm", "vit")
    assert newest_run(tmp_path / "runs") == vit and newest_run(tmp_path / "runs", families=("lm",)) == run
    result = run_zeroshot(_cfg(tmp_path, "tasks=[piqa]", "limit=1", "random_floor=false"))
    assert list(result) == ["lm"]
