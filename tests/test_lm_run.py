"""Whole language-model runs (``make lm``, ``skipless/lm.py``) on a tiny C4-layout corpus: a run trains, validates
and exports a backbone an evaluator can load with its tokenizer; one step of 2 micro-batches of 16 windows is the
step of one batch of 32; a run interrupted by a signal and resumed gives the uninterrupted losses bit for bit; a
diverged run stops naming the lr key."""
from __future__ import annotations

import json
import math
import signal

import lightning.pytorch as pl
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fake_slurm import SignalAt, as_slurm_job
from lm_fixtures import tiny_args, write_corpus
from skipless.config import load_config
from skipless.data.text import load_tokenizer
from skipless.errors import EXIT_PREEMPTED
from skipless.lm import main, run_dir_of, train
from skipless.models import load_backbone
from skipless.models.causal_lm import CausalLM
from skipless.training.divergence import DivergenceError
from skipless.training.micro_batches import MicroBatches
from tiny_runs import Losses, PoisonAt


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """(corpus root, cache folder): the tokenizer and token streams are built by the first run and reused."""
    root = tmp_path_factory.mktemp("lm-data")
    return write_corpus(root / "c4"), root / "cache"


def test_a_tiny_run_trains_validates_and_exports_a_model_with_its_tokenizer(tmp_path, data, capsys):
    losses = Losses()
    assert main(tiny_args(data, tmp_path), extra_callbacks=[losses]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "lm-skipless-adamw-c4"
    assert len(losses.values) == 6 and all(math.isfinite(v) for v in losses.values)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 6
    val = summary["val"]
    assert val["step"] == 6 and val["first"]["step"] == 0 and math.isfinite(val["loss"])
    assert val["perplexity"] == pytest.approx(math.exp(val["loss"]))
    tokenizer = load_tokenizer(run / "tokenizer")  # the run's own copy of its tokenizer
    # at init the model's logits are near 0: the first validation is about ln(vocabulary)
    assert val["first"]["loss"] == pytest.approx(math.log(tokenizer.vocab_size), abs=0.2)
    assert val["loss"] < val["first"]["loss"]
    events = EventAccumulator(str(run / "tb")).Reload()
    assert [e.step for e in events.Scalars("val/loss")] == [0, 3, 6]
    assert [e.step for e in events.Scalars("val/perplexity")] == [0, 3, 6]
    assert {"train/loss", "watch/schedule/lr", "watch/speed/tokens_per_s"} <= set(events.Tags()["scalars"])
    assert all(e.value > 0 for e in events.Scalars("watch/speed/tokens_per_s"))
    model = load_backbone(run / "backbone.pt")
    assert isinstance(model, CausalLM) and model.skipless_args["family"] == "lm"
    assert (model.skipless_args["residual"], model.skipless_args["init"]) == ("skipless", "cutskip")
    assert model.vocab_size == tokenizer.vocab_size and model.context == 16
    extra = torch.load(run / "backbone.pt", map_location="cpu", weights_only=True)["extra"]
    assert extra["step"] == 6 and extra["tokenizer"]["sha256"] == tokenizer.digest
    assert extra["tokenizer"]["vocab_size"] == tokenizer.vocab_size and extra["tokenizer"]["name"] == "bible-bpe4k"
    # the header and the closing lines
    assert "tokenizer bible-bpe4k" in out and "6 steps of 64 tokens = 4 sequences" in out
    assert "not scaled with the batch" in out and "linear warm-up 2 steps, cosine to 0.1 x lr at step 6" in out
    assert "step 0: val loss" in out and f"validation at step 6: loss {val['loss']:.4f}" in out


class StepRecord(pl.Callback):
    """The first step's loss, the gradients the optimizer receives and how the batch was dealt."""

    def __init__(self):
        self.loss, self.grads, self.dealt = None, {}, None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if trainer.global_step == 0:
            self.grads = {n: p.grad.detach().clone() for n, p in pl_module.model.named_parameters()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.loss is None:
            self.loss = float(outputs["loss"] if isinstance(outputs, dict) else outputs)
            self.dealt = len(batch) if isinstance(batch, MicroBatches) else None


def test_a_step_of_two_micro_batches_is_the_step_of_one_batch(tmp_path, data):
    """Gradients to float tolerance, the loss and the weights after the step; AdamW's eps 1e-4 keeps an entry whose
    gradient is rounding noise from stepping by +-lr on the noise's sign (tests/test_accumulation.py says why)."""
    runs = {}
    for name, extra in (("whole", ["train.batch_size_per_device=32"]),
                        ("accumulated", ["train.batch_size_per_device=16", "train.global_batch=32"])):
        record = StepRecord()
        cfg = load_config("lm", tiny_args(data, tmp_path, f"run.name={name}", "train.max_steps=1", "optim.eps=1e-4",
                                          "optim.warmup_steps=0", *extra))
        trainer, module = train(cfg, extra_callbacks=[record])
        assert trainer.global_step == 1
        runs[name] = (module, record)
    (whole, r1), (accumulated, r2) = runs["whole"], runs["accumulated"]
    assert (r1.dealt, r2.dealt) == (None, 2)
    assert r1.loss == pytest.approx(r2.loss, rel=1e-6)
    assert r1.grads.keys() == r2.grads.keys()
    for name, g in r1.grads.items():
        torch.testing.assert_close(r2.grads[name], g, rtol=1e-4, atol=1e-7, msg=lambda m: f"{name}: {m}")
    for (name, a), b in zip(whole.model.state_dict().items(), accumulated.model.state_dict().values()):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6, msg=lambda m: f"{name}: {m}")


def test_a_run_interrupted_by_a_signal_resumes_with_the_straight_losses_bit_for_bit(tmp_path, data, monkeypatch):
    """SIGUSR1 at step 3 (mid-epoch: 75 windows make 18 steps an epoch) writes last.ckpt with the loader's position;
    the resumed run trains the very windows the straight one does, and validates alike."""
    as_slurm_job(monkeypatch, None)
    args = tiny_args(data, tmp_path, "train.num_workers=1")

    def run(*extra, callbacks=()):
        losses = Losses()
        return main([*args, *extra], extra_callbacks=[losses, *callbacks]), losses.values

    code, straight = run("run.name=straight")
    assert code == 0 and len(straight) == 6
    code, first = run("run.name=r", callbacks=[SignalAt(3, signal.SIGUSR1)])
    assert code == EXIT_PREEMPTED and len(first) == 4
    ckpt = torch.load(tmp_path / "r" / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["global_step"] == 4 and ckpt["callbacks"]["LoaderPosition"]["batches_done"] == 4
    code, second = run("run.name=r", "run.resume=true")
    assert code == 0 and first + second == straight
    vals = [json.loads((tmp_path / name / "summary.json").read_text())["val"] for name in ("straight", "r")]
    assert vals[0] == vals[1]


def test_a_diverged_run_stops_naming_the_lr_key(tmp_path, data):
    cfg = load_config("lm", tiny_args(data, tmp_path, "model=skip"))
    with pytest.raises(DivergenceError, match=r"diverged at step 2 .* for model skip \(residual skip, init fla\) with "
                                              r"adamw at peak lr 0\.001 \(model\.lr\.adamw=0\.001, not scaled with the "
                                              r"batch\); .*lower model\.lr\.adamw to a third"):
        train(cfg, extra_callbacks=[PoisonAt(2)])
    assert not (run_dir_of(cfg) / "backbone.pt").exists()


@pytest.mark.parametrize("extra, message", [
    (["data.tokenizer=path:/no/such/tokenizer.json"], "tokenizer /no/such/tokenizer.json does not exist"),
    (["model.vocab_size=100"], "model.vocab_size=100 is smaller than the vocabulary of tokenizer bible-bpe4k"),
    (["data.shards=3"], "data.shards=3 asks for more shards than the 2 in"),
    (["model.context=1024", "train.batch_size_per_device=32"],
     "the C4 en training stream holds 18 windows of model.context=1024 tokens, fewer than one optimizer step of 32"),
    (["model.context=4096"], "the validation split of C4 en holds 2,500 tokens, fewer than one window of "
                             "model.context + 1 = 4,097"),
])
def test_what_the_data_refuses_is_one_sentence_before_the_run_folder(tmp_path, data, capsys, extra, message):
    assert main(tiny_args(data, tmp_path / "runs", *extra)) == 1
    said = [line for line in capsys.readouterr().err.splitlines() if line.strip() and "tokenizing" not in line]
    assert len(said) == 1 and said[0].startswith("error: ") and message in said[0], said
    assert not (tmp_path / "runs").exists()


def test_a_run_is_not_resumed_with_another_tokenizer_file(tmp_path, data, capsys):
    import shutil

    from skipless.data.text import build_tokenizer

    own = tmp_path / "tok" / "tokenizer.json"
    own.parent.mkdir()
    shutil.copyfile(build_tokenizer("bible-bpe4k", data[0], data[1] / "tokenizers", data[1] / "downloads").path, own)
    args = tiny_args(data, tmp_path / "runs", f"data.tokenizer=path:{own}", "train.max_steps=1")
    assert main(args) == 0
    own.write_text(own.read_text() + "\n")  # the same vocabulary, another file
    assert main([*args, "run.resume=true", "train.max_steps=2"]) == 1
    err = capsys.readouterr().err
    assert "RESUME=1 would continue" in err and "but the run trained with" in err and "tokenizer/tokenizer.json" in err
