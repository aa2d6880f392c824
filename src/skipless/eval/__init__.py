"""Frozen-feature evaluators. They import skipless's models, data, analysis, config and the like,
never training code (optim, training, ssl, supervised, the entry points).

One sub-package per evaluator family, and one shared package (``tests/test_import_graph.py``
enforces it): a module's family is its sub-package; a module of one evaluator imports its own
package's modules and the shared ones, never another evaluator's; a shared module imports only
shared modules. Each evaluator runs as ``python -m skipless.eval.<family>`` (its ``__main__``; the code is in
its ``run`` module). A new module goes into its evaluator's package; a helper two evaluators need goes
to the shared package (or to ``skipless``); a new evaluator is a new package listed here.
"""

EVALUATORS: tuple[str, ...] = ("probe", "tokencut", "pca", "conditioning", "knn", "linear", "tsne", "zeroshot")
SHARED: str = "shared"
