"""Rules of the layout that a test can enforce: who may import whom."""
import ast
import os
import subprocess
import sys
from pathlib import Path

import skipless.eval as evaluators

ROOT = Path(__file__).resolve().parents[1]
EVAL = ROOT / "src" / "skipless" / "eval"  # the evaluators: skipless.eval
TRAINING = ("skipless.ssl", "skipless.optim", "skipless.training", "skipless.pretrain", "skipless.supervised",
            "skipless.train", "skipless.finetune", "skipless.language", "skipless.lm", "skipless.tensorboard_page",
            "lightning")


def _imports(path: Path) -> set[str]:
    """Absolute module names a file imports; relative imports resolved against its package."""
    package = path.relative_to(ROOT).parent.as_posix().replace("/", ".")
    if package.startswith("src."):
        package = package[4:]
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            module = node.module if node.level == 0 else ".".join(p for p in (base, node.module) if p)
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)  # `from . import x` imports module x
    return names


def _run(code: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter that sees this checkout's ``src/`` and root first (as pytest does)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)


def _within(name: str, prefixes) -> bool:
    """``name`` is one of the packages ``prefixes`` or inside one (``lightning_utilities`` is not ``lightning``)."""
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _eval_modules() -> list[str]:
    """Every module of ``skipless.eval`` but its top ``__init__``: ``probe.run``, ``shared.backbones``, ``probe`` (a package)."""
    names = []
    for p in EVAL.rglob("*.py"):
        parts = p.relative_to(EVAL).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        if parts:
            names.append(".".join(parts))
    return sorted(names)


def test_evaluators_never_import_training_code():
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if _within(n, TRAINING))
                 for p in EVAL.rglob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}


def test_importing_every_evaluator_module_loads_no_training_module():
    modules = ["skipless.eval"] + [f"skipless.eval.{m}" for m in _eval_modules()]
    code = ("import importlib, sys\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            f"bad = [m for m in sys.modules if any(m == p or m.startswith(p + '.') for p in {TRAINING!r})]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    result = _run(code)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_eval_module_is_an_evaluators_or_shared():
    """A module's family is its sub-package: every module of ``skipless.eval`` lies in a package listed in
    ``skipless.eval.EVALUATORS`` or in ``skipless.eval.SHARED``, every listed one is a package, none is listed twice."""
    listed = [*evaluators.EVALUATORS, evaluators.SHARED]
    assert len(listed) == len(set(listed)), "a package is listed twice in src/skipless/eval/__init__.py"
    assert all((EVAL / name / "__init__.py").is_file() for name in listed)
    packages = sorted({m.split(".")[0] for m in _eval_modules()})
    assert packages == sorted(listed), "put each skipless.eval module in an evaluator's package or the shared one"
    assert all("." in m or m in listed for m in _eval_modules()), "no module directly under skipless.eval"


def test_every_evaluator_runs_as_a_module():
    """``python -m skipless.eval.<family>`` works for each evaluator: its package has a ``__main__`` calling ``run.main``."""
    for name in evaluators.EVALUATORS:
        assert ({f"skipless.eval.{name}.run", f"skipless.eval.{name}.run.main"}
                <= _imports(EVAL / name / "__main__.py"))


def test_nothing_under_src_imports_bench_or_paper():
    """At run time (tests/test_import_graph.py checks the code): importing every skipless module, the evaluators
    included, leaves bench/ and paper/ unimported."""
    code = ("import importlib, pkgutil, sys, skipless\n"
            "for m in pkgutil.walk_packages(skipless.__path__, 'skipless.'): importlib.import_module(m.name)\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('bench', 'paper')]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    result = _run(code)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_import_scan_sees_relative_and_absolute_imports(tmp_path):
    """The rules above are only as good as ``_imports``: it must see ``from .x import``, ``from ..shared.x import``."""
    names = _imports(EVAL / "tokencut" / "run.py")
    assert {"skipless.eval.tokencut.ncut", "skipless.eval.shared.backbones", "skipless.models"} <= names
    assert "skipless.eval.tokencut.outputs" in names and "skipless.eval.probe" not in names


def test_no_utils_dumping_ground():
    assert not [p for p in ROOT.glob("**/utils.py") if ".venv" not in p.parts]


# Each method in one sitting (issue 36): the paper's mathematics in one plain module per method, the
# LightningModule with its registration in another, its rules in a third (MAE's decoder its own file).
METHOD_FILES = {"dino": {"__init__.py", "self_distillation.py", "module.py", "schema.py"},
                "mae": {"__init__.py", "autoencoder.py", "decoder.py", "module.py", "schema.py"}}
PLAIN = ("dino/self_distillation.py", "mae/autoencoder.py", "mae/decoder.py")


def test_each_method_is_its_math_its_module_and_its_rules():
    ssl = ROOT / "src" / "skipless" / "ssl"
    for method, files in METHOD_FILES.items():
        assert {p.name for p in (ssl / method).glob("*.py")} == files, method


def test_a_methods_math_needs_no_lightning_no_training_loop_and_no_config_rules():
    ssl = ROOT / "src" / "skipless" / "ssl"
    for name in PLAIN:
        imported = _imports(ssl / name)
        banned = [m for m in imported if m.startswith(("lightning", "skipless.training", "skipless.optim",
                                                       "skipless.ssl.method", "skipless.config"))
                  or m.endswith((".module", ".schema"))]
        assert not banned, f"{name} imports {banned}"
