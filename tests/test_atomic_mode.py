"""Results follow the user's umask (``skipless/atomic.py``): a file written through the atomic writer, or a
backbone through ``save_backbone``, has the mode a plain ``open`` gives it, so a cluster group can read a run."""
import os
import stat
from pathlib import Path

import pytest

from skipless.eval.shared.report import write_text
from skipless.atomic import atomic_write, umask
from skipless.models import create_vit, save_backbone


@pytest.fixture
def with_umask():
    saved = os.umask(0o022)
    os.umask(saved)

    def use(mask: int) -> None:
        os.umask(mask)

    yield use
    os.umask(saved)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_atomic_files_get_the_mode_a_plain_open_gives_under_the_umask(tmp_path, with_umask, mask):
    with_umask(mask)
    assert umask() == mask
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    written = [atomic_write(tmp_path / "a.bin", lambda tmp: Path(tmp).write_bytes(b"1")),
               write_text(tmp_path / "table.md", "| a |\n"),
               save_backbone(tmp_path / "backbone.pt", create_vit("vit_tiny", img_size=32, patch_size=16, depth=1))]
    assert {_mode(p) for p in written} == {_mode(plain)} == {0o666 & ~mask}


def test_a_file_written_over_takes_the_umask_of_the_new_write(tmp_path, with_umask):
    with_umask(0o077)
    path = atomic_write(tmp_path / "r.json", lambda tmp: Path(tmp).write_text("{}"))
    assert _mode(path) == 0o600
    with_umask(0o002)
    atomic_write(path, lambda tmp: Path(tmp).write_text("{}"))
    assert _mode(path) == 0o664
