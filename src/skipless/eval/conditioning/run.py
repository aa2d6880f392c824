"""``make conditioning``: the paper's mechanism, measured on frozen backbones.

    python -m skipless.eval.conditioning ckpt="init:skip init:skipless-plain init:skipless runs/a"

Ji et al. ("Cutting the Skip") explain why skipless transformers train badly, and why their
initialisation fixes it, through condition numbers of Jacobians: kappa(J J^T) of the whole network
(Section 4.1, Appendix Table 5) and kappa(K_l K_l^T) of each attention sub-block (Eq. 7, Table 6).
This evaluator measures those, the sub-block output embeddings of "Always Skip Attention" (Fig. 1b)
and the effective rank of Zhang et al. (Section 5), for every backbone of ``ckpt`` (the evaluators'
checkpoint syntax, plus ``init:<model>`` for a model preset at initialisation), through
``skipless.analysis.diagnostics.diagnose``.

Writes ``<run>/eval/conditioning.json`` per backbone (every number, with how each condition number
was obtained: Lanczos iterations, residuals, convergence, and why a value is ∞), TensorBoard scalars
against depth in ``<run>/eval/tb/conditioning``, and ``runs/compare/conditioning.md`` (Table 5 and Table 6
layouts, blocks x checkpoints) with ``runs/compare/conditioning.png`` (each quantity against depth,
every checkpoint in one figure); with one backbone the table and figure go beside its JSON.
Settings, backbones, blocks, image sizes and the dense check's size are all checked before any
measurement starts. CNN backbones (a ResNet, a ConvMixer: ``model.family=timm``) get each block's Jacobian with
and without its shortcut instead (``conv_blocks.py``); one call takes ViTs or CNNs, not both.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from omegaconf import DictConfig, OmegaConf

from skipless.analysis.condition_number import Condition, dense_condition
from skipless.analysis.diagnostics import (DTYPES, MEASURES, DiagnosticSettings, Diagnosis, diagnose, diagnosed_blocks,
                                           result_to_json)
from skipless.analysis.jacobians import check_dense_size, network_jacobian_dense
from skipless.analysis.tensorboard_values import tensorboard_values
from skipless.analysis.sub_blocks import has_finite_weights
from skipless.analysis.embedding_condition import EMBEDDINGS
from skipless.config import load_config
from skipless.config.rules import Rule, boolean, integer, number, one_of, optional, text
from skipless.errors import exit_on_user_error
from skipless.devices.cpu_threads import set_cpu_threads
from skipless.models import patch_grid
from skipless.models.timm_family import family_of

from ..shared.backbones import BackboneSpec, load_spec
from ..shared.devices import resolve_device
from ..shared.output_dirs import backbones_to_evaluate
from .conv_blocks import ConvConditioningError, check_conv_settings, run_conv
from .outputs import report_folder, save_record
from .run_images import RUN, RunImagesError, check_fraction, run_split
from .spectrum import block_spectra, dense_block_jacobians, ends_vs_dense, kappas, spectrum_ends, spectrum_figure
from ..shared.report import markdown_table, result_json, shown_args, write_text
from ..shared.settings_rules import BLOCKS_OR_ALL, COMMON, check_rules
from ..shared.square_images import load_images
from ..shared.tb_events import event_writer

MEASURE_LIST = Rule(lambda v: isinstance(v, list) and len(v) > 0 and all(m in MEASURES for m in v),
                    f"a non-empty list of measures among {', '.join(MEASURES)}")

# Every key of configs/conditioning.yaml and its rule (eval/shared/settings_rules.py).
RULES = {
    **{k: v for k, v in COMMON.items() if k != "norm"},
    "images": optional(text()),
    "roots.default": text(),
    "num_images": integer(2),
    "image_fraction": optional(number(0, 1, low_open=True, high_open=False)),
    "image_size": integer(1),  # a multiple of the patch: per backbone
    "layers": BLOCKS_OR_ALL,
    "measures": MEASURE_LIST,
    "jacobian.images": integer(1),
    "jacobian.image_size": integer(1),
    "solver.tol": number(0, 1),
    "solver.max_iter": integer(2),
    "solver.dtype": one_of(*DTYPES),
    "dense_check": boolean(),
    "spectrum": boolean(),
    "spectrum_ends": optional(integer(1)),
    "dense_max_entries": integer(1),
}

# The paper's training-time values (Appendix A.7, DINO ViT-S at epoch 20), printed under the tables.
PAPER_TABLE5_EPOCH20 = {"skip": "127", "skipless": "∞", "skipless + init": "195"}
PAPER_TABLE6_EPOCH20 = {"skip": ["1.05", "1.49", "1.35", "1.04"], "skipless": ["∞"] * 4,
                        "skipless + init": ["10", "2.7", "7.5", "12.5"]}


FAMILIES = ("vit", "timm")  # a ViT's sub-blocks (diagnose); a CNN's blocks (conv_blocks.py)


def settings_of(cfg: DictConfig) -> DiagnosticSettings:
    layers = OmegaConf.to_container(cfg.layers) if OmegaConf.is_list(cfg.layers) else cfg.layers
    return DiagnosticSettings(layers=layers, measures=tuple(cfg.measures), jacobian_images=int(cfg.jacobian.images),
                              tol=float(cfg.solver.tol), max_iter=int(cfg.solver.max_iter),
                              dtype=str(cfg.solver.dtype), seed=int(cfg.seed))


def _tokens(model: torch.nn.Module, size: int) -> int:
    rows, cols = patch_grid(model, size, size)
    return rows * cols + int(getattr(model, "num_prefix_tokens", 1))


def check_backbone(model: torch.nn.Module, spec: BackboneSpec, cfg: DictConfig, size: int | None = None) -> list[int]:
    """What depends on the backbone, before any measurement: its blocks, the image sizes, the dense
    check's size. ``size``: the images' side when it is not ``image_size`` (``images=run``: the run's, which
    its Jacobian images share). Returns the resolved blocks."""
    blocks = diagnosed_blocks(settings_of(cfg).layers, len(model.blocks))
    n = _tokens(model, int(size or cfg.image_size))
    n_j = _tokens(model, int(size or cfg.jacobian.image_size)) if "jacobian" in cfg.measures else 0
    if cfg.spectrum and cfg.spectrum_ends is None:
        check_dense_size(n * model.embed_dim, n * model.embed_dim, int(cfg.dense_max_entries),
                         f"image_size for {spec.name}'s spectrum, or set spectrum_ends for its ends matrix-free "
                         "(spectrum=false keeps the other measures)")
    if cfg.dense_check:
        d, limit = model.embed_dim, int(cfg.dense_max_entries)
        if "jacobian" in cfg.measures:
            params = sum(p.numel() for p in model.blocks.parameters())
            check_dense_size(int(cfg.jacobian.images) * n_j * d, params, limit,
                             f"jacobian.images, jacobian.image_size or the depth of {spec.name} (dense_check=false "
                             "keeps the matrix-free value only)")
        if "blocks" in cfg.measures:
            check_dense_size(n * d, n * d, limit, f"image_size for {spec.name} (dense_check=false keeps the "
                             "matrix-free value only)")
    return blocks


def dense_values(model: torch.nn.Module, images: torch.Tensor, j_images: torch.Tensor | None, d: Diagnosis,
                 cfg: DictConfig) -> dict[str, Any]:
    """The exact float64 kappa of every Jacobian the diagnosis measured matrix-free (``dense_check``)."""
    limit = int(cfg.dense_max_entries)
    out: dict[str, Any] = {}
    if d.diverged:
        return out
    if d.jacobian is not None and j_images is not None:
        out["jacobian"] = dense_condition(network_jacobian_dense(model, j_images, max_entries=limit), gram=True).to_json()
    if d.block_jacobians is not None:
        out["block_jacobians"] = {}
        for i, name, k in dense_block_jacobians(model, images, d.blocks, limit):
            out["block_jacobians"].setdefault(str(i), {})[name] = dense_condition(k, gram=True).to_json()
    return out


def spectrum_record(model: torch.nn.Module, image: torch.Tensor, blocks: list[int], cfg: DictConfig) -> dict[str, Any]:
    """seeds/003 Figs. 7-8 on the first image: the attention Jacobian's ``spectrum_ends`` largest and smallest singular
    values matrix-free at any size (``spectrum_ends``; null: none, the dense spectrum only, as before the key); every
    singular value of both sub-blocks where the dense Jacobian fits ``dense_max_entries`` (``spectrum``), with the
    ends' largest relative difference from it (``spectrum_ends_vs_dense``: the check). ``spectrum_kappa``: the dense
    spectrum's sigma_max / sigma_min where it was formed, else the matrix-free one's (``spectrum_method``)."""
    out: dict[str, Any] = {}
    if cfg.spectrum_ends is not None:
        out["spectrum_ends"] = spectrum_ends(model, image, blocks, settings_of(cfg).solver, int(cfg.spectrum_ends))
    side = _tokens(model, image.shape[-1]) * model.embed_dim
    if side * side <= int(cfg.dense_max_entries):
        out["spectrum"] = block_spectra(model, image, blocks, int(cfg.dense_max_entries))
        if "spectrum_ends" in out:
            out["spectrum_ends_vs_dense"] = ends_vs_dense(out["spectrum_ends"], out["spectrum"])
        out["spectrum_kappa"] = kappas(out["spectrum"])  # exact sigma_max / sigma_min of each K + g I
        out["spectrum_method"] = "dense"
    else:
        out["spectrum_kappa"] = {b: {k: e["kappa"] for k, e in row.items()} for b, row in out["spectrum_ends"].items()}
        out["spectrum_method"] = "matrix-free"
    return out


def write_tensorboard(d: Diagnosis, folder: Path) -> None:
    """Per-block quantities against depth (step = block index); kappa(J J^T) at step 0. ∞ is drawn under
    ``<tag>/infinite`` at float32's largest value and a Lanczos bound under ``<tag>/lower_bound``, as during training
    (``skipless.analysis.tensorboard_values``)."""
    with event_writer(folder, "conditioning") as writer:
        for name, value in tensorboard_values(d).items():
            tag, _, rest = name.partition("/block")
            block, _, bound = rest.partition("/")
            writer.add_scalar(f"conditioning/{tag}" + (f"/{bound}" if bound else ""), value, int(block or 0))


def _cell(c: Condition | None) -> str:
    return "-" if c is None else c.short()


def tables(results: list[tuple[str, Diagnosis]]) -> str:
    """The markdown report: Table 5 (kappa(J J^T)), Table 6 (per block, attention and MLP), the
    embedding ln kappa and the effective ranks, rows = checkpoints, columns = blocks."""
    blocks = sorted({b for _, d in results for b in d.blocks})
    head = ["checkpoint"] + [f"L{b}" for b in blocks]
    parts = []
    if any(d.jacobian is not None for _, d in results):
        rows = [[name, _cell(d.jacobian), None if d.jacobian is None else d.jacobian.iterations,
                 None if d.jacobian is None else d.jacobian.dim] for name, d in results]
        parts.append("### kappa(J J^T) of the full Jacobian (the paper's Table 5)\n\n"
                     + markdown_table(["checkpoint", "kappa(J J^T)", "products", "size of J J^T"], rows)
                     + "\nThe paper (DINO ViT-S during training, epoch 20): "
                     + ", ".join(f"{k} {v}" for k, v in PAPER_TABLE5_EPOCH20.items()) + ".\n")
    for name_, label in (("attn", "attention K_l"), ("mlp", "MLP K^_l")):
        if all(d.block_jacobians is None for _, d in results):
            break
        rows = [[name] + [_cell((d.block_jacobians or {}).get(b, {}).get(name_)) for b in blocks] for name, d in results]
        parts.append(f"### kappa of the {label} sub-block Jacobian (kappa(K K^T); (K + I) with a skip; the paper's "
                     "Table 6)\n\n" + markdown_table(head, rows))
    if any(d.block_jacobians is not None for _, d in results):
        parts[-1] += ("\nThe paper (attention, epoch 20, L0 L4 L7 L11): "
                      + "; ".join(f"{k} {' '.join(v)}" for k, v in PAPER_TABLE6_EPOCH20.items()) + ".\n")
    if any(d.embeddings is not None for _, d in results):
        rows = [[f"{name} {e}"] + [(d.embeddings or {}).get(b, {}).get(e) for b in blocks]
                for name, d in results for e in EMBEDDINGS]
        parts.append("### mean ln kappa of the sub-block output embeddings (seeds/003, Fig. 1b: attention without a "
                     "skip ~6, the others ~3)\n\n" + markdown_table(["checkpoint, embedding"] + head[1:], rows, ".2f"))
    if any(d.effective_rank is not None for _, d in results):
        rows = [[f"{name} {k}"] + [(d.effective_rank or {}).get(b, {}).get(k) for b in blocks]
                for name, d in results for k in ("cls", "patch_mean")]
        parts.append("### effective rank of the features over the images (seeds/002, Section 5)\n\n"
                     + markdown_table(["checkpoint, tokens"] + head[1:], rows, ".2f"))
    return "\n".join(parts)


def figure(results: list[tuple[str, Diagnosis]], path: Path) -> Path | None:
    """Each per-block quantity against depth, one line per checkpoint (∞ drawn as a triangle on top);
    None when no per-block quantity was measured (``measures=[jacobian]``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: list[tuple[str, str, bool]] = [("block_jacobians", "attn", True), ("block_jacobians", "mlp", True)]
    panels += [("embeddings", e, False) for e in EMBEDDINGS] + [("effective_rank", k, False) for k in ("cls", "patch_mean")]
    titles = {"attn": "kappa(K K^T), attention", "mlp": "kappa(K K^T), MLP", "cls": "effective rank, CLS",
              "patch_mean": "effective rank, mean patch"}
    panels = [p for p in panels if any(getattr(d, p[0]) is not None for _, d in results)]
    if not panels:
        return None
    cols = 4
    rows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.8 * rows), squeeze=False)
    for ax, (field_, key, log) in zip(axes.flat, panels):
        for name, d in results:
            values = getattr(d, field_) or {}
            xs = sorted(values)
            ys = [values[b][key].value if isinstance(values[b][key], Condition) else values[b][key] for b in xs]
            label = name if d.jacobian is None else f"{name} (kappa(JJ^T) {d.jacobian.short()})"
            line, = ax.plot([x for x, y in zip(xs, ys) if math.isfinite(y)], [y for y in ys if math.isfinite(y)],
                            marker="o", label=label)
            inf = [x for x, y in zip(xs, ys) if not math.isfinite(y)]
            if inf:
                ax.plot(inf, [1.0] * len(inf), marker="^", linestyle="none", color=line.get_color(),
                        transform=ax.get_xaxis_transform(), clip_on=False)
        ax.set_title(titles.get(key, f"ln kappa, {key} embedding"), fontsize=9)
        ax.set_xlabel("block", fontsize=8)
        if log:
            ax.set_yscale("log")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=8)
    fig.tight_layout(rect=(0, 0.06 + 0.03 * math.ceil(len(labels) / 3), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def check_settings(cfg: DictConfig) -> torch.device:
    check_rules(cfg, RULES)
    check_fraction(cfg)
    return resolve_device(cfg.device)


GAUSSIAN = "gaussian"


def _load_images(cfg: DictConfig, num: int, size: int, fraction: float | None = None) -> torch.Tensor:
    """``num`` images of ``size`` px (or ``fraction`` of them, evenly spaced: ``image_fraction``): read
    (``images`` a folder, or the default's val images), or with ``images=gaussian`` standard-normal pixels
    drawn from ``seed`` (the architecture's own conditioning, with no data: the generated scenes' flat colours
    make many tokens nearly equal, and J J^T nearly singular with them; docs/results.md). ``images=run``
    is read per backbone (``run_images.py``)."""
    if cfg.images == GAUSSIAN:
        return torch.randn(num, 3, size, size, generator=torch.Generator().manual_seed(int(cfg.seed)))
    return load_images(OmegaConf.merge(cfg, {"num_images": num, "image_size": size}), fraction).x


def run(cfg: DictConfig) -> dict[str, Any]:
    """Measure every backbone of ``cfg.ckpt`` and write the report; returns the written paths and results."""
    device = check_settings(cfg)
    set_cpu_threads(cfg.cpu_threads, 0)  # the images are read or drawn in this process
    specs = backbones_to_evaluate(cfg, families=FAMILIES)
    families = {family_of(s.args) for s in specs}
    if len(families) > 1:
        names = {f: ", ".join(s.name for s in specs if family_of(s.args) == f) for f in FAMILIES}
        raise ConvConditioningError(
            f"ckpt mixes ViT backbones ({names['vit']}) and CNN backbones ({names['timm']}), whose conditioning "
            "measures differ (a ViT's sub-blocks, a CNN's blocks); expected one family per call")
    if families == {"timm"}:
        if cfg.images == RUN:
            raise RunImagesError("images=run reads each ViT backbone's own validation split for its embeddings, and "
                                 "a CNN's blocks are measured on one image shared by every backbone; expected "
                                 "images=<folder>, gaussian or null with CNN backbones")
        check_conv_settings(cfg)
        models = [load_spec(spec, "cpu", seed=cfg.seed) for spec in specs]
        return run_conv(cfg, specs, models, _load_images(cfg, 1, int(cfg.image_size)), device)
    fraction = None if cfg.image_fraction is None else float(cfg.image_fraction)
    from_runs = cfg.images == RUN
    splits = [run_split(spec) for spec in specs] if from_runs else [None] * len(specs)  # checked before any read
    shared = None if from_runs else _load_images(cfg, int(cfg.num_images), int(cfg.image_size), fraction)
    shared_j = (_load_images(cfg, int(cfg.jacobian.images), int(cfg.jacobian.image_size))
                if "jacobian" in cfg.measures and not from_runs else None)
    models = [load_spec(spec, "cpu", seed=cfg.seed) for spec in specs]
    for model, spec, split in zip(models, specs, splits):
        check_backbone(model, spec, cfg, None if split is None else split.image_size)
    settings = settings_of(cfg)
    how_many = (f"{shared.shape[0]} images at {cfg.image_size} px" if shared is not None else
                "each run's own val images (" + (f"{fraction:g} of the split" if fraction is not None
                                                 else f"its first {cfg.num_images}") + ")")
    print(f"conditioning ({', '.join(cfg.measures)}): {how_many}, blocks "
          f"{cfg.layers}, Lanczos tol {cfg.solver.tol:g} / {cfg.solver.max_iter} products; backbones: "
          f"{', '.join(s.name for s in specs)}", flush=True)
    results: list[tuple[str, Diagnosis]] = []
    written: dict[str, Any] = {"json": {}, "results": {}}
    spectra: dict[str, Any] = {}
    ends: dict[str, Any] = {}
    for spec, model, split in zip(specs, models, splits):
        model = model.to(device)
        start = time.perf_counter()
        if split is None:
            images, j_images, size = shared, shared_j, int(cfg.image_size)
        else:  # images=run: the run's val split at its own size; kappa(J J^T) on the first of them
            images, size = split.load(fraction, int(cfg.num_images)), split.image_size
            j_images = images[: int(cfg.jacobian.images)] if "jacobian" in cfg.measures else None
            print(f"{spec.name}: {images.shape[0]} val images of {split.dataset.name} at {size} px", flush=True)
        if not has_finite_weights(model):
            print(f"{spec.name}: non-finite weights (the model diverged); its condition numbers are ∞, as the "
                  "paper's Table 5 reports them, and the embedding measures are skipped", flush=True)
        d = diagnose(model, images.to(device), settings, None if j_images is None else j_images.to(device),
                     progress=lambda m, n=spec.name: print(f"{n}: {m} ...", flush=True))
        record = {"backbone": spec.name, "args": shown_args(spec.args),
                  "image_size": size, "jacobian_image_size": size if split is not None else int(cfg.jacobian.image_size),
                  "jacobian_images": int(cfg.jacobian.images), "settings": OmegaConf.to_container(cfg, resolve=True),
                  **result_to_json(d)}
        if cfg.dense_check:
            record["dense"] = dense_values(model, images.to(device), j_images.to(device) if j_images is not None else None,
                                           d, cfg)
        if cfg.spectrum:  # seeds/003 Figs. 7-8
            record.update(spectrum_record(model, images.to(device)[:1], d.blocks, cfg))
            if "spectrum" in record:
                spectra[spec.name] = record["spectrum"]
            if "spectrum_ends" in record:
                ends[spec.name] = record["spectrum_ends"]
        save_record(spec, record, written, start)
        write_tensorboard(d, spec.out_dir)
        results.append((spec.name, d))
    folder = report_folder(cfg, specs)
    report = tables(results)
    written["table"] = write_text(folder / "conditioning.md", report)
    written["figure"] = figure(results, folder / "conditioning.png")
    written["spectrum"] = spectrum_figure(spectra, folder / "jacobian-spectrum.png", ends)
    print(report, flush=True)
    print(f"table: {written['table']}" + (f"\nfigure: {written['figure']}" if written["figure"] else "")
          + (f"\nspectrum: {written['spectrum']}" if written["spectrum"] else ""), flush=True)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_on_user_error(lambda: run(load_config("conditioning", argv)))

