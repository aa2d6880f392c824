"""Rules of SPEC section 1 that a test can enforce."""
import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ("skipless.ssl", "skipless.optim", "skipless.training", "skipless.pretrain", "lightning")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_evaluators_never_import_training_code():
    offenders = {str(p.relative_to(ROOT)): sorted(n for n in _imports(p) if n.startswith(TRAINING))
                 for p in (ROOT / "eval").rglob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}


def test_importing_the_evaluators_loads_no_training_module():
    packages = sorted({p.parent.relative_to(ROOT).as_posix().replace("/", ".")
                       for p in (ROOT / "eval").rglob("*.py")})
    code = ("import importlib, sys\n"
            f"for name in {packages!r}: importlib.import_module(name)\n"
            f"bad = [m for m in sys.modules if m.startswith({TRAINING!r})]\n"
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_utils_dumping_ground():
    assert not [p for p in ROOT.glob("**/utils.py") if ".venv" not in p.parts]
