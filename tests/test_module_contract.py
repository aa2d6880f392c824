"""The training modules' contract and the start of every optimizer step, written once
(``training/module_contract.py``): DINO, MAE, the supervised classifier and the language model each satisfy
``TrainedModule``; schedules read at the optimizer step (their last value past the end), lr on every group and
weight decay on the weights only, gradients zeroed, and every module begins its step there."""
import ast
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from skipless.optim.param_groups import param_groups
from skipless.training.module_contract import schedule_values, start_step

SRC = Path(__file__).resolve().parents[1] / "src" / "skipless"


def test_each_schedule_is_read_at_the_step_and_keeps_its_last_value_past_the_end():
    schedules = {"lr": [0.0, 1.0, 2.0], "wd": [0.04, 0.05, 0.06], "momentum": [0.9, 0.99, 0.999]}
    assert schedule_values(schedules, 1) == {"lr": 1.0, "wd": 0.05, "momentum": 0.99}
    assert schedule_values(schedules, 7) == {"lr": 2.0, "wd": 0.06, "momentum": 0.999}


def test_the_step_sets_lr_everywhere_decay_on_weights_only_and_zeroes_the_gradients():
    net = nn.Linear(3, 2)
    opt = torch.optim.AdamW(param_groups(net), lr=9.0, weight_decay=9.0)
    net(torch.ones(1, 3)).sum().backward()
    module = SimpleNamespace(global_step=2, schedules={"lr": [1e-4, 2e-4, 3e-4], "wd": [0.1, 0.2, 0.3]},
                             optimizers=lambda: opt)
    step, values, got = start_step(module)
    assert (step, values, got) == (2, {"lr": 3e-4, "wd": 0.3}, opt)
    assert {g["name"]: (g["lr"], g["weight_decay"]) for g in opt.param_groups} == \
        {"decay": (3e-4, 0.3), "no_decay": (3e-4, 0.0)}
    assert all(p.grad is None for p in net.parameters())


def test_every_training_module_begins_its_step_there_and_nowhere_writes_it_again():
    starts = {}
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name == "training_step":
                first = fn.body[0]
                starts[path.relative_to(SRC).as_posix()] = ast.unparse(first.value) if isinstance(first, ast.Assign) else ""
        if path.name not in ("module_contract.py", "param_groups.py"):
            text = path.read_text()
            assert "set_step_values(" not in text and "len(self.schedules" not in text, path
    assert starts == {"ssl/dino/module.py": "start_step(self)", "ssl/mae/module.py": "start_step(self)",
                      "supervised/classifier.py": "start_step(self)", "language/module.py": "start_step(self)"}


def test_dino_mae_the_classifier_and_the_language_model_each_satisfy_the_contract(tmp_path):
    from functools import partial

    from test_mae_run import TINY as MAE_TINY
    from tiny_runs import DINO_TINY, SUP_TINY

    from skipless.config import load_config
    from skipless.pretrain import backbone_factory
    from skipless.ssl import method_of
    from skipless.supervised.classifier import Supervised
    from skipless.training.module_contract import TrainedModule

    modules = []
    for overrides in (DINO_TINY, MAE_TINY):
        cfg = load_config("pretrain", [*overrides, f"run.root={tmp_path}"])
        modules.append(method_of(cfg).module(cfg, partial(backbone_factory, cfg)))
    modules.append(Supervised(load_config("train", [*SUP_TINY, f"run.root={tmp_path}"]), num_classes=3))
    from skipless.language.module import LanguageModel

    lm = load_config("lm", ["model.embed_dim=32", "model.num_heads=2", "model.depth=1", f"run.root={tmp_path}"])
    modules.append(LanguageModel(lm, vocab_size=64))
    for module in modules:
        assert isinstance(module, TrainedModule), type(module).__name__
        assert isinstance(module.exported_backbone(), nn.Module) and isinstance(module.trained_backbone(), nn.Module)
    assert not isinstance(SimpleNamespace(cfg=None, schedules={}), TrainedModule)  # the methods are required too
