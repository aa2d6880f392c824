"""The host memory of the training loader (``devices/host_memory.py``; issue 48, item 4): the micro-batch measured
from the method's views, the numbers ``docs/results.md`` states for DINO's paper recipe, the header's line, the
refusal of a loader this machine cannot hold in one sentence before anything is written, and the reading of the
machine's available memory."""
import random

import numpy as np
import pytest
import torch
from PIL import Image

from skipless import pretrain as pretrain_entry
from skipless import train as train_entry
from skipless.config import load_config
from skipless.devices import host_memory
from skipless.devices.host_memory import LoaderMemory, available_bytes, check_loader_fits, loader_host_bytes, size_text
from skipless.reports.summary import pretrain_header
from skipless.ssl import method_of
from skipless.supervised.augment import train_transform
from skipless.training.data import loader_memory
from tiny_runs import DINO_TINY, SUP_TINY

FLOAT32 = 4


def measured(cfg):
    method = method_of(cfg)
    return loader_memory(cfg, method.transform(cfg), method.collate)


def test_a_micro_batch_is_measured_from_the_methods_views_without_moving_a_generator(monkeypatch):
    """Nor PIL's pixel limit, which a read earlier in the process may have set below a crop of the generated image
    (tests/test_bad_images.py sets 4000 px)."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    states = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()
    dino = measured(load_config("pretrain", [*DINO_TINY, "train.global_batch=8"]))
    # 4 images of 2 global crops of 32 px and 2 local crops of 16 px, float32; 2 micro-batches per step
    assert dino == LoaderMemory(micro_batch=4 * 3 * (2 * 32 * 32 + 2 * 16 * 16) * FLOAT32, images=4, dtype="float32",
                                micro_batches=2, workers=0, prefetch=2, processes=1)
    mae = measured(load_config("pretrain", ["ssl=mae", "mae.input_size=32", "model.img_size=32",
                                            "train.batch_size_per_device=4", "train.num_workers=3"]))
    assert (mae.micro_batch, mae.workers, mae.per_process) == (4 * 3 * 32 * 32 * FLOAT32, 3, (3 * 2 + 1) * mae.micro_batch)
    cfg = load_config("train", SUP_TINY)
    transform = train_transform(cfg.aug)
    supervised = loader_memory(cfg, lambda image: (transform(image), 0))
    assert supervised.micro_batch == 4 * (3 * 32 * 32 * FLOAT32 + 8)  # and an int64 label each
    assert torch.equal(torch.get_rng_state(), states[0]) and np.array_equal(np.random.get_state()[1], states[1])
    assert random.getstate() == states[2] and Image.MAX_IMAGE_PIXELS == 100


def test_dinos_paper_recipe_on_one_gpu_holds_a_tenth_of_what_whole_step_items_held():
    """docs/results.md, "The loader's host memory": 1,024 images per step on one GPU, 10 workers, prefetch 2.
    Before, a loader item was the step's 16 micro-batches; now it is one."""
    memory = measured(load_config("pretrain", ["data=imagenet", "train.num_workers=10", "train.devices=1"]))
    image = 3 * (2 * 224 * 224 + 8 * 96 * 96) * FLOAT32  # 2 global crops + 8 local crops
    assert (memory.micro_batch, memory.micro_batches, memory.workers, memory.prefetch) == (64 * image, 16, 10, 2)
    step = 16 * memory.micro_batch
    assert size_text(step) == "2.14 GB"
    assert memory.per_process == loader_host_bytes(memory.micro_batch, 10, 2, step) == 4_812_963_840
    assert loader_host_bytes(step, 10, 2, step) == 44_920_995_840  # the whole-step items of before
    header = pretrain_header(load_config("pretrain", ["data=imagenet"]), loader=memory)
    assert ("\n  loader   4.81 GB of host memory per process: 10 workers x 2 micro-batches ahead + the step's 16 being "
            "gathered; a micro-batch is 64 images, 134 MB in float32\n") in header


@pytest.mark.parametrize("entry", ["pretrain", "train"])
def test_both_headers_state_the_loader_memory_the_plan_measured(tmp_path, entry):
    args = [*(DINO_TINY if entry == "pretrain" else SUP_TINY), "train.num_workers=2", "train.global_batch=8",
            f"run.root={tmp_path}"]
    cfg = load_config(entry, args)
    if entry == "pretrain":
        _, plan = pretrain_entry.check_config(cfg)
        header = pretrain_header(cfg, loader=plan.loader)
    else:
        plan = train_entry.check_config(cfg)
        header = train_entry.train_header(plan, 8, 4, 10)
    per_image = 3 * (2 * 32 * 32 + 2 * 16 * 16) * FLOAT32 if entry == "pretrain" else 3 * 32 * 32 * FLOAT32 + 8
    assert plan.loader.micro_batch == 4 * per_image and plan.loader.micro_batches == 2
    line = f"  loader   {size_text(6 * 4 * per_image)} of host memory per process: 2 workers x 2 micro-batches ahead"
    assert any(text.startswith(line) for text in header.splitlines()), header


@pytest.mark.parametrize("entry,module", [("pretrain", pretrain_entry), ("train", train_entry)])
def test_a_loader_this_machine_cannot_hold_is_one_sentence_before_anything_is_written(
        tmp_path, capsys, monkeypatch, entry, module):
    """2 workers x 2 micro-batches ahead + the step's 2: 6 micro-batches of 4 images, where 5 fit."""
    tiny = DINO_TINY if entry == "pretrain" else SUP_TINY
    args = [*tiny, "train.num_workers=2", "train.global_batch=8", f"data.root={tmp_path / 'data'}",
            f"run.root={tmp_path / 'runs'}"]
    micro = 4 * 3 * (2 * 32 * 32 + 2 * 16 * 16) * FLOAT32 if entry == "pretrain" else 4 * (3 * 32 * 32 * FLOAT32 + 8)
    monkeypatch.setattr(host_memory, "available_bytes", lambda: 5 * micro)
    assert module.main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err == (f"error: the training loader would hold {size_text(6 * micro)} of host memory (2 workers x 2 "
                   f"micro-batches ahead + the step's 2 being gathered; a micro-batch is 4 images, {size_text(micro)} "
                   f"in float32), more than the {size_text(5 * micro)} this machine has available; expected train.num_workers=1 or "
                   f"fewer (each worker holds 2 x {size_text(micro)}), or a smaller train.batch_size_per_device "
                   "(nothing was written)")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()


def test_a_step_that_alone_exceeds_the_memory_asks_for_a_smaller_global_batch():
    memory = LoaderMemory(micro_batch=10**6, images=8, dtype="float32", micro_batches=4, workers=2, prefetch=2,
                          processes=2)
    assert memory.per_node == 2 * (2 * 2 + 4) * 10**6
    with pytest.raises(Exception, match=r"16 MB of host memory on this node's 2 processes .* expected a smaller "
                                        r"train.global_batch or more devices: the step's 4 micro-batches alone take "
                                        r"4 MB per process \(nothing was written\)$"):
        check_loader_fits(memory, available=6 * 10**6)
    check_loader_fits(memory, available=16 * 10**6)  # exactly fits


def test_the_available_memory_is_meminfos_then_sysconfs_then_unknown(tmp_path, monkeypatch):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384 kB\nMemFree:         1024 kB\nMemAvailable:    4096 kB\n")
    monkeypatch.setattr(host_memory, "MEMINFO", meminfo)
    assert available_bytes() == 4096 * 1024
    monkeypatch.setattr(host_memory, "MEMINFO", tmp_path / "absent")
    pages = {"SC_AVPHYS_PAGES": 300, "SC_PAGE_SIZE": 4096}
    monkeypatch.setattr(host_memory.os, "sysconf", lambda name: pages[name])
    assert available_bytes() == 300 * 4096

    def unknown(name):
        raise ValueError(name)

    monkeypatch.setattr(host_memory.os, "sysconf", unknown)
    assert available_bytes() is None
    check_loader_fits(LoaderMemory(10**15, 8, "float32", 4, 2, 2))  # unknown: nothing refused


def test_on_the_device_path_the_workers_hand_over_uint8_crops_a_quarter_of_the_bytes():
    """data.augment_on=device (the default on GPUs): the workers' crops stay uint8 until the device colours them,
    so DINO's paper recipe on one GPU needs 1.2 GB of loader memory, under issue 48's 4 GB."""
    float_path, device_path = (measured(load_config("pretrain", ["data=imagenet", "train.num_workers=10", "train.devices=1",
                                                                 f"data.augment_on={where}"]))
                               for where in ("workers", "device"))
    assert device_path.dtype == "uint8" and float_path.dtype == "float32"
    assert device_path.micro_batch * FLOAT32 == float_path.micro_batch
    assert device_path.per_process == loader_host_bytes(device_path.micro_batch, 10, 2, 16 * device_path.micro_batch)
    assert size_text(device_path.per_process) == "1.2 GB"
