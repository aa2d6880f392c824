"""Frozen-feature evaluators. They import only skipless.models and skipless.data, never training code.

Which module belongs to which evaluator, and which are shared (``tests/test_import_graph.py``
enforces it): a module of one evaluator imports its own evaluator's modules and the shared ones,
never another evaluator's; a shared module imports only shared modules. A new module is added to
one of these tables; a helper two evaluators need goes to the shared ones (or to ``skipless``).
"""

EVALUATORS: dict[str, tuple[str, ...]] = {
    "probe": ("probe", "probe_settings", "probe_compute", "probe_outputs", "probe_figures", "feature_cache",
              "linear_probe", "miou"),
    "tokencut": ("tokencut", "tokencut_result", "tokencut_outputs", "ncut", "corloc"),
    "pca": ("pca", "pca_maps"),
    "conditioning": ("conditioning",),
    "knn": ("knn",),
    "linear": ("linear", "linear_heads"),
}
SHARED: tuple[str, ...] = ("backbones", "devices", "global_eval", "global_features", "images", "lr_sweep", "output_dirs", "report", "settings_rules", "square_images", "tb_events")
