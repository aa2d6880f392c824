"""A disk that fills while a run writes its epoch-end files (issue 27): one sentence, summary.json
written, and backbone.pt of the same epoch as the last good checkpoint, with no temporary file left."""
import errno
import json
import shutil
from pathlib import Path

import pytest
import torch

import skipless.atomic as atomic
from skipless.pretrain import main
from tiny_runs import DINO_TINY


def fill_disk_at(monkeypatch, target: str, call: int, torch_style: bool) -> None:
    """The ``call``-th ``torch.save`` onto a temporary file of ``target`` writes a few bytes and fails as a
    full disk does: an ``OSError(ENOSPC)``, or torch's chained stream errors (no errno) on a disk left
    with 4 kB."""
    real, calls = torch.save, []

    def save(obj, f, *args, **kwargs):
        if Path(f).name.startswith(f".{target}.") and len(calls) + 1 == call:
            Path(f).write_bytes(b"\0" * 100)
            if not torch_style:
                raise OSError(errno.ENOSPC, "No space left on device")
            try:
                raise RuntimeError("basic_ios::clear: iostream error")
            except RuntimeError:
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
        if Path(f).name.startswith(f".{target}."):
            calls.append(f)
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(atomic.torch, "save", save)
    if torch_style:
        usage = shutil.disk_usage
        monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(p)._replace(free=4096))


@pytest.mark.parametrize("target, call, torch_style", [("last.ckpt", 2, False), (".backbone.pt.staged", 1, True)])
def test_a_full_disk_is_one_sentence_and_backbone_and_checkpoint_stay_of_one_epoch(tmp_path, capsys, monkeypatch,
                                                                                      target, call, torch_style):
    run = tmp_path / "runs" / "r"
    args = [*DINO_TINY, f"data.root={tmp_path / 'data'}", f"run.root={tmp_path / 'runs'}", "run.name=r",
            "train.epochs=2"]
    fill_disk_at(monkeypatch, target, call, torch_style)
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if line.startswith("error:")]) == 1 and "Traceback" not in "\n".join(err)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "failed"
    leftovers = [p.name for p in run.rglob("*") if p.name.endswith((".tmp", ".staged"))]
    assert leftovers == [] and not (run / "run.lock").exists()
    if call == 1:  # the first epoch's backbone: nothing written yet
        assert err[-1].startswith(f"error: the disk is full: could not write {run}/backbone.pt of epoch 1 "
                                  "(it needs about ")
        assert err[-1].endswith("; no checkpoint was written yet, so there is nothing to resume: free space, then "
                                "start the run again with the same command (this attempt's files move to attempts/)")
        assert not (run / "backbone.pt").exists() and not (run / "checkpoints" / "last.ckpt").exists()
        assert summary["epochs_done"] == 0
        return
    last = run / "checkpoints" / "last.ckpt"
    assert err[-1].startswith(f"error: the disk is full: could not write {last} of epoch 2 (it needs about ")
    assert err[-1].endswith(f"; the last good checkpoint is {last} of epoch 1, and backbone.pt is of the same "
                            "epoch: free space, then continue with RESUME=1")
    ckpt = torch.load(last, map_location="cpu", weights_only=False)
    backbone = torch.load(run / "backbone.pt", map_location="cpu", weights_only=False)
    assert ckpt["epoch"] == 0 and backbone["extra"]["epoch"] == 1 == summary["epochs_done"]
    assert backbone["extra"]["step"] == ckpt["global_step"] == summary["steps"] - 2
