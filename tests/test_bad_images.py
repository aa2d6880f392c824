"""Bad files never end a run (issue 46, item 6): every unreadable image is skipped and named once with
its reason, a decompression bomb is refused before it is decoded, small images are named and trained on,
the names survive a resume, a killed write's leftovers go at the next start, and atomic writes reach the disk."""
import errno
import json
import os
import struct
import zlib
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image, ImageFile
from torch.utils.data import DataLoader

from skipless.atomic import DiskFullError, atomic_write
from skipless.config import ConfigError, load_config
from skipless.data.classification.labelled import LabelledImages
from skipless.data.image_folder import ImageFolderDataset
from skipless.data.reads import READ_ERRORS, OversizedImageError, decode_rgb, unreadable_kind
from skipless.pretrain import check_keys
from skipless.supervised.schema import check_train_config
from skipless.training.data import SMALL, SkipTally
from skipless.training.run_start import RunStart, record_start
from skipless.training.run_summary import RunSummary

PIL_DEFAULT = 89478485  # PIL's Image.MAX_IMAGE_PIXELS, the YAML's default


def png_claiming(path: Path, width: int, height: int) -> Path:
    """A PNG of a few dozen bytes whose header says ``width`` x ``height`` (a decompression bomb's header)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 16))
                     + chunk(b"IEND", b""))
    return path


def picture(path: Path, width: int = 40, height: int = 40, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(path)
    return path


def bad_files(folder: Path) -> dict[str, str]:
    """One file of each unreadable kind in ``folder``: name -> the kind it is named with."""
    png_claiming(folder / "zz_bomb.png", 20000, 20000)
    (folder / "zz_empty.jpg").write_bytes(b"")
    (folder / "zz_text.jpg").write_text("a text file named .jpg\n" * 8)
    full = picture(folder / "zz_truncated.jpg", 64, 64, seed=1)
    full.write_bytes(full.read_bytes()[:600])
    return {"zz_bomb.png": "over the pixel limit", "zz_empty.jpg": "empty file",
            "zz_text.jpg": "not an image PIL can identify", "zz_truncated.jpg": "truncated or corrupt"}


@pytest.fixture
def pil_default(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", PIL_DEFAULT)


def test_each_bad_kind_raises_one_of_the_read_errors_with_its_kind(tmp_path, pil_default):
    kinds = bad_files(tmp_path)
    for name, kind in kinds.items():
        with pytest.raises(READ_ERRORS) as caught:
            decode_rgb(tmp_path / name, PIL_DEFAULT)
        assert unreadable_kind(tmp_path / name, caught.value) == kind, name
    with pytest.raises(Image.DecompressionBombError):  # PIL itself, on the header alone: nothing allocated
        Image.open(tmp_path / "zz_bomb.png")
    assert decode_rgb(picture(tmp_path / "ok.png"), PIL_DEFAULT).size == (40, 40)


def test_an_image_over_the_limit_is_refused_on_its_header_before_any_pixel_is_decoded(tmp_path, monkeypatch):
    big = png_claiming(tmp_path / "big.png", 3000, 2000)

    def decoded(self, *args):
        raise AssertionError("decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", decoded)
    with pytest.raises(OversizedImageError, match="3000 x 2000 = 6,000,000 pixels, more than the limit of 5,999,999"):
        decode_rgb(big, max_pixels=5_999_999)
    assert Image.MAX_IMAGE_PIXELS == 5_999_999  # PIL's own limit in this process is the same
    monkeypatch.undo()
    with pytest.raises(READ_ERRORS):  # at the limit it is decoded (and found truncated: only its header exists)
        decode_rgb(big, max_pixels=6_000_000)


def worker_limit(image):
    """What a DataLoader worker holds as PIL's limit once it decoded ``image``."""
    return Image.MAX_IMAGE_PIXELS


def test_the_pixel_limit_holds_in_a_dataloader_worker_and_names_the_file(tmp_path, pil_default):
    picture(tmp_path / "a_small_enough.png", 20, 20)
    picture(tmp_path / "b_too_large.png", 40, 40)
    images = ImageFolderDataset(tmp_path, transform=worker_limit).limit_reads(1000, 0)
    tally = SkipTally(images)
    served = list(DataLoader(tally, batch_size=None, num_workers=1))
    assert served == [1000, 1000]  # the worker decoded under 1000 pixels, not PIL's default
    assert tally.flags.tolist() == [0, 2 + 4]  # b_too_large: the kind "over the pixel limit"
    assert tally.reason(6) == "more than data.max_image_pixels=1000 pixels"
    assert Image.MAX_IMAGE_PIXELS == PIL_DEFAULT  # set in the worker, not here


def test_every_kind_and_each_small_image_is_flagged_once_over_a_worker_and_two_epochs(tmp_path, pil_default):
    for i in range(3):
        picture(tmp_path / f"good{i}.png", seed=i)
    picture(tmp_path / "thin.png", 1, 600)
    picture(tmp_path / "tiny.png", 1, 1)
    kinds = bad_files(tmp_path)
    images = ImageFolderDataset(tmp_path, transform=lambda im: im.size).limit_reads(PIL_DEFAULT, 32)
    tally = SkipTally(images)
    for _ in range(2):
        sizes = list(DataLoader(tally, batch_size=None, num_workers=1))
    assert sizes.count([1, 600]) == 1 and sizes.count([1, 1]) == 1  # small images are trained on
    named = {Path(tally.name(i)).name: tally.reason(int(f)) for i, f in enumerate(tally.flags.tolist()) if f}
    assert named == {**kinds, "zz_bomb.png": f"more than data.max_image_pixels={PIL_DEFAULT} pixels",
                     "thin.png": "smaller than data.min_image_side=32 px on a side",
                     "tiny.png": "smaller than data.min_image_side=32 px on a side"}
    assert images.skipped == 0  # counted in the worker, not here: the flags are the shared record


def test_a_labelled_file_reader_flags_small_images_but_not_in_memory_arrays(tmp_path):
    files = [picture(tmp_path / "tiny.png", 2, 2), picture(tmp_path / "fine.png")]
    reader = LabelledImages("t", files, [0, 1], ["a", "b"]).limit_reads(PIL_DEFAULT, 32)
    tally = SkipTally(reader)
    [reader[i] for i in range(2)]
    assert tally.flags.tolist() == [SMALL, 0]
    arrays = LabelledImages("mnist-like", [np.zeros((28, 28, 3), np.uint8)], [0], ["a"]).limit_reads(PIL_DEFAULT, 32)
    assert SkipTally(arrays).dataset[0][0].size == (28, 28) and SkipTally(arrays).flags.tolist() == [0]


def test_the_voc_reader_of_the_default_skips_and_flags_alike(tmp_path):
    from skipless.data.voc import VOCImages

    voc = tmp_path / "VOCdevkit" / "VOC2012"
    (voc / "JPEGImages").mkdir(parents=True)
    (voc / "ImageSets" / "Segmentation").mkdir(parents=True)
    (voc / "ImageSets" / "Segmentation" / "train.txt").write_text("a\nb\nc\n")
    (voc / "JPEGImages" / "a.jpg").write_bytes(b"")
    picture(voc / "JPEGImages" / "b.jpg", 20, 20)
    picture(voc / "JPEGImages" / "c.jpg")
    images = VOCImages(tmp_path, "train", transform=lambda im: im.size).limit_reads(PIL_DEFAULT, 32)
    tally = SkipTally(images)
    assert [images[i] for i in range(3)] == [(20, 20), (20, 20), (40, 40)]  # a.jpg skipped: b.jpg served for it
    assert tally.flags.tolist() == [2 + 1, SMALL, 0] and tally.name(0) == str(voc / "JPEGImages" / "a.jpg")


def test_supervised_training_reads_its_files_under_the_two_keys(tmp_path):
    from skipless.supervised.data import labelled_splits

    for split in ("train", "val"):
        (tmp_path / split / "n01").mkdir(parents=True)
        picture(tmp_path / split / "n01" / "a.JPEG", 48, 48)
        picture(tmp_path / split / "n01" / "b.JPEG", 40, 40)
    cfg = load_config("train", ["data=imagenet", f"data.root={tmp_path}", "data.min_image_side=45",
                                "data.max_image_pixels=2000"])
    train, val = labelled_splits(cfg)
    assert (train.max_pixels, train.min_side, val.max_pixels) == (2000, 45, 2000)
    tally = SkipTally(train)
    assert train[0][1] == 0  # a.JPEG (2,304 pixels) is over the limit: b.JPEG is served in its place
    assert tally.flags.tolist() == [2 + 4, SMALL]  # and b.JPEG, 40 px a side, is small


@pytest.mark.parametrize("entry,key,value,words", [
    ("pretrain", "data.max_image_pixels", 0, "data.max_image_pixels must be an integer >= 1, got 0"),
    ("pretrain", "data.min_image_side", -1, "data.min_image_side must be an integer >= 0, got -1"),
    ("train", "data.max_image_pixels", 1.5, "data.max_image_pixels must be an integer >= 1, got 1.5"),
])
def test_the_two_keys_are_checked_in_one_sentence(entry, key, value, words):
    cfg = load_config(entry, [f"{key}={value}"])
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        check_keys(cfg) if entry == "pretrain" else check_train_config(cfg)


def test_a_run_saved_before_the_keys_existed_still_resumes(tmp_path):
    from omegaconf import OmegaConf

    from skipless.training.run_folder import resume_changes

    cfg = load_config("pretrain")
    older = OmegaConf.to_container(cfg)
    for key in ("max_image_pixels", "min_image_side"):
        del older["data"][key]
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(older))
    changes = resume_changes(load_config("pretrain", ["data.min_image_side=0"]), tmp_path)
    assert changes == {"data.max_image_pixels": (None, PIL_DEFAULT), "data.min_image_side": (None, 0)}


# RunSummary across a resume, on a stand-in trainer: the loader's tally, a one-process strategy.

def two_ranks(other: torch.Tensor):
    """A strategy's ``reduce`` over this rank's flags and another rank's ``other``, as torch.distributed combines them."""
    ops = {"max": torch.maximum, "sum": torch.add, "mean": lambda a, b: (a + b) // 2}
    return lambda t, reduce_op: ops[reduce_op](t, other.to(t.dtype))


def trainer_over(tally: SkipTally, epoch: int, reduce=lambda t, reduce_op: t) -> SimpleNamespace:
    strategy = SimpleNamespace(root_device=torch.device("cpu"), reduce=reduce)
    return SimpleNamespace(train_dataloader=SimpleNamespace(dataset=tally), strategy=strategy, is_global_zero=True,
                           loggers=[], current_epoch=epoch, global_step=10 * (epoch + 1), max_epochs=4,
                           callbacks=[], lightning_module=None)


def files_tally(tmp_path: Path) -> SkipTally:
    for name in ("a.png", "b.png", "c.png", "d.png"):
        picture(tmp_path / name)
    return SkipTally(ImageFolderDataset(tmp_path).limit_reads(PIL_DEFAULT, 32))


def test_the_summary_keeps_its_files_across_a_resume_and_names_none_twice(tmp_path, capsys):
    first = RunSummary(tmp_path)
    tally = files_tally(tmp_path)
    trainer = trainer_over(tally, 0)
    first.setup(trainer, None, "fit")
    tally.flags[0], tally.flags[1] = 2 + 1, SMALL  # a.png empty, b.png small: met in epoch 1
    first.on_train_epoch_end(trainer, None)
    trainer.current_epoch = 1
    tally.flags[2] = 2  # c.png met in epoch 2, before a mid-epoch checkpoint: the checkpoint names it
    path = tmp_path / "state.pt"
    torch.save(first.state_dict(), path)
    said = capsys.readouterr().out
    assert said.count("a.png (empty file)") == 1 and said.count("b.png") == 1
    assert "epoch 2: 1 unreadable images skipped (2 in this run so far), each counted and named once:\n  " \
           f"{tmp_path / 'c.png'} (truncated or corrupt)\n" in said

    resumed = RunSummary(tmp_path)
    resumed.load_state_dict(torch.load(path, weights_only=True))  # strings and lists only
    again = files_tally(tmp_path)  # a fresh process: the flags start empty
    trainer = trainer_over(again, 1)
    resumed.setup(trainer, None, "fit")
    again.flags[:] = torch.tensor([2 + 1, SMALL, 2, 2], dtype=torch.uint8)  # a, b, c met again; d new
    resumed.on_train_epoch_end(trainer, None)
    said = capsys.readouterr().out
    assert [n for n in ("a.png", "b.png", "c.png") if n in said] == []  # named before the interruption: not again
    assert f"epoch 2: 1 unreadable images skipped (3 in this run so far)" in said and said.count("d.png") == 1
    resumed.on_train_end(trainer, None)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["skipped_files"] == [str(tmp_path / n) for n in ("a.png", "c.png", "d.png")]
    assert summary["skipped_reasons"][str(tmp_path / "a.png")] == "empty file"
    assert summary["small_images"] == 1 and summary["small_files"] == [str(tmp_path / "b.png")]


def test_a_file_met_on_two_ranks_is_named_once_with_its_own_reason(tmp_path, capsys):
    tally = files_tally(tmp_path)
    tally.flags[0], tally.flags[1] = 2 + 1, SMALL  # rank 0: a.png empty, b.png small
    other = torch.tensor([2 + 1, SMALL, 0, 2 + 3], dtype=torch.uint8)  # rank 1: the same two, and d.png
    summary = RunSummary(tmp_path)
    trainer = trainer_over(tally, 0, reduce=two_ranks(other))
    summary.on_train_epoch_end(trainer, None)
    said = capsys.readouterr().out
    assert said.count("a.png") == 1 and f"  {tmp_path / 'a.png'} (empty file)\n" in said
    assert f"  {tmp_path / 'd.png'} (cannot be opened)\n" in said and said.count("b.png") == 1
    assert (summary.skipped_files, summary.small_files) == ([str(tmp_path / "a.png"), str(tmp_path / "d.png")],
                                                           [str(tmp_path / "b.png")])


# Leftovers of killed writes, removed by the run that next holds the folder.

def test_a_starting_run_removes_what_killed_writes_left_and_nothing_else(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1  # no process has this pid
    stale = {"checkpoints/.last.ckpt.a1b2c3d4.tmp": 3000, "checkpoints/.epoch002.ckpt.zz_9kq0m.tmp": 1000,
             ".backbone.pt.staged": 500, ".backbone-epoch200.pt.staged": 400, "..backbone.pt.staged.x7y8z9w0.tmp": 60,
             ".summary.json.q1w2e3r4.tmp": 30, f".run.lock.{dead}.stale": 10}
    kept = [".notes.tmp", ".mydata", ".backbone.pt.staged.bak", ".last.ckpt.tmp", "notes.abcdefgh.tmp",
            ".hidden.abcdefgh.tmp.txt", f".run.lock.{os.getpid()}.stale", "checkpoints/last.ckpt", "backbone.pt"]
    for name, size in stale.items():
        (run / name).write_bytes(b"x" * size)
    for name in kept:
        (run / name).write_text("mine")
    cfg = load_config("pretrain", [f"run.root={tmp_path}", "run.name=run"])
    record_start(cfg, run, RunStart(None, {}))
    assert [n for n in stale if (run / n).exists()] == []
    assert [n for n in kept if not (run / n).exists()] == []
    said = capsys.readouterr().out.splitlines()
    assert len(said) == 1 and said[0].startswith(f"  cleanup  removed 7 files that an interrupted write left in {run} "
                                                  "(5 kB): ")
    record_start(cfg, run, RunStart(None, {}))  # nothing left: nothing said
    assert capsys.readouterr().out == ""


# atomic_write: the data on the disk before the rename, the rename on the disk after it.

def test_atomic_write_flushes_the_file_before_the_rename_and_the_folder_after_it(tmp_path, monkeypatch):
    calls = []
    fsync, replace = os.fsync, os.replace

    def recorded_fsync(fd):
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def recorded_replace(src, dst):
        calls.append(("replace", str(src), str(dst)))
        replace(src, dst)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    target = atomic_write(tmp_path / "file.txt", lambda tmp: Path(tmp).write_text("whole"))
    assert [c[0] for c in calls] == ["fsync", "replace", "fsync"]
    tmp = calls[1][1]
    assert calls[0][1] == tmp and Path(tmp).name.startswith(".file.txt.") and calls[1][2] == str(target)
    assert calls[2][1] == str(tmp_path) and target.read_text() == "whole"


def test_a_folder_that_refuses_a_flush_fails_no_write_and_a_full_disk_at_the_flush_is_said(tmp_path, monkeypatch):
    fsync = os.fsync

    def no_folder_flush(fd):
        if os.path.isdir(os.readlink(f"/proc/self/fd/{fd}")):
            raise OSError(errno.EINVAL, "Invalid argument")
        fsync(fd)

    monkeypatch.setattr(os, "fsync", no_folder_flush)
    assert atomic_write(tmp_path / "a.txt", lambda tmp: Path(tmp).write_text("ok")).read_text() == "ok"

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DiskFullError, match="could not write .*b.txt: its disk is full"):
        atomic_write(tmp_path / "b.txt", lambda tmp: Path(tmp).write_text("lost"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]  # no temporary file left


# A real tiny pretraining on a folder with every kind, on one loader worker, stopped after an epoch and resumed.

def test_a_pretraining_names_every_bad_and_small_file_once_with_its_reason_across_a_resume(tmp_path, capfd,
                                                                                         monkeypatch):
    from test_pretrain_checks import TINY_FOLDER

    from skipless.pretrain import pretrain
    from skipless.training import run_start

    images = tmp_path / "images"
    images.mkdir()
    for i in range(6):
        picture(images / f"good{i}.png", seed=i)
    picture(images / "thin.png", 1, 600)
    picture(images / "tiny.png", 1, 1)
    kinds = bad_files(images)  # 12 files: 3 whole batches of 4, so every file is drawn in every epoch
    run = tmp_path / "runs" / "bad"
    args = [*TINY_FOLDER, f"data.root={images}", f"run.root={tmp_path / 'runs'}", "run.name=bad",
            "train.num_workers=1", "diagnostics.rank_images=0"]
    pretrain(load_config("pretrain", [*args, "train.epochs=1"]))
    said = capfd.readouterr().out
    assert "epoch 1: 4 unreadable images skipped (4 in this run so far), each counted and named once:" in said
    for name, kind in {**kinds, "zz_bomb.png": f"more than data.max_image_pixels={PIL_DEFAULT} pixels"}.items():
        assert said.count(name) == 1 and f"  {images / name} ({kind})\n" in said, name
    assert ("epoch 1: 2 images smaller than data.min_image_side=32 px on a side met (2 in this run so far), trained "
            f"on, each named once:\n  {images / 'thin.png'}\n  {images / 'tiny.png'}\n") in said

    (run / "checkpoints" / ".last.ckpt.k1l2l3m4.tmp").write_bytes(b"x" * 2000)  # a write killed before the resume
    held = []
    remove = run_start.remove_stale_files
    monkeypatch.setattr(run_start, "remove_stale_files", lambda d: held.append((d / "run.lock").is_file()) or remove(d))
    pretrain(load_config("pretrain", [*args, "train.epochs=2", "run.resume=true"]))
    said = capfd.readouterr().out
    assert held == [True]  # removed while the run holds the folder
    assert (f"  cleanup  removed 1 file that an interrupted write left in {run} (2 kB): "
            "checkpoints/.last.ckpt.k1l2l3m4.tmp\n") in said
    assert [n for n in (*kinds, "thin.png", "tiny.png") if n in said] == [], said  # named before the resume: not again
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["status"], summary["epochs_done"], summary["skipped_images"]) == ("finished", 2, 4)
    assert summary["skipped_files"] == [str(images / n) for n in sorted(kinds)]
    assert summary["skipped_reasons"][str(images / "zz_text.jpg")] == "not an image PIL can identify"
    assert summary["small_images"] == 2 and summary["small_files"] == [str(images / "thin.png"), str(images / "tiny.png")]


def test_the_evaluators_handful_of_images_skips_a_bomb_and_says_so(tmp_path, capsys):
    """PCA and conditioning read their few images through the same decoder: a bomb among them is passed over."""
    from omegaconf import OmegaConf

    from skipless.eval.shared.square_images import load_images

    folder = tmp_path / "imgs"
    folder.mkdir()
    picture(folder / "a.png")
    png_claiming(folder / "b_bomb.png", 20000, 20000)
    picture(folder / "c.png", seed=1)
    cfg = OmegaConf.create({"images": str(folder), "num_images": 2, "image_size": 32, "roots": {"default": None}})
    found = load_images(cfg)
    assert found.names == ["a.png", "c.png"] and found.x.shape == (2, 3, 32, 32)
    assert "b_bomb.png (DecompressionBombError)" in capsys.readouterr().out
