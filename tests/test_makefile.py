"""`make pretrain` and `make data` pass only what the user set: the YAML defaults stay in charge."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def dry_run(*args: str) -> str:
    """The command line make would run (``-n``; PY and the install stamp replaced by no-ops)."""
    out = subprocess.run(["make", "-n", "-s", "STAMP=", "PY=python", *args], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return next(line for line in out.splitlines() if line.startswith("python -m"))


def test_make_pretrain_without_variables_passes_no_config_values():
    assert dry_run("pretrain").split() == ["python", "-m", "skipless.pretrain"]


def test_make_pretrain_maps_each_variable_set_onto_its_key():
    words = dry_run("pretrain", "MODEL=skip", "OPT=soap", "DATA=imagenet", "RECIPE=paper300", "GPUS=8",
                    "NODES=2", "RESUME=1", "ARGS=train.epochs=200").split()[3:]
    assert words == ["model=skip", "optim=soap", "data=imagenet", "recipe=paper300", "train.devices=8",
                     "train.num_nodes=2", "run.resume=true", "train.epochs=200"]


def test_make_data_reads_root_and_sizes_from_the_yaml():
    assert dry_run("data").split() == ["python", "-m", "skipless.data.generator.synthetic"]


def test_make_data_imagenet100_passes_the_roots_given_and_other_data_is_refused():
    import shlex

    assert dry_run("data", "DATA=default").split() == ["python", "-m", "skipless.data.generator.synthetic"]
    builder = ["python", "-m", "skipless.data.classification.imagenet_subset"]
    assert dry_run("data", "DATA=imagenet100").split() == builder
    words = shlex.split(dry_run("data", "DATA=imagenet100", "IMAGENET_ROOT=/data/my imagenet",
                                "IMAGENET100_ROOT=/data/bob's"))
    assert words[3:] == ["--imagenet-root", "/data/my imagenet", "--out", "/data/bob's"]
    refused = subprocess.run(["make", "-n", "-s", "STAMP=", "PY=python", "data", "DATA=imagenet"], cwd=ROOT,
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "make data builds the embedded default" in refused.stderr
    assert "DATA=imagenet is read where it lies" in refused.stderr


def test_make_data_imagenet10_passes_its_own_root_and_names_the_subset():
    import shlex

    words = shlex.split(dry_run("data", "DATA=imagenet10", "IMAGENET_ROOT=/data/my imagenet",
                                "IMAGENET10_ROOT=/data/in10", "IMAGENET100_ROOT=/data/in100"))
    assert words[1:] == ["-m", "skipless.data.classification.imagenet_subset", "--subset", "imagenet10",
                         "--imagenet-root", "/data/my imagenet", "--out", "/data/in10"]
    assert "--out" not in dry_run("data", "DATA=imagenet10", "IMAGENET100_ROOT=/data/in100")  # not its folder
    refused = subprocess.run(["make", "-n", "-s", "STAMP=", "PY=python", "data", "DATA=imagenet20"], cwd=ROOT,
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "or ImageNet-10, Imagenette's classes (DATA=imagenet10" in refused.stderr
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "make data DATA=imagenet10 IMAGENET_ROOT=<ImageNet-1k> [IMAGENET10_ROOT=data/imagenet10]" in out


def test_make_data_lm_val_and_make_zeroshot_pass_only_what_is_set():
    assert dry_run("data", "DATA=lm-val").split() == ["python", "-m", "skipless.data.text.lm_val"]
    assert _eval_line("zeroshot") == "python -m skipless.eval.zeroshot"
    assert _eval_line("zeroshot", "DATA=lm-val").split()[3:] == ["dataset=lm-val"]


def test_help_lists_the_recipes_and_the_default_choices():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "dino demo|paper|paper300, mae demo|paper" in out and "data=default: demo" in out
    from skipless.training.data import DATASETS  # the pretraining data, listed by hand in the Makefile
    assert f"  DATA={'|'.join(DATASETS)}   DATA_ROOT=" in out


def _eval_line(target: str, *args: str) -> str:
    out = subprocess.run(["make", "-n", "-s", "STAMP=", "PY=python", target, *args], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return " ".join(out.replace("\\\n", " ").split())


@pytest.mark.parametrize("target", ["probe", "tokencut", "pca"])
def test_make_evaluators_pass_only_what_is_set(target):
    assert _eval_line(target) == f"python -m skipless.eval.{target}"
    line = _eval_line(target, "CKPT=runs/a random", "LAYER=-1", "OUT=/tmp/o")
    assert "ckpt='\\''runs/a random'\\''" in line and "layers=-1" in line and "out='\\''/tmp/o'\\''" in line


@pytest.mark.parametrize("target", ["probe", "tokencut", "pca", "conditioning", "knn", "linear", "tsne", "zeroshot"])
def test_paths_with_spaces_quotes_and_commas_reach_the_evaluator_as_typed(target):
    """CKPT='"runs/my run" random' names two backbones; OUT= a folder with a space: through make, the
    shell and the config parser, the evaluator reads what the user typed."""
    import sys

    from skipless.eval.shared.backbones import split_items
    from skipless.config import load_config

    echo = f"{sys.executable} -c 'import sys; print(*sys.argv[1:], sep=chr(10))'"
    out = subprocess.run(["make", "-s", "STAMP=", f"PY={echo}", target,
                          """CKPT="runs/my run",'runs/bob''s' random""", "OUT=/tmp/my results"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    cfg = load_config(target, [a for a in out if a.startswith(("ckpt=", "out="))])
    assert split_items(cfg.ckpt) == ["runs/my run", "runs/bobs", "random"] and cfg.out == "/tmp/my results"


def test_make_train_maps_each_variable_set_onto_its_key():
    assert dry_run("train").split() == ["python", "-m", "skipless.train"]
    words = dry_run("train", "MODEL=attn-skip", "OPT=soap", "DATA=cifar10", "RECIPE=paper", "GPUS=8", "NODES=2",
                    "RESUME=1", "ARGS=train.epochs=200").split()[3:]
    assert words == ["model=attn-skip", "optim=soap", "data=cifar10", "recipe=paper", "train.devices=8",
                     "train.num_nodes=2", "run.resume=true", "train.epochs=200"]
    # DATASET=, the former name, still names the same thing, for make train and the evaluators
    assert dry_run("train", "DATASET=tiny-imagenet").split()[3:] == ["data=tiny-imagenet"]
    assert dry_run("knn", "DATA=cifar10").split()[3:] == ["dataset=cifar10"]
    assert dry_run("knn", "DATASET=cifar10").split()[3:] == ["dataset=cifar10"]


def test_make_train_maps_digits_and_its_recipe_and_help_lists_every_dataset():
    words = dry_run("train", "DATA=digits", "RECIPE=osa-mnist").split()[3:]
    assert words == ["data=digits", "recipe=osa-mnist"]
    datasets = {p.stem for p in (ROOT / "configs" / "data").glob("*.yaml")}
    assert "digits" in datasets
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    target = next(line for line in out.splitlines() if line.strip().startswith("make train"))
    variables = next(line for line in out.splitlines() if line.startswith("make train takes"))
    for line in (target, variables):  # the target's own list is written by hand: it must not fall behind
        listed = line.split("DATA=")[1].split()[0].split("|")
        assert set(listed) == datasets, line
    assert "RECIPE=demo|huh|osa-mnist|paper " in out


def test_make_paper_maps_exp_scale_and_dry():
    assert dry_run("paper").split() == ["python", "-m", "paper"]
    words = dry_run("paper", "EXP=table2", "SCALE=full", "DRY=1", "ARGS=cluster=local").split()
    assert words[3:] == ["exp=table2", "scale=full", "dry_run=true", "cluster=local"]
    assert dry_run("paper", "EXP=mae-table2", "SCALE=quick").split()[3:] == ["exp=mae-table2", "scale=quick"]
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.count("SCALE=demo|quick|full") == 2 and "SCALE=demo|full" not in out  # the target and the variable


def test_make_tensorboard_listens_on_localhost_unless_host_is_given_on_the_make_line(monkeypatch):
    assert _eval_line("tensorboard") == ("python -m skipless.tensorboard_page --logdir runs --host 127.0.0.1 "
                                         "--port 6006")
    assert _eval_line("tensorboard", "HOST=0.0.0.0", "PORT=7000").endswith("--host 0.0.0.0 --port 7000")
    monkeypatch.setenv("HOST", "myhost")  # what some shells export: not a request to serve the network
    assert "--host 127.0.0.1 " in _eval_line("tensorboard")
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "PORT=6006 HOST=127.0.0.1" in out and "HOST=0.0.0.0" in out


def test_variables_exported_by_the_shell_are_not_requests(monkeypatch):
    """A cluster shell may export OUT or DATA, a platform PORT: only the make line sets make's variables, so
    an evaluator does not silently write its results into $OUT (issue 34)."""
    for name, value in {"OUT": "/scratch/job-out", "DATA": "/scratch/data", "CKPT": "x", "PORT": "80"}.items():
        monkeypatch.setenv(name, value)
    assert _eval_line("probe") == "python -m skipless.eval.probe"
    assert dry_run("pretrain").split() == ["python", "-m", "skipless.pretrain"]
    assert _eval_line("tensorboard").endswith("--port 6006")
    assert "out='\\''/tmp/o'\\''" in _eval_line("knn", "OUT=/tmp/o")  # the make line still sets it
