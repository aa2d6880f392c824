"""Result files a reader takes as a description: floats rounded to what they mean, a backbone's arguments
without those its model does not read (``eval/shared/report.py``, ``models.applicable_args``)."""
import json
import math

from skipless.eval.shared.report import SIGNIFICANT, result_json, rounded, shown_args
from skipless.models import create_vit


def test_floats_keep_six_significant_digits_at_any_depth_and_other_values_stay():
    obj = {"corloc": {"11": 57.49999999999999, "3": 1 / 3}, "lrs": [1e-4, 0.30000000000000004], "n": 7,
           "tiny": 1.234567891e-9, "inf": math.inf, "name": "vit_small", "ok": True}
    back = json.loads(result_json(obj))
    assert back["corloc"] == {"11": 57.5, "3": 0.333333} and back["lrs"] == [0.0001, 0.3]
    assert back["tiny"] == 1.23457e-9 and back["inf"] == math.inf and back["n"] == 7 and back["ok"] is True
    assert SIGNIFICANT == 6 and rounded((2.0000001, "a")) == [2.0, "a"]


def test_shown_args_drop_the_decays_keys_outside_decayed_and_cutskips_outside_cutskip():
    skipless = shown_args(create_vit("vit_tiny", residual="skipless", img_size=32, depth=1).skipless_args)
    assert not {"alpha_min", "decay_indexing", "decay_branches", "decay_zero_init", "init_args",
                "token_graying"} & set(skipless)
    assert skipless["residual"] == "skipless" and skipless["depth"] == 1
    decayed = shown_args(create_vit("vit_tiny", residual="decayed", init="cutskip", alpha_min=0.5, img_size=32,
                                    depth=1).skipless_args)
    assert decayed["alpha_min"] == 0.5 and "decay_zero_init" in decayed and decayed["init_args"]["alpha"] == 1.8
