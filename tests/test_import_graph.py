"""The import graph of ``src/skipless`` (the evaluators included, ``skipless.eval``) and of the two tools on top,
``paper/`` and ``bench/``, read from the code (``ast``, nothing imported), and the rules it must keep (issues 28, 47):

(a) nothing under ``src/`` imports ``bench/`` or ``paper/`` (``tests/test_architecture_rules.py`` checks the same at
    run time), and ``paper/`` and ``bench/`` import only ``skipless``, never each other, and never inside a function;
(b) no evaluator imports another evaluator, and a shared evaluator module imports no evaluator. A
    module's family is its sub-package of ``skipless.eval``; the families are listed in
    ``skipless.eval.EVALUATORS`` and the shared package is ``skipless.eval.SHARED``
    (``src/skipless/eval/__init__.py``; ``tests/test_architecture_rules.py`` checks that every module lies in one
    of them). A module of an evaluator family may import its own package's modules and the shared ones; today's
    families are probe (with its feature cache, linear probe and mIoU), tokencut (with ncut and corloc), pca (with
    its maps), conditioning, knn, linear (with its heads, recipe, optimizers with LARS, schedule) and tsne (with
    its points, embedding and figures); k-NN, linear and t-SNE share the global features through
    ``skipless.eval.shared.global_eval`` / ``skipless.eval.shared.global_features``;
(c) no import cycle among the modules of ``src/skipless``: counting every import, also those inside a
    function (a lazy import is how a circle hides; today's lazy imports close none). A package's ``__init__`` is
    a module of its own, so ``from ..models import create_vit`` is an arrow to ``skipless.models``;
(d) no arrow upward inside ``src/skipless``: ``LAYERS`` below orders its sub-packages and top-level
    modules from the bottom up, and a module imports only from its own sub-package (sideways) or from
    a unit of a lower layer. Two units of one layer do not import each other: the evaluators (``eval``) and the
    training loop (``training``) share a layer, so neither imports the other.

The order of ``LAYERS`` is the one the code has. ``training/`` imports no method and reads none of a
method's keys (issue 28): the methods, self-supervised (``ssl``: DINO, MAE), supervised and the language model
(``language``), form one layer above it, and none imports another.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import skipless.eval as evaluators

ROOT = Path(__file__).resolve().parents[1]
TOP = ("skipless", "bench", "paper")

# Bottom first. A unit is a sub-package of skipless or one of its top-level modules.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors",),                                    # the error base and exit statuses
    ("atomic",),                                    # atomic file writes
    ("config",),                                    # the config loader and its typed rules
    ("devices",),                                   # ranks and devices, CPU threads, fp32 islands, step scalars
    ("models", "optim", "data"),                    # the ViT family, optimizers, dataset readers
    ("analysis", "reports"),                        # k-NN and conditioning on a model; the run header, the
                                                    # table writer, TensorBoard names
    ("training", "eval"),                           # trainer, callbacks, loaders, run folders, the divergence
                                                    # guard: no method; the frozen-feature evaluators
                                                    # (neither imports the other)
    ("ssl", "supervised", "language"),              # the methods: ssl/<name>/ (DINO, MAE), the classifier, the
                                                    # language model (none imports another)
    ("pretrain", "train", "lm", "tensorboard_page"),  # the entry points
    ("finetune", "flops"),                          # make train's run, from a checkpoint's backbone; a training
                                                    # step's FLOPs, counted on every method's module (bench, paper)
)
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


@dataclass(frozen=True)
class Arrow:
    """One import: ``source`` imports ``target`` (both module names) at ``line``, inside a function or not."""
    source: str
    target: str
    line: int
    in_function: bool

    def __str__(self) -> str:
        where = " (in a function)" if self.in_function else ""
        return f"{self.source} -> {self.target} (line {self.line}){where}"


def module_name(path: Path) -> str:
    """``src/skipless/data/voc.py`` -> ``skipless.data.voc``; ``paper/__init__.py`` -> ``paper``."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "src":
        parts = parts[1:]
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def source_files() -> dict[str, Path]:
    files = [*(ROOT / "src" / "skipless").rglob("*.py"), *(ROOT / "paper").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    return {module_name(p): p for p in sorted(files)}


class _Imports(ast.NodeVisitor):
    """Every import of one module, resolved to modules of this repository (``TOP``): relative ones
    against the module's package; ``from p import x`` is an arrow to module ``p.x`` where that is a
    module, else to ``p``."""

    def __init__(self, name: str, is_package: bool, known: set[str]) -> None:
        self.name, self.known, self.depth, self.arrows = name, known, 0, []
        self.package = name.split(".") if is_package else name.split(".")[:-1]

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _add(self, target: str, node: ast.stmt) -> None:
        if target.split(".")[0] in TOP:
            self.arrows.append(Arrow(self.name, target, node.lineno, self.depth > 0))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package[:len(self.package) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        for alias in node.names:
            child = f"{module}.{alias.name}"
            self._add(child if child in self.known else module, node)


def import_graph() -> list[Arrow]:
    """Every import arrow between the modules of ``src/skipless`` and ``eval/`` (and out to bench/paper)."""
    files = source_files()
    arrows = []
    for name, path in files.items():
        visitor = _Imports(name, path.name == "__init__.py", set(files))
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        arrows += visitor.arrows
    return arrows


def unit(module: str) -> str:
    """The layer unit of a skipless module: ``skipless.data.voc`` -> ``data``, ``skipless.pretrain`` -> ``pretrain``."""
    return module.split(".")[1]


def upward_arrows(arrows: list[Arrow]) -> list[str]:
    """Arrows inside ``skipless`` from a unit to another unit that is not in a lower layer."""
    bad = []
    for a in arrows:
        if not (a.source.startswith("skipless.") and a.target.startswith("skipless.")):
            continue
        here, there = unit(a.source), unit(a.target)
        if here != there and RANK[there] >= RANK[here]:
            bad.append(f"{a} [{here} (layer {RANK[here]}) -> {there} (layer {RANK[there]})]")
    return bad


def cycles(arrows: list[Arrow]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself)."""
    edges: dict[str, set[str]] = {}
    for a in arrows:
        edges.setdefault(a.source, set()).add(a.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, ()):
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_resolves_relative_absolute_and_function_level_imports():
    arrows = {(a.source, a.target): a for a in import_graph()}
    assert ("skipless.eval.tokencut.run", "skipless.eval.tokencut.ncut") in arrows     # from .ncut import ...
    assert ("skipless.eval.tokencut.run", "skipless.eval.shared.backbones") in arrows  # from ..shared.backbones ...
    assert ("skipless.eval.tokencut.run", "skipless.models") in arrows                 # from skipless.models ...
    assert ("skipless.supervised.schema", "skipless.training.schema") in arrows  # from ..training import schema
    assert ("skipless.data", "skipless.data.voc") in arrows                  # a package's __init__
    assert arrows[("skipless.data", "skipless.data.generator.synthetic")].in_function  # a lazy import
    assert not arrows[("skipless.data", "skipless.data.voc")].in_function


def test_every_skipless_unit_has_a_layer():
    units = {unit(m) for m in source_files() if m.startswith("skipless.")}
    assert units == set(RANK), "add the new sub-package or module to LAYERS (or drop a gone one)"


def test_nothing_under_src_imports_bench_or_paper():
    bad = [str(a) for a in import_graph() if a.source.startswith("skipless") and a.target.split(".")[0] != "skipless"]
    assert not bad


def test_paper_and_bench_import_only_skipless_never_each_other_and_never_inside_a_function():
    """The two tools on top (``make paper``, ``make bench``) stand on the package alone: an arrow between them, or
    one hidden in a function (an import that only works from the checkout root, or that a reader of the module's
    head does not see), fails."""
    bad = [str(a) for a in import_graph() if a.source.split(".")[0] in ("paper", "bench")
           and (a.target.split(".")[0] not in ("skipless", a.source.split(".")[0]) or
                (a.in_function and a.target.split(".")[0] != a.source.split(".")[0]))]
    assert not bad


def family(module: str) -> str:
    """The evaluator family (or the shared package) of an evaluator module: its sub-package,
    ``skipless.eval.probe.compute`` -> ``probe``, ``skipless.eval.shared.report`` -> ``shared``."""
    return module.split(".")[2]


def cross_family_arrows(arrows: list[Arrow]) -> list[str]:
    """Arrows from an eval module into another evaluator's package (a shared module has no family of its own)."""
    bad = []
    for a in arrows:
        if not (a.source.startswith("skipless.eval.") and a.target.startswith("skipless.eval.")):
            continue
        here, there = family(a.source), family(a.target)
        if there != evaluators.SHARED and there != here:
            bad.append(f"{a} [{here} -> {there}]")
    return bad


def test_no_evaluator_imports_another_and_shared_modules_import_no_evaluator():
    assert not cross_family_arrows(import_graph())


def test_no_import_cycle_in_skipless():
    assert not cycles([a for a in import_graph() if a.source.startswith("skipless") and a.target.startswith("skipless")])


def test_no_upward_arrow_in_skipless():
    assert not upward_arrows(import_graph())


def test_the_checks_see_a_circle_and_an_upward_arrow():
    """The checks above are only as good as these functions: a made-up circle, upward arrow and arrow
    between evaluators (or from shared code into one) are found."""
    made_up = [Arrow("skipless.data.a", "skipless.data.b", 1, False), Arrow("skipless.data.b", "skipless.data.a", 1, True),
               Arrow("skipless.models.vit", "skipless.training.data", 1, False)]
    assert cycles(made_up) == [["skipless.data.a", "skipless.data.b"]]
    assert len(upward_arrows(made_up)) == 1 and "models (layer 4) -> training" in upward_arrows(made_up)[0]
    made_up = [Arrow("skipless.eval.probe.run", "skipless.eval.probe.compute", 1, False),
               Arrow("skipless.eval.probe.run", "skipless.eval.shared.report", 1, False),
               Arrow("skipless.eval.knn.run", "skipless.eval.linear.heads", 1, True),
               Arrow("skipless.eval.shared.report", "skipless.eval.pca.maps", 1, False)]
    assert [b.split(" [")[1] for b in cross_family_arrows(made_up)] == ["knn -> linear]", "shared -> pca]"]
