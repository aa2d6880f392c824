"""Every evaluator checks its settings and its output folders before it loads a backbone, reads data or
writes a file (eval/shared/settings_rules.py, eval/shared/output_dirs.py), and writes to out=<folder> when asked."""
import json
import os
import stat

import numpy as np
import pytest
from PIL import Image

from skipless.eval.pca import run as pca
from skipless.eval.probe import compute as probe_compute, run as probe, settings as probe_settings
from skipless.eval.tokencut import run as tokencut
from skipless.eval.shared.settings_rules import check_rules
from skipless.config import ConfigError, leaf_values, load_config
from skipless.config.rules import integer, non_empty_list, number, one_of, optional

from eval_fixtures import tiny_run

EVALUATORS = {"probe": probe.main, "tokencut": tokencut.main, "pca": pca.main}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("settings")
    return (root, *tiny_run(root, n_train=4, n_val=3, seed=1, img_size=32))


def _argv(name, root, data, run, *extra):
    common = [f"ckpt={run}", f"runs_root={root / 'runs'}", "device=cpu", f"roots.default={data}"]
    quick = {"probe": ["epochs=1", "lrs=[1e-3]", "batch_size=2", "num_workers=0", "progress=false", "figure_images=0",
                       "datasets.default.resolution=32", "datasets.default.train_subset=null", "extract_batch_size=4"],
             "tokencut": ["num_workers=0", "figure_images=1", "max_images=2"],
             "pca": ["num_images=2", "image_size=32"]}[name]
    return common + quick + list(extra)


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture()
def nothing_loaded(monkeypatch):
    """Loading a backbone or reading data fails the test: the refusal must come before."""
    def refuse(*args, **kwargs):
        raise AssertionError("a backbone was loaded or data read before the settings were checked")

    for module, name in ((probe_compute, "load_spec"), (probe, "build_split"), (tokencut, "load_spec"),
                         (tokencut, "build_discovery"), (pca, "load_spec"), (pca, "load_images")):
        monkeypatch.setattr(module, name, refuse)


BAD = [
    ("probe", "epochs=0", "epochs must be an integer >= 1, got 0"),
    ("probe", "lrs=[.nan]", "lrs must be a non-empty list of finite numbers > 0, got [nan]"),
    ("probe", "lrs=[nan]", "lrs must be a non-empty list of finite numbers > 0, got [nan]"),
    ("probe", "lrs=[1e-3,-1e-2]", "lrs must be a non-empty list of finite numbers > 0, got [0.001, -0.01]"),
    ("probe", "batch_size=0", "batch_size must be an integer >= 1, got 0"),
    ("probe", "val_every=-1", "val_every must be an integer >= 0, got -1"),
    ("probe", "weight_decay=-0.1", "weight_decay must be a finite number >= 0, got -0.1"),
    ("probe", "weight_decay=.inf", "weight_decay must be a finite number >= 0, got inf"),
    ("probe", "figure_images=-2", "figure_images must be an integer >= 0, got -2"),
    ("probe", "ms_blocks=0", "ms_blocks must be an integer >= 1, got 0"),
    ("probe", "resolution=big", "resolution must be null or an integer >= 1, got 'big'"),
    ("probe", "datasets.default.train_subset=0", "datasets.default.train_subset must be null or an integer >= 1"),
    ("probe", "cache=ram", "cache must be one of disk, memory, got 'ram'"),
    ("probe", "multiscale=2", "multiscale must be one of 0, 1, both, got 2"),
    ("probe", "num_workers=-1", "num_workers must be null or an integer >= 0, got -1"),
    ("probe", "extract_batch_size=0", "extract_batch_size must be an integer >= 1, got 0"),
    ("probe", "bn=maybe", "bn must be true or false, got 'maybe'"),
    ("probe", "cache=memory keep_cache=true", "keep_cache=true keeps disk caches only"),
    ("tokencut", "tau=1.5", "tau must be a number in (-1, 1), got 1.5"),
    ("tokencut", "tau=.nan", "tau must be a number in (-1, 1), got nan"),
    ("tokencut", "eps=0", "eps must be a number in (0, 1), got 0"),
    ("tokencut", "figure_images=-1", "figure_images must be an integer >= 0, got -1"),
    ("tokencut", "num_workers=-1", "num_workers must be an integer >= 0, got -1"),
    ("tokencut", "max_images=0", "max_images must be null or an integer >= 1, got 0"),
    ("tokencut", "solver=magma", "solver must be one of auto, torch, lapack, scipy, got 'magma'"),
    ("tokencut", "solver_dtype=float16", "solver_dtype must be one of float64, float32, got 'float16'"),
    ("tokencut", "feature=attn", "feature must be one of k, q, v, out, got 'attn'"),
    ("tokencut", "norm=true", "norm=true applies to feature=out only, got feature='k'"),
    ("tokencut", "layers=last", "layers must be all or a block index"),
    ("pca", "num_images=0", "num_images must be an integer >= 1, got 0"),
    ("pca", "image_size=0", "image_size must be an integer >= 1, got 0"),
    ("pca", "foreground_threshold=1.5", "foreground_threshold must be null or a number in [0, 1), got 1.5"),
    ("pca", "seed=-1", "seed must be an integer >= 0, got -1"),
    ("pca", "compare_layer=[1,2]", "compare_layer must be a block index"),
]


@pytest.mark.parametrize("name, extra, message", BAD)
def test_a_bad_value_is_one_sentence_before_anything_is_loaded_or_written(setup, nothing_loaded, name, extra,
                                                                          message):
    root, data, run = setup
    before = _files(root)
    with pytest.raises(SystemExit) as err:
        EVALUATORS[name](_argv(name, root, data, run, *extra.split()))
    text = str(err.value)
    assert text.startswith("error: ") and message in text and "\n" not in text
    assert _files(root) == before, "nothing is written before the settings are checked"


@pytest.mark.parametrize("name", EVALUATORS)
def test_every_config_key_has_a_rule(name):
    """A key added to a config without a rule would go unchecked: each evaluator's table covers every key."""
    cfg = load_config(name, [])
    rules = {"probe": lambda: {k for d in cfg.datasets for k in probe_settings.rules_for(d)},
             "tokencut": lambda: {k for d in cfg.roots for k in tokencut.rules_for(d)},
             "pca": lambda: set(pca.RULES)}[name]()
    leaves = {k for k in leaf_values(cfg) if not k.startswith("choices")}
    assert leaves - rules == set(), f"keys of configs/{name}.yaml without a rule"
    assert rules - leaves == set(), f"rules of {name} for keys its config does not have"


def test_rules_refuse_nan_inf_bools_and_name_the_key():
    rules = {"a.b": number(0, low_open=True), "n": integer(1), "c": one_of("x", "y"), "l": optional(
        non_empty_list(number(0), "numbers >= 0"))}
    good = {"a": {"b": 0.5}, "n": 3, "c": "y", "l": None}
    check_rules(load_from(good), rules)
    for change, message in ((("a", {"b": float("nan")}), "a.b must be a finite number > 0, got nan"),
                            (("n", True), "n must be an integer >= 1, got true"),
                            (("n", 2.0), "n must be an integer >= 1, got 2.0"),
                            (("c", "z"), "c must be one of x, y, got 'z'"),
                            (("l", []), "l must be null or a non-empty list of numbers >= 0, got []")):
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
            check_rules(load_from({**good, change[0]: change[1]}), rules)


def test_an_empty_ckpt_means_the_newest_run_as_make_passes_it():
    """``make probe`` without CKPT passes ckpt="" (an empty text): accepted, as null."""
    from skipless.eval.shared.settings_rules import COMMON
    for ckpt in ("", None, "runs/a random", ["runs/a", "random"]):
        check_rules(load_from({"ckpt": ckpt}), {"ckpt": COMMON["ckpt"]})
    with pytest.raises(ConfigError, match="ckpt must be null, a text of checkpoint items or a list of them, got 3"):
        check_rules(load_from({"ckpt": 3}), {"ckpt": COMMON["ckpt"]})


def load_from(values):
    from omegaconf import OmegaConf
    return OmegaConf.create(values)


@pytest.mark.parametrize("name", EVALUATORS)
def test_an_output_folder_that_cannot_be_made_is_refused_before_loading(setup, nothing_loaded, tmp_path, name):
    """A file where <run>/eval should be: refused whoever runs it (root included), naming out=."""
    root, data, _ = setup
    run = tmp_path / "ro"
    run.mkdir()
    os.link(root / "runs" / "tiny" / "backbone.pt", run / "backbone.pt")
    (run / "eval").write_text("a file, not a folder")
    with pytest.raises(SystemExit) as err:
        EVALUATORS[name](_argv(name, root, data, run))
    text = str(err.value)
    assert text.startswith("error: cannot write results to ") and "pass out=<folder>" in text and "\n" not in text
    assert _files(tmp_path) == ["ro", "ro/backbone.pt", "ro/eval"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write into a read-only folder")
def test_a_read_only_run_folder_is_refused_before_loading(setup, nothing_loaded, tmp_path):
    root, data, _ = setup
    run = tmp_path / "ro"
    run.mkdir()
    os.link(root / "runs" / "tiny" / "backbone.pt", run / "backbone.pt")
    run.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(SystemExit, match=r"error: cannot write results to .*ro/eval \(.*ro is not writable\); "
                                             r"pass out=<folder>"):
            tokencut.main(_argv("tokencut", root, data, run))
    finally:
        run.chmod(stat.S_IRWXU)


def test_out_writes_every_evaluator_there_and_nothing_into_the_run(setup, tmp_path):
    root, data, run = setup
    out = tmp_path / "results"
    before = _files(run)
    two = [f"ckpt={run} random", f"out={out}"]
    probe.main(_argv("probe", root, data, run, *two))
    tokencut.main(_argv("tokencut", root, data, run, *two))
    written = pca.run(load_config("pca", _argv("pca", root, data, run, *two)))
    assert _files(run) == before, "with out=, nothing is written into the run folder"
    floor = "random-vit_tiny-skipless-timm"
    for folder in ("tiny", floor):
        assert json.loads((out / folder / "probe-default.json").read_text())["n_val"] == 3
        assert json.loads((out / folder / "tokencut-default.json").read_text())["images"] == 2
        assert (out / folder / "pca-blocks.png").is_file()
    assert written["blocks"]["tiny"] == out / "tiny" / "pca-blocks.png"
    assert {p.name for p in (out / "compare").iterdir()} >= {"probe-default.md", "tokencut-default.md",
                                                             "pca-checkpoints-block1.png"}
    assert not (root / "runs" / "compare").exists() and not (root / "runs" / floor).exists()


def test_pca_skips_and_counts_unreadable_images_and_names_each_row_by_its_file(setup, tmp_path, capsys):
    root, data, run = setup
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("a.png", "c.png"):
        Image.fromarray(np.full((40, 50, 3), 200, dtype=np.uint8)).save(folder / name)
    (folder / "b.png").write_text("not an image")
    (folder / "bb.png").write_bytes(b"")
    written = pca.run(load_config("pca", _argv("pca", root, data, run, f"images={folder}", "num_images=2",
                                               f"out={tmp_path / 'out'}")))
    assert written["skipped"] == ["b.png (UnidentifiedImageError)", "bb.png (UnidentifiedImageError)"]
    assert (f"warning: 2 unreadable images of images={folder} were skipped: b.png (UnidentifiedImageError), "
            "bb.png (UnidentifiedImageError); the next readable ones are used (2 images)") in capsys.readouterr().out
    (folder / "a.png").write_text("broken too")
    (folder / "c.png").write_bytes(b"\x89PNG\r\n")
    with pytest.raises(SystemExit) as err:
        pca.main(_argv("pca", root, data, run, f"images={folder}", f"out={tmp_path / 'out'}"))
    assert str(err.value).startswith("error: none of the 4 images of images=") and "\n" not in str(err.value)
