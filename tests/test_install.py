"""The package installs and runs without the checkout (issue 47): a wheel built from a copy of the checkout's build
inputs, offline and with this interpreter's setuptools, installed with ``pip --target`` into a temporary folder,
imports from there, finds the configs it carries (``skipless/configs/``) and answers an evaluator's ``--help``
from a folder outside the checkout. The build writes ``build/`` and ``*.egg-info`` into the copy, never into the
checkout. Where the config files are looked for, and in which order, is tested beside it."""
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_INPUTS = ("pyproject.toml", "setup.py", "README.md", "src", "configs")


def _python(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """This interpreter with ``args`` in ``cwd``, with ``env`` (PYTHONPATH and the config folder only as given)."""
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SKIPLESS_CONFIG_DIR")}
    return subprocess.run([sys.executable, *args], cwd=cwd, env={**base, **env}, capture_output=True, text=True,
                          timeout=300)


def _pip(args: list[str], cwd: Path) -> None:
    result = _python(["-m", "pip", *args, "--no-deps", "--no-index", "--no-cache-dir", "--disable-pip-version-check",
                      "-q"], cwd)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wheel_installs_and_runs_an_evaluator_outside_the_checkout(tmp_path):
    for tool in ("pip", "setuptools"):  # looked for, not imported: setuptools in this process would patch distutils
        if importlib.util.find_spec(tool) is None:
            pytest.skip(f"{tool} is not installed; the wheel is built with this interpreter's")
    source = tmp_path / "checkout"
    source.mkdir()
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, source / name)
    _pip(["wheel", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)], tmp_path)
    wheels = list((tmp_path / "dist").glob("skipless-*.whl"))
    assert len(wheels) == 1
    site = tmp_path / "site"
    _pip(["install", "--target", str(site), str(wheels[0])], tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    where = _python(["-c", "import skipless, skipless.config as c; print(skipless.__file__); print(c.CONFIG_DIR)"],
                    elsewhere, PYTHONPATH=str(site))
    assert where.returncode == 0, where.stderr
    package, configs = (Path(line) for line in where.stdout.split())
    assert package == site / "skipless" / "__init__.py", "the checkout's skipless was imported, not the wheel's"
    assert configs == site / "skipless" / "configs"
    assert len(list(configs.rglob("*.yaml"))) == len(list((ROOT / "configs").rglob("*.yaml")))

    knn = _python(["-m", "skipless.eval.knn", "--help"], elsewhere, PYTHONPATH=str(site))
    assert knn.returncode == 0, knn.stderr
    assert knn.stdout.startswith("python -m skipless.eval.knn [key=value ...] (make knn):")
    assert f"config: {configs / 'knn.yaml'}" in knn.stdout
    for key in ("ks: [10, 20, 100, 200]", "report_k: 20", "temperature: 0.07", "global_features=dino"):
        assert f"\n  {key}" in knn.stdout
    assert list(elsewhere.iterdir()) == [], "--help wrote files"


def test_the_config_folder_is_the_environment_s_then_the_checkout_s(tmp_path):
    code = ("import importlib, os, skipless.config as c; print(c.CONFIG_DIR); "
            f"os.environ['SKIPLESS_CONFIG_DIR'] = {str(tmp_path)!r}; print(importlib.reload(c).CONFIG_DIR)")
    result = _python(["-c", code], tmp_path, PYTHONPATH=str(ROOT / "src"))
    assert result.stdout.split() == [str(ROOT / "configs"), str(tmp_path)], result.stderr
