"""The language model's config (``configs/lm.yaml``, ``configs/text/``, ``recipe/lm-*.yaml``) and its command line:
the presets build the residual mode and init they name, the paper's recipe is App. A.8 as issue 49 reads it, every
group choice is checked or refused in one sentence, bad values are refused before anything is written, ``--help``,
and ``make lm`` maps its variables onto the keys; the loss and the schedule against their formulas."""
from __future__ import annotations

import itertools
import math
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf

from skipless.config import CONFIG_DIR, ConfigError, available, load_config
from skipless.devices.world import accumulation_steps, global_batch
from skipless.language.module import lm_args, lm_from_config, lm_schedule, window_loss
from skipless.language.schema import building_presets, check_lm_config
from skipless.lm import main, resolved_model
from skipless.reports.summary import peak_lr

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("model, residual, init", [("skip", "skip", "fla"), ("skipless", "skipless", "cutskip"),
                                                   ("skipless-plain", "skipless", "fla")])
def test_the_presets_build_the_residual_mode_and_init_they_name(model, residual, init):
    cfg = load_config("lm", [f"model={model}", "model.embed_dim=32", "model.num_heads=2", "model.depth=2"])
    check_lm_config(cfg)
    args = lm_from_config(cfg.model, vocab_size=64).skipless_args
    assert (args["family"], args["residual"], args["init"]) == ("lm", residual, init)
    # the paper's values for the LM (seed A.8: alpha 0, beta 0.5; c 3 and Eq. 11 on the whole layer: ours)
    assert args["init_args"] == {"alpha": 0.0, "beta": 0.5, "c": 3.0, "qk": "layer"}


def test_the_paper_recipe_is_appendix_a8_as_issue_49_reads_it():
    cfg = load_config("lm", ["data=c4", "model=skipless"])
    assert cfg.choices.recipe == "paper"
    check_lm_config(cfg)
    model, parameters = resolved_model(cfg, vocab_size=32_000)
    assert (model["embed_dim"], model["depth"], model["num_heads"], model["mlp_hidden"]) == (768, 12, 12, 2048)
    assert parameters == 109_529_856 and model["context"] == 2048
    assert cfg.train.steps == 20_000 and global_batch(cfg) * model["context"] == 262_144
    assert accumulation_steps(cfg) == 8  # 128 sequences as 8 micro-batches of 16 on one device
    o = cfg.optim
    assert (o.name, list(o.betas), o.eps, o.weight_decay, o.weight_decay_params) == \
        ("adamw", [0.9, 0.95], 1e-15, 0.1, "all")
    assert (o.warmup_steps, o.min_lr_ratio, o.clip_grad) == (1024, 0.1, 1.0)
    assert peak_lr(cfg) == 3e-4 == cfg.model.lr.adamw  # the lr as stated: not scaled with the batch
    assert (cfg.data.tokenizer, cfg.data.shards, cfg.data.val_shards) == ("gpt2", 32, 1)
    assert load_config("lm", []).choices.recipe == "demo"
    assert load_config("lm", ["data=c4", "optim=soap"]).optim.betas == [0.95, 0.95]  # SOAP's own


def test_every_group_choice_is_checked_or_refused_in_one_sentence():
    """Every model, optimizer, data and recipe choice: the presets the LM builds pass; the image models' presets
    (another family, OSA's attention, the centred MLP init) are refused naming the ones that build."""
    builds = building_presets()
    assert {"skip", "skipless", "skipless-plain", "decayed", "attn-skip", "mlp-skip"} <= set(builds)
    for model, optim, data, recipe in itertools.product(available("model"), available("optim"), ["default", "c4"],
                                                        ["demo", "paper"]):
        cfg = load_config("lm", [f"model={model}", f"optim={optim}", f"data={data}", f"recipe={recipe}"])
        if model in builds:
            check_lm_config(cfg)
            continue
        with pytest.raises(ConfigError) as err:
            check_lm_config(cfg)
        message = str(err.value)
        assert message.startswith(f"model={model} sets model.") and f"expected one of {', '.join(builds)}" in message
        assert "\n" not in message
    assert {"osa", "resnet", "swin-s", "skipless-centered"} <= set(available("model")) - set(builds)


def test_the_lm_groups_set_their_own_section_and_restate_no_value_of_lm_yaml():
    base = OmegaConf.load(CONFIG_DIR / "lm.yaml")
    base.pop("defaults")
    flat = lambda c: {k: v for k, v in _flat(OmegaConf.to_container(c, resolve=False))}  # noqa: E731
    defaults = flat(base)
    for path in sorted((CONFIG_DIR / "text").glob("*.yaml")):
        keys = flat(OmegaConf.load(path))
        assert keys and all(k.startswith("data.") for k in keys), path.name
        assert not {k: v for k, v in keys.items() if defaults.get(k, object()) == v}, path.name
    for path in sorted((CONFIG_DIR / "recipe").glob("lm-*.yaml")):
        keys = flat(OmegaConf.load(path))
        assert not [k for k in keys if k.startswith(("data.", "run."))] and set(keys) <= set(defaults), path.name
        assert not {k: v for k, v in keys.items() if defaults[k] == v}, path.name


def _flat(node, prefix=""):
    for k, v in node.items():
        if isinstance(v, dict):
            yield from _flat(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


@pytest.mark.parametrize("args, message", [
    (["train.steps=0"], "train.steps must be an integer >= 1, got 0"),
    (["optim.warmup_steps=500"], "optim.warmup_steps=500 is longer than train.steps=160; expected at most"),
    (["model.init_args.qk=head"], "model.init_args.qk=head with model.init_args.alpha=0 gives every head the same"),
    (["data.tokenizer=bpe"], "data.tokenizer must be one of bible-bpe4k, gpt2 or path:<tokenizer.json>, got 'bpe'"),
    (["model=osa"], "model=osa sets model.attention, which the language model does not have"),
    (["model.arch=lm_7b"], "model.arch must be one of lm_demo, lm_110m, lm_110m_gpt2, got 'lm_7b'"),
    (["model.num_heads=3"], "model.embed_dim=256 does not split into model.num_heads=3 heads of an even width"),
    (["model.decay.indexing=layer"], "model.decay.indexing=layer shapes the decayed mode and does nothing for"),
    (["optim.weight_decay_params=norms"], "optim.weight_decay_params must be one of all, matrices, got 'norms'"),
    (["train.stepz=3"], "unknown config key 'train.stepz' for lm; did you mean train.steps"),
    (["data=c4"], "C4 en (train split)"),
])
def test_bad_values_are_one_sentence_before_anything_is_written(tmp_path, capsys, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATA_ROOT", str(tmp_path / "no-c4"))
    assert main([*args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # no data, no run folder


def test_a_c4_root_without_shards_names_the_layout_and_data_root(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DATA_ROOT", str(tmp_path / "no-c4"))
    assert main(["data=c4"]) == 1
    err = capsys.readouterr().err
    assert "c4-train.NNNNN-of-MMMMM.json.gz" in err and "DATA_ROOT" in err and "data/README.md" in err


def test_help_prints_the_usage_the_groups_and_every_key_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as done:
        load_config("lm", ["--help", "data=c4"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert f"config: {CONFIG_DIR / 'lm.yaml'}" in out and "  data=c4  (choices: c4, default)" in out
    assert "  recipe=paper  (choices: demo, paper)" in out and "warmup_steps: 1024" in out
    assert list(tmp_path.iterdir()) == []  # python -m skipless.lm --help: tests/test_config_help.py


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_lm_maps_each_variable_set_onto_its_key():
    def dry(*args: str) -> list[str]:
        out = subprocess.run(["make", "-n", "-s", "STAMP=", "PY=python", "lm", *args], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        return next(line for line in out.splitlines() if line.startswith("python -m")).split()

    assert dry() == ["python", "-m", "skipless.lm"]
    assert dry("MODEL=skipless-plain", "OPT=soap", "DATA=c4", "RECIPE=paper", "GPUS=8", "NODES=2", "RESUME=1",
               "ARGS=model.lr.adamw=7e-4")[3:] == [
        "model=skipless-plain", "optim=soap", "data=c4", "recipe=paper", "train.devices=8", "train.num_nodes=2",
        "run.resume=true", "model.lr.adamw=7e-4"]


def test_the_loss_is_the_mean_next_token_cross_entropy_of_every_position():
    torch.manual_seed(0)
    cfg = load_config("lm", ["model=skip", "model.embed_dim=32", "model.num_heads=2", "model.depth=2",
                             "model.context=8"])
    model = lm_from_config(cfg.model, vocab_size=50)
    window = torch.randint(0, 50, (3, 9))
    inputs, targets = window[:, :-1], window[:, 1:]
    logits = model(inputs)
    explicit = []
    for b in range(3):
        for t in range(8):  # position t sees tokens 0..t and predicts token t + 1 of the window
            row = logits[b, t].double()
            explicit.append(torch.logsumexp(row, 0) - row[window[b, t + 1]])
    loss = window_loss(logits, targets)
    torch.testing.assert_close(loss.double(), torch.stack(explicit).mean(), rtol=1e-6, atol=1e-6)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, F.cross_entropy(logits.reshape(-1, 50), targets.reshape(-1)))


def test_the_schedule_is_flames_warm_up_then_cosine_to_a_tenth():
    lr = lm_schedule(3e-4, steps=100, warmup=10, min_ratio=0.1)
    assert len(lr) == 100 and lr[0] == 0.0
    for s in (0, 5, 9):
        assert lr[s] == pytest.approx(3e-4 * s / 10)  # flame: current_step / warmup_steps
    for s in (10, 40, 99):
        progress = (s - 10) / 90
        assert lr[s] == pytest.approx(3e-4 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))))
    assert lr[10] == pytest.approx(3e-4) and lr[-1] > 3e-5


def test_the_model_arguments_leave_the_arch_sizes_unless_set_and_take_the_tokenizers_vocabulary():
    cfg = load_config("lm", [])
    assert lm_args(cfg.model, 4096)["vocab_size"] == 4096 and "embed_dim" not in lm_args(cfg.model, 4096)
    assert lm_args(load_config("lm", ["model.vocab_size=5000"]).model, 4096)["vocab_size"] == 5000


def test_a_group_may_read_its_files_from_another_folder(tmp_path):
    """``folder: <name>`` in a default's table (lm.yaml's ``data``): the group keeps its name on the command line and
    reads ``configs/<name>/``; the group's own folder is not read, and its choices are the folder's."""
    for folder, name, value in (("text", "a", 1), ("text", "b", 2), ("data", "a", 9)):
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / f"{name}.yaml").write_text(f"data: {{v: {value}}}\n")
    (tmp_path / "entry.yaml").write_text("defaults:\n  data: {folder: text, otherwise: a}\n")
    assert load_config("entry", [], config_dir=tmp_path).data.v == 1
    assert load_config("entry", ["data=b"], config_dir=tmp_path).data.v == 2
    with pytest.raises(ConfigError, match=r"^unknown data 'c'; expected one of: a, b$"):
        load_config("entry", ["data=c"], config_dir=tmp_path)
