"""make zeroshot against lm-evaluation-harness: on a tiny fixed model and tiny task files, the requests, every
request's log-likelihood and greedy flag, every item's acc / acc_norm and every task's metrics and standard errors
are those lm-eval 0.4.13 computed (recorded once in ``tests/zeroshot_parity/lmeval.json`` by
``tests/zeroshot_parity/record.py``, which says how; lm-eval is no dependency of the suite). Through the functions
and through the entry point, whose result files are read back."""
import json
from pathlib import Path

import pytest

from skipless.data.text.tasks import TASKS, load_task
from skipless.data.text.tokenizer import load_tokenizer
from skipless.eval.zeroshot.harness import score_requests
from skipless.eval.zeroshot.run import run_zeroshot
from skipless.eval.zeroshot.tasks import TASK_SPECS, item_metrics
from skipless.config import load_config
from skipless.models.checkpoint import load_backbone

HERE = Path(__file__).resolve().parent / "zeroshot_parity"
RECORDED = json.loads((HERE / "lmeval.json").read_text())


@pytest.fixture(scope="module")
def scored():
    tokenizer = load_tokenizer(HERE / "tokenizer.json")
    model = load_backbone(HERE / "backbone.pt").eval()
    out = {}
    for task in TASKS:
        items = [TASK_SPECS[task].item(d) for d in load_task(task, HERE / "tasks").docs]
        requests = [r for item in items for r in item.requests]
        scores = score_requests(model, lambda t: tokenizer.encode_batch([t])[0], requests, tokenizer.eos_id,
                                RECORDED["context"], batch_size=4)
        out[task] = (items, requests, scores)
    return out


@pytest.mark.parametrize("task", TASKS)
def test_requests_and_their_log_likelihoods_are_lm_evals(scored, task):
    items, requests, scores = scored[task]
    recorded = RECORDED["tasks"][task]["items"]
    assert [(r.context, r.continuation) for r in requests] == [tuple(a) for i in recorded for a in i["requests"]]
    expected = [ll for i in recorded for ll in i["loglikelihoods"]]
    assert [s[0] for s in scores] == pytest.approx(expected, abs=1e-5, rel=0)
    assert [s[1] for s in scores] == [g for i in recorded for g in i["greedy"]]
    at = 0
    for item, rec in zip(items, recorded):
        values = item_metrics([s[0] for s in scores[at:at + len(item.requests)]], item)
        at += len(item.requests)
        assert {m: values[m] for m in ("acc", "acc_norm") if m in rec} == {m: rec[m] for m in ("acc", "acc_norm")
                                                                            if m in rec}


def test_the_fixture_reaches_the_sharp_edges():
    """The recorded requests include a context lm-eval left empty, a context that ended in a space (moved: the
    continuation starts with two spaces) and requests longer than the model's context (left truncation)."""
    requests = [tuple(a) for t in RECORDED["tasks"].values() for i in t["items"] for a in i["requests"]]
    assert ("", " went to the store to buy bread and milk.") in requests
    assert any(cont.startswith("  ") for ctx, cont in requests)
    tokenizer = load_tokenizer(HERE / "tokenizer.json")
    lengths = [len(tokenizer.encode_batch([c + x])[0]) for c, x in requests]
    assert sum(n > RECORDED["context"] + 1 for n in lengths) >= 10 and min(lengths) <= RECORDED["context"]


def test_the_entry_point_writes_lm_evals_metrics_and_stderrs(tmp_path):
    """The whole command on the fixture's backbone file: its tokenizer is found beside it, and results.json holds
    lm-eval's acc, acc_norm and their standard errors per task (None where lm-eval reports no acc_norm)."""
    cfg = load_config("zeroshot", [f"ckpt={HERE / 'backbone.pt'}", f"root={HERE / 'tasks'}", f"out={tmp_path}",
                                   "random_floor=false", "progress=false", "device=cpu", "batch_size=5"])
    results = run_zeroshot(cfg)
    assert list(results) == ["zeroshot_parity"]
    written = json.loads((tmp_path / "zeroshot_parity" / "zeroshot-demo.json").read_text())
    for task in TASKS:
        got, want = written["tasks"][task], RECORDED["tasks"][task]["metrics"]
        assert got["n"] == RECORDED["tasks"][task]["n"]
        for m in ("acc", "acc_stderr", "acc_norm", "acc_norm_stderr"):
            assert got[m] == (pytest.approx(want[m], abs=1e-6) if m in want else None), (task, m)
    logged = [json.loads(line) for line in (tmp_path / "zeroshot_parity" / "zeroshot-demo-requests.jsonl").open()]
    expected = [ll for t in TASKS for i in RECORDED["tasks"][t]["items"] for ll in i["loglikelihoods"]]
    assert [r["loglikelihood"] for r in logged] == pytest.approx(expected, abs=1e-5, rel=0)
