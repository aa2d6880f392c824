"""What the conditioning monitor draws in TensorBoard says what diagnostics.jsonl says (issue 27, item 3):
an infinite kappa is a visible point, a Lanczos result that did not converge is a lower bound under its own tag."""
import json
import math
from types import SimpleNamespace

import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from skipless.analysis.condition_number import NUMERICALLY_ZERO, Condition, infinite_condition
from skipless.analysis.diagnostics import DiagnosticSettings, Diagnosis
from skipless.analysis.tensorboard_values import tensorboard_values
from skipless.training import diagnostics_callbacks

F32_MAX = float(np.finfo(np.float32).max)


def _found() -> Diagnosis:
    """kappa(J J^T) infinite; block 0's attention stopped at max_iter (a bound), its MLP converged."""
    bound = Condition(5.6e8, None, 5.6e2, 1e-6, 1e-3, 1e-4, 300, 7104, False, "lanczos")
    value = Condition(207.0, None, 2.07, 0.01, 1e-6, 1e-6, 40, 7104, True, "lanczos")
    return Diagnosis([0], 2, 37, jacobian=infinite_condition(NUMERICALLY_ZERO, 7104),
                     block_jacobians={0: {"attn": bound, "mlp": value}},
                     embeddings={0: {"attn": math.inf, "attn+skip": 1.5}}, effective_rank={0: {"cls": 1.7}})


def test_infinity_and_a_bound_are_each_drawn_under_their_own_tag():
    drawn = tensorboard_values(_found())
    assert drawn == {"kappa_JJt/infinite": F32_MAX, "kappa_attn/block0/lower_bound": 5.6e8, "kappa_mlp/block0": 207.0,
                     "emb_log_kappa_attn/block0/infinite": F32_MAX, "emb_log_kappa_attn+skip/block0": 1.5,
                     "eff_rank_cls/block0": 1.7}


def test_tensorboards_names_are_short_enough_for_its_cards_and_name_each_quantity_once():
    """The longest tag the monitor writes is 53 characters, 67 before (issue 35 saw a card cut it to
    ``watch/conditioning/embedding_log_k…/block7``), and the short names are one-to-one with the jsonl's."""
    from skipless.analysis.diagnostics import named_values
    from skipless.analysis.tensorboard_values import GROUP, tensorboard_name
    names = [n for n, _ in named_values(_found())] + ["embedding_log_kappa_mlp+skip/block11"]
    assert len({tensorboard_name(n) for n in names}) == len(names)
    longest = max(len(f"{GROUP}/{tensorboard_name(n)}/lower_bound") for n in names)
    assert longest <= 53, longest


def test_the_monitor_writes_both_to_tensorboard_and_the_jsonl_says_the_same(tmp_path, monkeypatch):
    monkeypatch.setattr(diagnostics_callbacks, "diagnose", lambda *a, **k: _found())
    logger = TensorBoardLogger(save_dir=str(tmp_path), name="", version="tb")
    trainer = SimpleNamespace(loggers=[logger], global_step=0)
    module = SimpleNamespace(trained_backbone=lambda: None, device=torch.device("cpu"))
    monitor = diagnostics_callbacks.ConditioningMonitor(lambda: torch.zeros(2, 3, 32, 32), DiagnosticSettings(),
                                                        every=1, run_dir=tmp_path)
    monitor._measure(trainer, module, 0)
    logger.finalize("success")
    events = EventAccumulator(str(tmp_path / "tb")).Reload()
    tags = set(events.Tags()["scalars"])
    assert [e.value for e in events.Scalars("watch/cond/kappa_JJt/infinite")] == [F32_MAX]
    assert "watch/cond/kappa_JJt" not in tags
    assert [e.value for e in events.Scalars("watch/cond/kappa_attn/block0/lower_bound")] == [5.6e8]
    assert "watch/cond/kappa_attn/block0" not in tags
    row = json.loads((tmp_path / "diagnostics.jsonl").read_text())
    assert row["jacobian"]["value"] == "inf" and row["jacobian"]["reason"] == NUMERICALLY_ZERO
    assert row["block_jacobians"]["0"]["attn"]["converged"] is False
