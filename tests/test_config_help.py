"""``--help`` and ``-h`` of every entry point that reads ``key=value`` items (issue 47): one place answers them,
``load_config``, which prints the program's usage, its config file, its groups with their choices and every
key with its default, then exits with status 0 before anything is written. A bad item still ends in its one
sentence. Each entry point's ``main`` runs in this process, its module standing in as ``__main__`` as
``python -m`` makes it (``tests/test_install.py`` runs one from an installed wheel)."""
import importlib
import sys

import pytest
from omegaconf import OmegaConf

from skipless.config import CONFIG_DIR, load_config

# python -m <module> -> the entry of configs/<entry>.yaml
ENTRY_POINTS = {
    **{f"skipless.eval.{name}.__main__": name
       for name in ("knn", "linear", "pca", "probe", "tokencut", "tsne", "conditioning")},
    "skipless.pretrain": "pretrain", "skipless.train": "train", "skipless.finetune": "finetune", "skipless.lm": "lm",
    "paper.__main__": "paper",
}


def _help(monkeypatch, tmp_path, capsys, module_name: str, argv: list[str]) -> str:
    """What ``python -m <module_name> <argv>`` prints, run in ``tmp_path``; asserts exit status 0 and that
    nothing was written there."""
    module = importlib.import_module(module_name)
    monkeypatch.setitem(sys.modules, "__main__", module)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        module.main(argv)
    assert stop.value.code == 0
    assert list(tmp_path.iterdir()) == [], "--help wrote files"
    return capsys.readouterr().out


@pytest.mark.parametrize("module_name", sorted(ENTRY_POINTS))
def test_help_prints_usage_config_groups_and_keys(module_name, monkeypatch, tmp_path, capsys):
    entry = ENTRY_POINTS[module_name]
    out = _help(monkeypatch, tmp_path, capsys, module_name, ["--help"])
    usage = sys.modules[module_name].__doc__.strip().split("\n")[0].replace("``", "")
    assert out.startswith(usage)
    assert f"config: {CONFIG_DIR / f'{entry}.yaml'}" in out
    own = OmegaConf.load(CONFIG_DIR / f"{entry}.yaml")
    for group in own.get("defaults") or {}:
        assert f"\n  {group}=" in out, f"group {group} not listed"
    for key in own:
        if key not in ("defaults", "base"):
            assert f"\n  {key}:" in out, f"key {key} not listed"


def test_help_lists_the_choices_and_follows_the_groups_given(monkeypatch, tmp_path, capsys):
    out = _help(monkeypatch, tmp_path, capsys, "skipless.pretrain", ["ssl=mae", "-h"])
    assert "\n  ssl=mae  (choices: dino, mae)\n" in out
    assert "\n  recipe=demo  (choices: demo, paper)\n" in out  # MAE's recipes, by their scale
    assert "\n  mae:\n" in out and "\n  dino:\n" not in out
    assert "\n    mask_ratio: 0.75\n" in out


def test_load_config_answers_help_for_any_caller(capsys):
    with pytest.raises(SystemExit) as stop:
        load_config("knn", ["ks=[5]", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "\n  global_features=dino  (choices: dino)\n" in out and "\n  ks: [10, 20, 100, 200]\n" in out


def test_a_bad_item_still_ends_in_one_sentence(monkeypatch, tmp_path, capsys):
    knn = importlib.import_module("skipless.eval.knn.__main__")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        knn.main(["--halp"])
    assert stop.value.code == "error: override '--halp' is not of the form key=value (--help lists the keys)"
    pretrain = importlib.import_module("skipless.pretrain")
    assert pretrain.main(["--halp"]) == 1
    err = capsys.readouterr().err
    assert err == "error: override '--halp' is not of the form key=value (--help lists the keys)\n"
    assert list(tmp_path.iterdir()) == []
