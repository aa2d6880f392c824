"""The diagnostics callbacks of a pretraining run: what they log, and that observing changes nothing."""
import json

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from skipless.analysis.tensorboard_values import INFINITY_DRAWN, tensorboard_name
from skipless.config import load_config
from skipless.models import load_backbone
from skipless.pretrain import pretrain, run_dir_of

TINY = [
    "model=skipless", "model.arch=vit_tiny", "model.depth=2",
    "dino.out_dim=64", "dino.hidden_dim=64", "dino.bottleneck_dim=32",
    "dino.global_crop_size=32", "dino.local_crop_size=16", "dino.local_crops_number=2",
    "data.n_train=16", "data.n_val=8", "train.epochs=2", "train.knn_every_n_epochs=0",
    "train.batch_size_per_device=4", "train.num_workers=0", "train.log_every_n_steps=1", "optim.warmup_epochs=1",
]
WATCHED = ["diagnostics.every_n_epochs=1", "diagnostics.signals_every_n_steps=2", "diagnostics.layers=all",
           "diagnostics.images=4", "diagnostics.max_iter=80", "diagnostics.budget_s=null"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same tiny run twice: watched by both callbacks, and with both off."""
    root = tmp_path_factory.mktemp("diagnostics")
    data = root / "data"
    common = [*TINY, f"data.root={data}", f"run.root={root / 'runs'}"]
    watched = load_config("pretrain", [*common, "run.name=watched", *WATCHED])
    plain = load_config("pretrain", [*common, "run.name=plain", "diagnostics.every_n_epochs=0",
                                     "diagnostics.signals_every_n_steps=0"])
    pretrain(watched)
    pretrain(plain)
    return run_dir_of(watched), run_dir_of(plain)


def test_observing_a_run_does_not_change_it(runs):
    watched, plain = (load_backbone(r / "backbone.pt").state_dict() for r in runs)
    for name, value in plain.items():
        torch.testing.assert_close(watched[name], value, rtol=0, atol=0, msg=name)


def test_conditioning_is_measured_at_the_start_and_every_epoch(runs):
    rows = [json.loads(line) for line in (runs[0] / "diagnostics.jsonl").read_text().splitlines()]
    assert [(r["epoch"], r["step"]) for r in rows] == [(0, 0), (1, 4), (2, 8)]
    for r in rows:
        assert r["blocks"] == [0, 1] and r["images"] == 4
        assert isinstance(r["jacobian"]["value"], float) and r["jacobian"]["value"] >= 1
        assert set(r["block_jacobians"]) == {"0", "1"} and set(r["embeddings_log_kappa"]["1"]) == {
            "in", "attn", "attn+skip", "mlp", "mlp+skip"}
    assert rows[0]["jacobian"]["value"] != rows[-1]["jacobian"]["value"]  # the student moved
    assert not (runs[1] / "diagnostics.jsonl").exists()


def test_tensorboard_has_the_conditioning_curves_and_the_block_signals(runs):
    events = EventAccumulator(str(runs[0] / "tb")).Reload()
    tags = set(events.Tags()["scalars"])
    assert "watch/cond/eff_rank_cls/block1" in tags
    for name in ("grad_norm", "update_ratio", "attention_entropy", "attention_diagonal", "token_cosine", "token_norm"):
        assert {f"watch/signals/{name}/block0", f"watch/signals/{name}/block1"} <= tags, name
    steps = [e.step for e in events.Scalars("watch/signals/update_ratio/block0")]
    assert steps == [1, 3, 5, 7]  # measured at the batches of global steps 0, 2, 4, 6, logged after their update
    ratios = [e.value for e in events.Scalars("watch/signals/update_ratio/block0")]
    assert ratios[0] == 0 and all(r > 0 for r in ratios[1:])  # the warm-up's lr is 0 at step 0
    drawn = {t: [(e.step, e.value) for e in events.Scalars(t)] for t in tags if "kappa_JJt" in t}
    assert sorted(step for points in drawn.values() for step, _ in points) == [0, 4, 8]
    plain = set(EventAccumulator(str(runs[1] / "tb")).Reload().Tags()["scalars"])
    assert not any(t.startswith(("watch/signals/", "watch/cond/")) for t in plain)


def test_tensorboard_draws_each_kappa_as_the_jsonl_reports_it(runs):
    """A converged kappa under its name, ∞ under ``<name>/infinite``, a Lanczos bound under
    ``<name>/lower_bound`` (issue 27, item 3)."""
    scalars = EventAccumulator(str(runs[0] / "tb")).Reload().Scalars
    for row in (json.loads(line) for line in (runs[0] / "diagnostics.jsonl").read_text().splitlines()):
        kappas = {"kappa_JJt": row["jacobian"]} | {f"kappa_{k}/block{b}": c for b, r in row["block_jacobians"].items()
                                                    for k, c in r.items()}
        for name, c in kappas.items():
            tag = f"watch/cond/{tensorboard_name(name)}" + ("/infinite" if c["value"] == "inf" else
                                                  "" if c["converged"] else "/lower_bound")
            value = INFINITY_DRAWN if c["value"] == "inf" else c["value"]
            assert (row["step"], pytest.approx(value, rel=1e-6)) in [(e.step, e.value) for e in scalars(tag)], tag


def test_the_training_losses_are_tensorboards_first_group(runs):
    """TensorBoard's Time Series sorts its groups (a tag's first path component) by name and opens the
    first two: the losses come first, everything watched about the run after them (issue 27, item 3)."""
    tags = EventAccumulator(str(runs[0] / "tb")).Reload().Tags()["scalars"]
    groups = sorted({t.split("/", 1)[0] for t in tags})
    assert groups[0] == "train" and set(groups) == {"train", "watch"}
