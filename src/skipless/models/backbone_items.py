"""Which backbones a ``CKPT`` names: ``CKPT="runs/a runs/b random"`` -> loaded models.

The grammar of ``CKPT`` items, shared by every evaluator (``eval/shared/backbones.py`` takes it from here)
and by fine-tuning (``make finetune``, which trains the backbone an item names). Every evaluator
(probe, TokenCut, PCA) takes a ``ckpt`` setting with one or more items, separated
by spaces or commas and quoted like a shell line where a path holds either (``split_items``):

- a run folder (``runs/skipless-adamw-default``): its exported teacher ``backbone.pt``;
- a backbone file (``runs/x/backbone-epoch200.pt``) written by ``save_backbone``;
- a plain state dict in timm's names with its architecture after a colon,
  ``dino_deitsmall16_pretrain.pth:vit_small`` (DINO's released ViT-S/16; ``vit_tiny``,
  ``vit_small``, ``vit_base``; patch size and grid are read from the weights, so ViT-S/8 or /14
  files load as ``:vit_small`` too). Wrapped training checkpoints (``teacher``, ``state_dict``,
  ``model``, ``student``) and ``module.``/``backbone.`` prefixes are accepted; see
  ``skipless.models.checkpoint``;
- ``timm:<name>``, timm's pretrained weights from the local Hugging Face cache, never downloaded
  (``timm:vit_small_patch16_224.dino``); see ``skipless.models.timm_weights``;
- ``init:<model>`` or ``init:<model>:<arch>``: the backbone ``make pretrain MODEL=<model>`` starts
  from (a ``configs/model/`` preset at initialisation, with the paper's recipe: ViT-S unless an arch
  is named), seeded; e.g. ``CKPT="init:skip init:skipless init:skipless-plain"`` compares the
  initialisations themselves (``make conditioning``);
- ``random``: a freshly initialised backbone with the same architecture, residual mode and
  initialisation as the first real checkpoint in the list (or the newest run when there is none),
  seeded, so every evaluator has its floor;
- nothing: the newest run under ``runs/`` (by the time its ``backbone.pt`` was written).

Results go to ``<run>/eval/`` of each checkpoint (``<run>/eval/backbone-epoch200/`` for
``runs/x/backbone-epoch200.pt``); the random floor writes to ``runs/random-<...>/eval``,
a plain state dict to ``runs/<file stem>/eval`` and timm weights to ``runs/timm-<name>/eval``. With an
output folder (every evaluator's ``out=<folder>``, e.g. for a backbone on a read-only disk) each
backbone writes to ``<out>/<name>/`` instead (the random floor to ``<out>/random-<...>/``).
Only the model layer and below is imported here, never training code (evaluators never depend on how a
backbone was trained).
"""
from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import torch

from ..errors import SkiplessError
from ..devices.world import isolated_rng
from .causal_lm import LM_ARCHS, LM_FAMILY, causal_lm_from_args
from .checkpoint import ArchRequiredError, BackboneLoadError, load_backbone, read_backbone_args
from .compile import compile_blocks
from .timm_family import backbone_from_args, family_of, model_name
from .timm_weights import cached_weights, load_timm_backbone, timm_backbone_args
from .vit import ARCHS, create_vit, freeze_for_eval

RANDOM = "random"
TIMM_PREFIX = "timm:"
INIT_PREFIX = "init:"


class BackboneNotFoundError(SkiplessError, FileNotFoundError):
    """A ``CKPT`` item that names no backbone; the message says what was expected."""


@dataclass(frozen=True)
class BackboneSpec:
    """One backbone to evaluate.

    Attributes:
        name: its label in tables and figures (the run folder's name, the file's stem, or ``random``).
        path: the backbone file, or None for the random floor.
        out_dir: where evaluators write their results (``<run>/eval``, or ``<out>/<name>``).
        args: the ``create_vit`` arguments (arch, residual, init, ...) stored with the weights.
        kind: ``skipless`` (a ``save_backbone`` file), ``state_dict`` (a plain state dict, ``args``
            inferred), ``timm`` (timm's cached weights; ``path`` is the cached file), ``init`` (a
            model preset at initialisation) or ``random``.
        timm_name: for ``timm``: the timm model name; for ``init``: the config overrides that
            describe the preset (``model=<model>``, ...).
    """

    name: str
    path: Path | None
    out_dir: Path
    args: dict[str, Any]
    kind: str = "skipless"
    timm_name: str | tuple[str, ...] | None = None

    @property
    def is_random(self) -> bool:
        """No file: a backbone built at initialisation (the random floor or an ``init:`` preset)."""
        return self.path is None


def _stored_args(path: Path) -> dict[str, Any]:
    try:
        return read_backbone_args(path)
    except ArchRequiredError as err:
        raise BackboneLoadError(
            f"{path} is a plain state dict without model arguments; name its architecture after a colon, "
            f"CKPT=\"{path}:vit_small\" (one of {', '.join(ARCHS)})") from err


def run_config_value(run: Path, key: str) -> Any:
    """``key`` (dotted) of a run's saved ``config.yaml``, or None when the file or the key is missing."""
    from omegaconf import OmegaConf

    path = Path(run) / "config.yaml"
    return OmegaConf.select(OmegaConf.load(path), key) if path.is_file() else None


def run_family(run: Path) -> str:
    """The model family of a run, from its saved ``config.yaml``: ``model.family`` when it says one (``timm``), ``lm``
    for a language model (``make lm``'s config names an ``LM_ARCHS`` preset in ``model.arch`` and no family), else
    ``vit``."""
    family = run_config_value(run, "model.family")
    if family is not None:
        return str(family)
    return LM_FAMILY if run_config_value(run, "model.arch") in LM_ARCHS else "vit"


def newest_run(runs_root: str | os.PathLike = "runs", fine_tunings: bool = True,
               families: Sequence[str] = ("vit",)) -> Path | None:
    """The run folder whose ``backbone.pt`` was written last, or None. Runs of a model family not in ``families``
    (``make train MODEL=resnet`` is ``timm``, which only k-NN, linear and t-SNE read; ``make lm``'s are ``lm``, which
    only ``make zeroshot`` reads: ``run_family``) are passed over, and so are fine-tunings (``make finetune``'s runs)
    when ``fine_tunings`` is false."""
    found = [p for p in Path(runs_root).glob("*/backbone.pt") if p.is_file()
             and run_family(p.parent) in families
             and (fine_tunings or run_config_value(p.parent, "finetune") is None)]
    return max(found, key=lambda p: p.stat().st_mtime).parent if found else None


def split_items(ckpt: str | Sequence[str] | None) -> list[str]:
    """``'runs/a "runs/my run",random'`` or a list -> ``["runs/a", "runs/my run", "random"]``.

    A string is split like a shell line (``shlex``), on spaces and commas, so a path that holds
    either is one item when quoted or escaped; a string that is itself an existing path is one item
    (the config parser has already taken the quotes off ``ckpt="runs/my run"``). A list's elements
    are items as they are."""
    if ckpt is None:
        return []
    if not isinstance(ckpt, str):
        return [str(item) for item in ckpt if str(item).strip()]
    text = ckpt.strip()
    if text and os.path.exists(text):
        return [text]
    lexer = shlex.shlex(text, posix=True)
    lexer.whitespace += ","
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError as err:  # an unclosed quote or a trailing backslash
        raise BackboneNotFoundError(
            f"CKPT={text} cannot be split into items ({err}); quote an item that holds spaces or commas as a "
            'whole, e.g. CKPT=\'"runs/my run" random\'') from None


def _timm_spec(item: str, runs_root: Path) -> BackboneSpec:
    name = item[len(TIMM_PREFIX):]
    if not name:
        raise BackboneNotFoundError("CKPT item 'timm:' names no model; expected timm:<name>, e.g. "
                                    "timm:vit_small_patch16_224.dino")
    file = cached_weights(name)
    label = f"timm-{name}"
    return BackboneSpec(label, file, runs_root / label / "eval", timm_backbone_args(name), "timm", name)


def _state_dict_spec(path: Path, arch: str, runs_root: Path) -> BackboneSpec:
    if arch not in ARCHS:
        raise BackboneNotFoundError(f"unknown architecture {arch!r} in CKPT item {path}:{arch}; "
                                    f"expected one of: {', '.join(ARCHS)}")
    if not path.is_file():
        raise BackboneNotFoundError(f"no state dict at {path}; expected <file>:<arch>, "
                                    "e.g. dino_deitsmall16_pretrain.pth:vit_small")
    return BackboneSpec(path.stem, path, runs_root / path.stem / "eval", read_backbone_args(path, arch),
                        "state_dict")


def _file_spec(item: str, runs_root: Path) -> BackboneSpec:
    path = Path(item)
    if not path.exists() and ":" in item:
        file, arch = item.rsplit(":", 1)
        return _state_dict_spec(Path(file), arch, runs_root)
    if path.is_dir():
        file = path / "backbone.pt"
        if not file.is_file():
            raise BackboneNotFoundError(
                f"run folder {path} has no backbone.pt; expected a folder written by `make pretrain` "
                "(the teacher is exported at every epoch end) or a backbone file")
        return BackboneSpec(path.name, file, path / "eval", _stored_args(file))
    if path.is_file():
        if path.suffix == ".ckpt":
            raise BackboneNotFoundError(
                f"{path} is a Lightning training checkpoint; evaluators read the exported teacher: "
                f"pass its run folder ({path.parent.parent}) or a backbone*.pt file")
        if path.stem == "backbone":
            return BackboneSpec(path.parent.name, path, path.parent / "eval", _stored_args(path))
        # another checkpoint of the run (backbone-epoch200.pt): its own folder, so its results never
        # overwrite those of the run's final backbone (the result files are named by evaluator, not backbone)
        return BackboneSpec(f"{path.parent.name}-{path.stem}", path, path.parent / "eval" / path.stem,
                            _stored_args(path))
    raise BackboneNotFoundError(
        f"no backbone at {path}; expected a run folder with backbone.pt (runs/<name>), a backbone "
        "file, <state dict file>:<arch>, timm:<name>, or 'random'")


def _init_overrides(item: str) -> tuple[str, tuple[str, ...]]:
    """``init:<model>[:<arch>]`` -> (label, the pretraining config overrides of that backbone)."""
    from omegaconf import OmegaConf

    from ..config import CONFIG_DIR, available

    parts = item[len(INIT_PREFIX):].split(":")
    # the ViT presets: a model.family=timm group (make train MODEL=swin-s) is not a backbone the evaluators read
    models = [m for m in available("model")
              if OmegaConf.load(CONFIG_DIR / "model" / f"{m}.yaml").model.get("family", "vit") == "vit"]
    if len(parts) > 2 or parts[0] not in models or (len(parts) == 2 and parts[1] not in ARCHS):
        raise BackboneNotFoundError(
            f"CKPT item {item!r} names no model preset; expected init:<model> or init:<model>:<arch> with a "
            f"model among {', '.join(models)} and an arch among {', '.join(ARCHS)}, e.g. init:skipless-plain")
    overrides = (f"model={parts[0]}", "recipe=paper") + ((f"model.arch={parts[1]}",) if len(parts) == 2 else ())
    return "init-" + "-".join(parts), overrides


def init_args_of(overrides: Sequence[str]) -> dict[str, Any]:
    """The ``create_vit`` arguments of a model preset (``init:`` items), from the pretraining config."""
    from ..config import load_config
    from .from_config import vit_args

    return vit_args(load_config("pretrain", list(overrides)).model)


def _init_spec(item: str, runs_root: Path) -> BackboneSpec:
    label, overrides = _init_overrides(item)
    return BackboneSpec(label, None, runs_root / label / "eval", init_args_of(overrides), "init", overrides)


def _item_spec(item: str, runs_root: Path) -> BackboneSpec:
    if item.startswith(TIMM_PREFIX):
        return _timm_spec(item, runs_root)
    if item.startswith(INIT_PREFIX):
        return _init_spec(item, runs_root)
    return _file_spec(item, runs_root)


def check_family(spec: BackboneSpec, families: Sequence[str]) -> None:
    """Refuse, in one sentence, a backbone whose family (``vit``, ``timm``) the reader does not take."""
    family = family_of(spec.args)
    if family not in families:
        raise BackboneLoadError(
            f"{spec.name} is a {model_name(spec.args)} (model.family={family}), and this command reads ViT backbones "
            "only (their blocks, patches or class token); expected a ViT backbone, or make knn, make linear "
            "inputs=[pooled] or make tsne feature=pooled, which read such a backbone's pooled feature")


def resolve_backbones(ckpt: str | Sequence[str] | None, runs_root: str | os.PathLike = "runs",
                      out: str | os.PathLike | None = None, floor: bool = False,
                      families: Sequence[str] = ("vit",)) -> list[BackboneSpec]:
    """Turn a ``CKPT`` setting into backbone specs, in the order given (see the module docstring);
    ``out``: write every backbone's results to ``<out>/<name>/`` instead of its own ``eval/`` folder;
    ``floor``: a ``CKPT`` of one trained backbone (a run, a file, timm weights) gets ``random`` after it,
    a seeded random init of its architecture, so that its number is read beside its floor; ``families``: the
    model families the reader takes (``check_family``; a timm model's pooled features: k-NN, linear, t-SNE)."""
    items = split_items(ckpt)
    runs_root = Path(runs_root)
    if not items:
        run = newest_run(runs_root, families=families)
        if run is None:
            raise BackboneNotFoundError(
                f"no pretraining run with a backbone.pt under {runs_root}/; run `make pretrain` first or "
                "pass CKPT=<run folder or backbone file> (CKPT=random evaluates a random backbone)")
        items = [str(run)]
    if floor and len(items) == 1 and items[0] != RANDOM and not items[0].startswith(INIT_PREFIX):
        items.append(RANDOM)
    specs: list[BackboneSpec | None] = [None if item == RANDOM else _item_spec(item, runs_root) for item in items]
    real = [s for s in specs if s is not None and s.kind != "init"] or [s for s in specs if s is not None]
    if len(real) < len(specs):
        if real:
            reference = real[0].args
        else:
            run = newest_run(runs_root, families=families)
            if run is None:
                raise BackboneNotFoundError(
                    "CKPT=random copies the architecture of a checkpoint, and there is none: pass one "
                    f"as well (CKPT=\"runs/<name> random\") or run `make pretrain` first (looked in {runs_root}/)")
            reference = _stored_args(run / "backbone.pt")
        tag = "-".join(str(v) for v in (model_name(reference), reference.get("residual"), reference.get("init"))
                       if v is not None)
        floor = BackboneSpec(RANDOM, None, runs_root / f"random-{tag}" / "eval", dict(reference), RANDOM)
        specs = [floor if s is None else s for s in specs]
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BackboneNotFoundError(f"CKPT names the same backbone twice ({', '.join(duplicates)}); give each once")
    for spec in specs:
        check_family(spec, families)
    if out is not None:
        specs = [replace(s, out_dir=Path(out) / (s.out_dir.parent.name if s.is_random else s.name)) for s in specs]
    return specs  # type: ignore[return-value]


def spec_model(spec: BackboneSpec, seed: int = 0, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The backbone of ``spec`` as it is stored, trainable, on the CPU (one built at initialisation drawn with
    ``seed``, leaving the generators of the CPU and of ``device`` as they were): what ``load_spec`` freezes for
    an evaluator and fine-tuning trains."""
    if spec.kind == "init":
        from ..config import load_config
        from .from_config import vit_from_config

        with isolated_rng(device):
            torch.manual_seed(seed)
            return vit_from_config(load_config("pretrain", list(spec.timm_name)).model)
    if spec.is_random:
        args = {k: v for k, v in spec.args.items() if k != "arch"}
        with isolated_rng(device):
            torch.manual_seed(seed)
            if family_of(spec.args) == LM_FAMILY:
                return causal_lm_from_args(spec.args)
            if family_of(spec.args) != "vit":
                return backbone_from_args(spec.args)
            return create_vit(spec.args["arch"], **args)
    if spec.kind == "timm":
        return load_timm_backbone(spec.timm_name)
    if spec.kind == "state_dict":
        return load_backbone(spec.path, map_location="cpu", arch=spec.args["arch"])
    return load_backbone(spec.path, map_location="cpu")


def load_spec(spec: BackboneSpec, device: str | torch.device = "cpu", seed: int = 0,
              compile: bool = False) -> torch.nn.Module:
    """The frozen backbone of ``spec`` on ``device`` (the random floor is built with ``seed``); its
    blocks compiled in place with ``compile`` (``skipless.models.compile``: eager on failure)."""
    model = freeze_for_eval(spec_model(spec, seed, device), device)
    compile_blocks(model, compile)
    return model


def backbone_key(spec: BackboneSpec, seed: int) -> dict[str, Any]:
    """What identifies a backbone's weights in a feature cache's key: its file (resolved path, mtime,
    size), or for one built at initialisation its kind, arguments and seed."""
    if spec.is_random:
        return {"random": True, "kind": spec.kind, "seed": int(seed), "args": json.loads(json.dumps(spec.args, default=str))}
    stat = Path(spec.path).stat()
    return {"path": str(Path(spec.path).resolve()), "mtime_ns": stat.st_mtime_ns, "size": stat.st_size}
