"""What a run will do, in a few lines: printed by an entry point before it starts.

``describe_model`` takes a ``model`` config section or the ``skipless_args`` a backbone file
carries, so an evaluator can print the model it loaded the same way; ``pretrain_header`` is the
header of a pretraining run with any method (the model, the method's own lines, epochs, global batch
and effective peak lr, exports; ``train.py`` writes the supervised one); ``peak_lr`` is the one place
the scaling rule every method uses is written (the linear rule of DINO and MAE: lr x lr_scale x global
batch / 256), and ``describe_batch`` the one place the global batch is spelt out (per device x devices
x accumulation); ``loader_line`` states the host memory of the training loader (``devices/host_memory.py``).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..models.decay import DEFAULT_ALPHA_MIN
from ..models.init import CUTSKIP_DEFAULTS
from ..devices.cpu_threads import threads_reason
from ..devices.host_memory import LoaderMemory
from ..devices.world import accumulation_steps, devices_of, global_batch, training_threads, world_size


def peak_lr(cfg: Mapping, world: int | None = None) -> float:
    """The lr at the end of the warm-up: ``optim.lr * optim.lr_scale * global_batch / 256``, or ``optim.lr`` itself
    for a config without ``optim.lr_scale`` (the language model's, whose lr is stated as it trains, as its anchor
    flame states it per run: ``lr_rule``).

    ``world`` is the number of processes (the trainer's world size once it runs); by default the
    config's devices x nodes (``world.world_size``, which resolves ``train.devices=auto``). The global
    batch counts the accumulated micro-batches (``world.global_batch``): ``train.global_batch`` when set.
    """
    o = cfg["optim"]
    if o.get("lr_scale") is None:
        return float(o["lr"])
    return float(o["lr"]) * float(o["lr_scale"]) * global_batch(cfg, world) / 256.0


def lr_rule(cfg: Mapping) -> str:
    """How the peak lr comes from the keys: ``model.lr.adamw=0.0005 x optim.lr_scale 4.8 x global batch / 256``,
    or ``model.lr.adamw=0.0003, not scaled with the batch`` (``peak_lr``)."""
    o = cfg["optim"]
    head = f"{lr_key(cfg)}={float(o['lr']):g}"
    if o.get("lr_scale") is None:
        return f"{head}, not scaled with the batch"
    return f"{head} x optim.lr_scale {float(o['lr_scale']):g} x global batch / 256"


def module_peak_lr(module: Any) -> float:
    """``peak_lr`` of a training module's ``cfg`` at its trainer's world size once a trainer runs it (before: the
    config's): the lr its schedule peaks at and a divergence message names, the same rule for every method (DINO's
    and MAE's linear scaling, the supervised recipes')."""
    trainer = getattr(module, "_trainer", None)
    return peak_lr(module.cfg, trainer.world_size if trainer is not None else None)


def describe_batch(cfg: Mapping, world: int | None = None) -> str:
    """``1024 = 64/device x 8 devices x 2 accumulation steps`` (``train.global_batch=1024``), or
    ``32 = 32/device x 1 device, no accumulation`` (null, or a global batch one step fills); raises the
    ``ConfigError`` of ``world.check_global_batch`` for a global batch the devices do not divide."""
    world = world or world_size(cfg)
    steps = accumulation_steps(cfg, world)
    per_device = int(cfg["train"]["batch_size_per_device"])
    made = f"{per_device}/device x {world} device{'s' if world > 1 else ''}"
    tail = f" x {steps} accumulation steps" if steps > 1 else ", no accumulation"
    return f"{global_batch(cfg, world)} = {made}{tail}"


def lr_key(cfg: Mapping) -> str:
    """The key that sets the base lr: the model preset's ``model.lr.<optim>``, unless ``optim.lr``
    was overridden to another value."""
    name = cfg["optim"]["name"]
    from_model = cfg["model"].get("lr", {}).get(name)
    return f"model.lr.{name}" if from_model is not None and float(from_model) == float(cfg["optim"]["lr"]) \
        else "optim.lr"


def number_text(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x).lower() if isinstance(x, bool) else str(x)


def describe_model(m: Mapping) -> str:
    """``vit_small/16, 12 blocks, residual skipless, init cutskip (alpha 1.8 ...), pooling token, drop-path 0``.

    Settings at their default are left out: the decay's indexing, branches and zero-init (``decay per
    layer``, ``decay attn only``, ``branch outputs not zeroed``) and a fixed position table (``pos-embed sincos``) show only when chosen."""
    if m.get("family", "vit") != "vit":  # another timm model (models/timm_family.py): timm's skips and init
        graying = m.get("token_graying") or {}
        method = graying.get("method") or "none"
        given = ", ".join(f"{k}={v}" for k, v in (m.get("timm_args") or {}).items())
        skips = "without its skips" if m.get("residual") == "skipless" else "its own skips"
        parts = [f"{m['timm_name']} (timm, {skips} and init)" + (f" ({given})" if given else "")]
        if method != "none":
            eps = graying.get("eps")
            parts.append(f"token graying {method} eps {number_text(0.95 if eps is None else eps)} on "
                         f"{m.get('patch_size')}-px patches")
        parts.append(f"drop-path {number_text(m.get('drop_path_rate', 0.0))}")
        return ", ".join(parts)
    depth = m.get("depth")
    parts = [f"{m['arch']}/{m.get('patch_size') or 16}" + (f", {depth} blocks" if depth else ""),
             f"residual {m['residual']}"]
    init = str(m.get("init", "timm"))
    given = {k: v for k, v in (m.get("init_args") or {}).items() if v is not None}
    if init == "cutskip":  # null entries are create_vit's defaults, printed as the values they take
        args = {**CUTSKIP_DEFAULTS, **given}
        init += " (" + ", ".join(f"{k} {number_text(args[k])}" for k in CUTSKIP_DEFAULTS) + ")"
    parts.append(f"init {init}")
    if m["residual"] == "decayed":
        alpha_min = m.get("alpha_min")
        parts.append(f"alpha_min {number_text(DEFAULT_ALPHA_MIN if alpha_min is None else alpha_min)}")
        decay = m.get("decay") or {}  # a config section nests them; skipless_args name them decay_*
        indexing = decay.get("indexing", m.get("decay_indexing", "sub_block"))
        branches = decay.get("branches", m.get("decay_branches", "both"))
        if indexing == "layer":
            parts.append("decay per layer")
        if branches != "both":
            parts.append(f"decay {branches} only")
        if not decay.get("zero_init", m.get("decay_zero_init", True)):
            parts.append("branch outputs not zeroed")
    if m.get("pos_embed", "learned") != "learned":
        parts.append(f"pos-embed {m['pos_embed']}")
    parts.append(f"pooling {m.get('global_pool', 'token')}")
    parts.append(f"drop-path {number_text(m.get('drop_path_rate', 0.0))}")
    return ", ".join(parts)


def memory_lines(m: Mapping) -> list[str]:
    """The header's line for ``model.grad_checkpointing`` (none when it is off)."""
    if not m.get("grad_checkpointing"):
        return []
    return ["  memory   activation checkpointing (model.grad_checkpointing): each block's activations are "
            "recomputed in the backward pass"]


def loader_lines(memory: LoaderMemory | None) -> list[str]:
    """The header's line on the training loader's host memory (none where it was not measured)."""
    return [] if memory is None else [f"  loader   {memory.describe()}"]


def threads_line(cfg: Mapping) -> str:
    """The header's line for torch's CPU threads (``world.training_threads``): the number, and where it came from."""
    t = cfg["train"]
    n = training_threads(cfg)
    why = threads_reason(t["cpu_threads"], int(t["num_workers"]), devices_of(cfg), key="train.cpu_threads")
    return f"  threads  {n} CPU thread{'s' if n != 1 else ''} per process ({why})"


def pretrain_header(cfg: Mapping, run_dir: Any = None, precision: str | None = None,
                    method_lines: Sequence[str] = (), loader: LoaderMemory | None = None) -> str:
    """The lines ``make pretrain`` prints before it starts (``cfg`` is a resolved pretraining config;
    ``precision``: what ran and why, ``training.precision.describe_precision``; ``method_lines``: the
    method's own lines, ``skipless.ssl.Method.header``, e.g. DINO's crops, head and teacher; ``loader``: the
    training loader's host memory, ``RunPlan.loader``)."""
    m, o, t = cfg["model"], cfg["optim"], cfg["train"]
    choices = cfg.get("choices") or {}
    key = lr_key(cfg)
    lr = (f"peak lr {peak_lr(cfg):.3g} = {key} {number_text(float(o['lr']))} x optim.lr_scale "
          f"{number_text(float(o['lr_scale']))} x {global_batch(cfg)}/256")
    exports = ", ".join(str(e) for e in t.get("export_epochs") or []) or "none"
    where = f" -> {run_dir}" if run_dir is not None else ""
    return "\n".join([
        f"skipless pretrain: ssl={cfg.get('ssl', 'dino')} model={m['name']} optim={o['name']} "
        f"data={cfg['data']['name']} recipe={choices.get('recipe', '-')}{where}",
        f"  model    {describe_model(m)}",
        *(f"  {line}" for line in method_lines),
        f"  train    {t['epochs']} epochs, global batch {describe_batch(cfg)}, {o['name']}, {lr}",
        *memory_lines(m),
        *loader_lines(loader),
        f"  exports  backbone.pt (latest); backbone-epoch<N>.pt at epochs: {exports}",
        *([f"  precision {precision}"] if precision else []),
        threads_line(cfg),
    ])
