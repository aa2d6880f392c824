"""The pages name only what exists (issue 47): every repository path and every ``python -m <module>``
written in README.md and docs/*.md, in prose, in inline code or in a code block, is in the checkout.

What counts as a path, and where it is looked for:

- A word that begins with one of the repository's folders, ``src/``, ``configs/``, ``paper/``,
  ``bench/``, ``tests/``, ``docs/`` (or is ``data/README.md``), is a path from the repository root, on
  every page: it must be a file or a folder there (``docs/results.md`` and ``configs/model/`` pass,
  ``configs/recipe/gone.yaml`` fails).
- A shorter word that ends as a file (``.py``, ``.yaml``, ``.md``, ``.png``, ``.json``) or with ``/`` and
  whose first folder is a folder of the page's own folder, of ``src``, of ``src/skipless`` or of ``configs``
  is a path from one of those four: ``images/x.png`` on a page under docs/, ``skipless/data/reads.py``,
  ``training/run_start.py``, ``ssl/mae/decoder.py``, ``recipe/mae-demo.yaml``. It must exist under at
  least one of those whose folder it names (a page writes such a path short where its sentence says
  which package or folder is meant; the test does not ask which). A word
  whose first folder is none of theirs (``util/lr_sched.py`` of MAE's repository, ``train/loss`` of
  TensorBoard) is not a path of this repository and is not read.
- Not paths: a word inside a longer one (``runs/<run>/eval/tb/`` does not name ``eval/tb/``), a word
  with a placeholder or a wildcard (``<``, ``>``, ``*``, ``{``: ``configs/model/*.yaml``,
  ``src/skipless/eval/<name>/run.py``), a word that begins with ``runs/`` or ``data/`` (what a run or a user makes;
  ``data/README.md`` excepted), ``/``, ``~`` or ``.``, and a URL.
- A rooted word that ``.gitignore`` names (``bench/results.json``, matching ``bench/*.json``) is what a
  command writes, not a file of the checkout, and is not read.
- Trailing dots, commas and colons are punctuation, not part of the path. Relative links are the
  business of tests/test_docs_links.py and are read here only as words.

A module after ``python -m`` (or ``python3 -m``, any interpreter path before it) must be a module of the
checkout (``X/Y.py``, or a package ``X/Y/`` with ``__init__.py``, under the repository root or ``src``)
or one ``importlib.util.find_spec`` finds with the checkout and ``src`` on the path (a library's).
"""
from __future__ import annotations

import importlib.util
import re
import sys
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ROOTED = ("src", "configs", "paper", "bench", "tests", "docs")
FILE_ENDINGS = (".py", ".yaml", ".md", ".png", ".json")
# A word: path characters, placeholders and wildcards included so that a word holding one is seen whole.
WORD = re.compile(r"(?<![\w./<>*{}~$-])([\w.<>*{}~-]+/[\w./<>*{},~-]*)")
IGNORED = [line.strip().lstrip("/") for line in (ROOT / ".gitignore").read_text().splitlines()
           if line.strip() and not line.startswith(("#", "!"))]
MODULE = re.compile(r"\bpython[\d.]*\s+-m\s+([\w.<>*{}-]+)")


def path_words(text: str) -> list[str]:
    """The words of ``text`` that look like paths, placeholders and URLs left out (see the docstring)."""
    words = []
    for match in WORD.finditer(text):
        word = match.group(1).rstrip(".,:")
        start = match.start(1)
        if text[max(0, start - 3):start].endswith("://") or "//" in word:
            continue  # a URL's host or path
        if any(c in word for c in "<>*{~") or word.startswith((".", "/")):
            continue
        if word.startswith(("runs/", "data/")) and word != "data/README.md":
            continue
        words.append(word)
    return words


def written(word: str) -> bool:
    """``word`` is a path ``.gitignore`` names: a command's output (``bench/*.json``), not a file of the checkout."""
    return any(fnmatch(word, p) or (p.endswith("/") and word.startswith(p)) for p in IGNORED)


def _bases(page: Path) -> list[Path]:
    return [page.parent, ROOT / "src", ROOT / "src" / "skipless", ROOT / "configs"]


def missing_paths(page: Path, text: str) -> list[str]:
    """The path words of ``text`` (on ``page``) that name nothing in the checkout."""
    missing = []
    for word in path_words(text):
        first = word.split("/")[0]
        if first in ROOTED or word == "data/README.md":
            if not (ROOT / word).exists() and (word == "data/README.md" or not written(word)):
                missing.append(word)
            continue
        if not word.endswith((*FILE_ENDINGS, "/")):
            continue
        bases = [b for b in _bases(page) if (b / first).is_dir()]
        if bases and not any((b / word).exists() for b in bases):
            missing.append(word)
    return missing


def module_exists(name: str) -> bool:
    """``name`` is a module of the checkout (under the root or ``src``) or one Python finds."""
    parts = name.split(".")
    for base in (ROOT, ROOT / "src"):
        here = base.joinpath(*parts)
        if here.with_suffix(".py").is_file() or (here / "__init__.py").is_file():
            return True
    added = [str(p) for p in (ROOT / "src", ROOT) if str(p) not in sys.path]
    sys.path[:0] = added
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    finally:
        for p in added:
            sys.path.remove(p)


def missing_modules(text: str) -> list[str]:
    """The modules after ``python -m`` in ``text`` that do not exist (placeholders left out)."""
    names = [m.rstrip(".,:") for m in MODULE.findall(text)]
    return [n for n in names if not any(c in n for c in "<>*{") and not module_exists(n)]


def test_every_path_a_page_names_exists():
    broken = [f"{page.relative_to(ROOT)}: {word}" for page in PAGES for word in missing_paths(page, page.read_text())]
    assert not broken, broken


def test_every_python_m_module_a_page_names_exists():
    broken = [f"{page.relative_to(ROOT)}: python -m {name}"
              for page in PAGES for name in missing_modules(page.read_text())]
    assert not broken, broken


def test_the_scan_sees_what_it_should_and_skips_the_rest():
    """The checks above are only as good as these functions: made-up pages."""
    docs_page, readme = ROOT / "docs" / "x.md", ROOT / "README.md"
    text = ("See `configs/recipe/gone.yaml`, [a](../src/skipless/models/init.py), src/skipless/nothing.py, "
            "`configs/model/*.yaml`, `runs/<name>/`, runs/x/eval/tb/, data/imagenet, "
            "https://github.com/a/configs/b.yaml, `eval/<name>/run.py`, util/lr_sched.py, train/loss, "
            "docs/results.md. images/gone.png, bench/results.json, bench/gone.py, `training/run_start.py`, "
            "`ssl/mae/gone.py`, `recipe/mae-demo.yaml`, skipless/data/reads.py, skipless/data/gone.py, "
            "data/README.md:")
    assert missing_paths(docs_page, text) == ["configs/recipe/gone.yaml", "src/skipless/nothing.py", "images/gone.png",
                                              "bench/gone.py", "ssl/mae/gone.py", "skipless/data/gone.py"]
    assert missing_paths(readme, "images/gone.png configs/model/ bench/table.py") == []  # no images/ beside the README
    text = ("`python -m skipless.pretrain`, .venv/bin/python -m skipless.eval.knn, python3 -m paper, python -m bench; "
            "python -m skipless.eval.<name>, python -m skipless.gone, python -m json.tool")
    assert missing_modules(text) == ["skipless.gone"]
