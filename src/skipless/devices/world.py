"""How many processes a training run has, whether they run on CUDA GPUs, and how its global batch is made
of them: the one reading of ``train.accelerator``, ``train.devices``, ``train.num_nodes`` and
``train.global_batch`` that the header, the lr rule, the loaders, the trainer and the resume check share.

``train.devices=auto`` means what it means to Lightning (``CUDAAccelerator.auto_device_count`` and
``CPUAccelerator.auto_device_count``): every GPU this process sees when the run goes on CUDA, one
process otherwise. It is resolved here, once, rather than refused, because a user who writes it
expects "all the GPUs of this machine", and the global batch, the peak lr and the schedules all
depend on the number it resolves to, so each reader must get the same number.

``training_threads`` is the CPU threads each of the run's processes gives torch: ``train.cpu_threads``, or
the rule of ``cpu_threads.py`` with the loader's workers and the processes on this node counted.

``augment_on`` is where a pretraining's colour augmentation runs (``data.augment_on``): its ``auto`` is
the training device on CUDA, the loader's workers otherwise.

``isolated_rng`` is the one way a monitor that draws or seeds random numbers gives the training's
generators back untouched.

``check_gpus_visible`` refuses a request for more GPUs than this machine shows, before anything is
written: Lightning's ``auto`` accelerator would otherwise train ``GPUS=2`` as two CPU processes, with the
lr scaled for their global batch. DDP on the CPU is asked for by name (``train.accelerator=cpu``).

The global batch: ``train.global_batch`` null is ``batch_size_per_device x world size``, as before the
key existed. Set (the paper recipes set their papers' batch), each optimizer step accumulates the
gradients of ``k = global_batch / (batch_size_per_device x world size)`` micro-batches per device
(``accumulation_steps``); a ``k`` that is not a whole number is refused in one sentence that lists what
would divide (``check_global_batch``). Each device then takes ``k x batch_size_per_device`` images per
step (``batch_per_device_step``), which the loader deals as ``k`` micro-batches of ``batch_size_per_device``
(``training/loader_state.py``) and the training modules step through (``training/micro_batches.py``).
"""
from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager

import torch

from ..config import ConfigError
from .cpu_threads import cpu_threads


def runs_on_cuda(cfg: Mapping) -> bool:
    """The run trains on CUDA GPUs: ``accelerator`` cuda, or gpu / auto on a machine where CUDA is
    available (Lightning picks CUDA first for both)."""
    accelerator = cfg["train"]["accelerator"]
    return accelerator == "cuda" or (accelerator in ("gpu", "auto") and torch.cuda.is_available())


AUGMENT_ON = ("auto", "device", "device_crops", "workers")


def augment_on(cfg: Mapping) -> str:
    """``data.augment_on`` resolved: ``device`` (DINO's colour augmentation batched on the training device,
    ``ssl/dino/self_distillation.py``), ``device_crops`` (the crops, flips and resizes there too: the workers
    only decode and draw the boxes) or ``workers`` (all of it in the loader's workers); ``auto`` is ``device``
    when the run trains on CUDA, where the GPU has time to spare and the workers do not, else ``workers``."""
    value = str(cfg["data"]["augment_on"])
    if value == "auto":
        return "device" if runs_on_cuda(cfg) else "workers"
    return value


def devices_of(cfg: Mapping) -> int:
    """Processes per node: ``train.devices``, or on ``auto`` the visible GPUs of a CUDA run (else 1)."""
    devices = cfg["train"]["devices"]
    if devices != "auto":
        return int(devices)
    return max(1, torch.cuda.device_count()) if runs_on_cuda(cfg) else 1


def world_size(cfg: Mapping) -> int:
    """Processes the run trains with: devices per node x ``train.num_nodes``."""
    return devices_of(cfg) * int(cfg["train"]["num_nodes"])


def training_threads(cfg: Mapping) -> int:
    """torch's CPU threads in each process of the run: ``train.cpu_threads``, or (null) ``cpu_threads``'s
    rule with ``train.num_workers`` loader processes beside each of the node's ``devices_of(cfg)``
    processes. The entry points set it (``torch.set_num_threads``) and print it in the header."""
    t = cfg["train"]
    return cpu_threads(t["cpu_threads"], int(t["num_workers"]), processes=devices_of(cfg))


def check_gpus_visible(cfg: Mapping) -> None:
    """Refuse ``train.devices=N`` (``GPUS=N``) on a GPU accelerator (``auto``, ``gpu``, ``cuda``) when this
    machine shows fewer than N GPUs; one process under ``auto`` is the CPU run Lightning falls back to."""
    accelerator, devices = cfg["train"]["accelerator"], cfg["train"]["devices"]
    if accelerator not in ("auto", "gpu", "cuda") or devices == "auto":
        return
    seen, wanted = torch.cuda.device_count(), int(devices)
    if wanted <= seen or (accelerator == "auto" and wanted == 1):
        return
    asked = f"GPUS={wanted} (train.devices={wanted}, train.accelerator={accelerator}) asks for {wanted} GPU" + \
        ("s" if wanted > 1 else "")
    fits = (f"expected GPUS= at most {seen} (the GPUs CUDA_VISIBLE_DEVICES leaves visible)" if seen else
            "run it where GPUs are visible")
    raise ConfigError(f"{asked} and this machine shows {'only ' + str(seen) if seen else 'none'}; {fits}, or ask "
                      f"for processes on the CPU by name with ARGS=\"train.accelerator=cpu train.devices={wanted}\" "
                      "(nothing was written)")


def isolated_rng(device: torch.device | str) -> AbstractContextManager:
    """``torch.random.fork_rng`` over the CPU generator and, when ``device`` is a GPU, that GPU's generator:
    whatever runs inside (a ``torch.manual_seed``, a random init, dropout) leaves both as they were.

    The GPU's must be forked too: ``torch.manual_seed`` reseeds every CUDA generator, and a run draws on its
    GPU (MAE's masks, DINO's drop-path), so a monitor that seeded inside a CPU-only fork would restart
    those draws from the same seed at every start and resume, whatever ``run.seed`` says. Only this
    process's own GPU is forked: the others it can see draw nothing for this run, and forking them would
    open a CUDA context on each."""
    device = torch.device(device)
    return torch.random.fork_rng(devices=[device] if device.type == "cuda" else [])


def global_batch(cfg: Mapping, world: int | None = None) -> int:
    """The images of one optimizer step over all processes: ``train.global_batch``, or when it is null
    ``batch_size_per_device x world`` (``world``: the trainer's world size; by default ``world_size``)."""
    target = cfg["train"]["global_batch"]
    if target is not None:
        return int(target)
    return int(cfg["train"]["batch_size_per_device"]) * (world or world_size(cfg))


def accumulation_steps(cfg: Mapping, world: int | None = None) -> int:
    """The micro-batches each process accumulates per optimizer step: ``global_batch / (batch_size_per_device
    x world)``, 1 when ``train.global_batch`` is null; ``ConfigError`` when it is not a whole number."""
    check_global_batch(cfg, world)
    target, per_device = cfg["train"]["global_batch"], int(cfg["train"]["batch_size_per_device"])
    return 1 if target is None else int(target) // (per_device * (world or world_size(cfg)))


def batch_per_device_step(cfg: Mapping, world: int | None = None) -> int:
    """The images each process loads per optimizer step: ``batch_size_per_device x accumulation_steps``."""
    return int(cfg["train"]["batch_size_per_device"]) * accumulation_steps(cfg, world)


def check_global_batch(cfg: Mapping, world: int | None = None) -> None:
    """Refuse a ``train.global_batch`` that ``batch_size_per_device x world`` does not divide, in one sentence
    naming the global batches, per-device batches and device counts that would."""
    target = cfg["train"]["global_batch"]
    if target is None:
        return
    target, per_device = int(target), int(cfg["train"]["batch_size_per_device"])
    world = world or world_size(cfg)
    step = per_device * world
    if target % step == 0:
        return
    below, above = target // step * step, (target // step + 1) * step
    ways = [f"a global batch that is a multiple of {step} (" + (f"{below} or " if below else "") + f"{above})"]
    fits = [b for b in range(min(per_device, target // world), 0, -1) if not target % (b * world)][:3]
    if fits:
        ways.append(f"train.batch_size_per_device={' or '.join(map(str, fits))} (dividing {target} / {world} = "
                    f"{target // world})")
    counts = [w for w in range(1, 2 * world + 9) if not target % (per_device * w)][-3:]
    if counts:
        ways.append(f"{' or '.join(map(str, counts))} devices (GPUS= x NODES=)")
    raise ConfigError(
        f"train.global_batch={target} is not a whole number of micro-batches of train.batch_size_per_device="
        f"{per_device} on {world} device{'s' if world > 1 else ''} ({step} images each); expected "
        f"{', '.join(ways[:-1]) + ', or ' if len(ways) > 1 else ''}{ways[-1]} (nothing was written)")
