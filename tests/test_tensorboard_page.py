"""``make tensorboard``'s first page (``skipless/tensorboard_page.py``): its filter keeps the headline tags the
suite writes and leaves out the rest; its address carries the filter and no smoothing."""
import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from skipless.tensorboard_page import HEADLINE, first_page


@pytest.mark.parametrize("tag", [
    "train/loss", "train/mean_patch_loss", "val/top1", "watch/knn/teacher", "watch/knn/encoder", "probe/val_miou",
    "knn-default/top1", "linear-colours/cls/val_top1", "tokencut-default/best_corloc", "tokencut-voc12-out/best_corloc"])
def test_the_headline_tags_are_shown(tag):
    assert re.match(HEADLINE, tag)


@pytest.mark.parametrize("tag", [
    "watch/dino/kl_teacher_student", "watch/schedule/lr", "probe/head_loss", "probe/val_miou_at_label_size",
    "knn-default/top1_per_k", "tokencut-default/seconds_per_image", "linear-colours/cls/head_loss",
    "watch/cond/emb_log_kappa_attn+skip/block7", "watch/knn/teacher/extra", "train/amp_skipped_steps"])
def test_the_rest_waits_behind_the_filter(tag):
    assert not re.match(HEADLINE, tag)


def test_the_address_carries_the_filter_and_no_smoothing():
    url = urlparse(first_page("127.0.0.1", 6007))
    query = parse_qs(url.query)
    assert (url.netloc, url.fragment) == ("localhost:6007", "timeseries")
    assert query == {"tagFilter": [HEADLINE], "smoothing": ["0"]}


def test_main_prints_the_address_then_runs_tensorboard_on_short_names_of_the_same_folder_host_and_port(
        monkeypatch, capsys, tmp_path):
    import sys

    from tensorboard import main as tensorboard_main
    from torch.utils.tensorboard import SummaryWriter

    from skipless.tensorboard_page import main

    with SummaryWriter(str(tmp_path / "runs" / "demo" / "tb")) as w:
        w.add_scalar("train/loss", 1.0, 0)
    seen = []

    def tensorboard():
        view = Path(sys.argv[2])
        seen.append((sys.argv[:2] + sys.argv[3:], [p.relative_to(view).parent.as_posix() for p in view.rglob("events*")],
                     [p.resolve().parent for p in view.rglob("events*")]))

    monkeypatch.setattr(tensorboard_main, "run_main", tensorboard)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    assert main(["--logdir", str(tmp_path / "runs"), "--host", "127.0.0.1", "--port", "6011"]) == 0
    assert seen == [(["tensorboard", "--logdir", "--host", "127.0.0.1", "--port", "6011"], ["demo"],
                     [(tmp_path / "runs" / "demo" / "tb").resolve()])]
    assert first_page("127.0.0.1", 6011) in capsys.readouterr().out


def test_a_folder_without_runs_yet_is_said_in_a_sentence_and_still_served(monkeypatch, capsys, tmp_path):
    import sys

    from tensorboard import main as tensorboard_main

    from skipless.tensorboard_page import main

    served = []
    monkeypatch.setattr(tensorboard_main, "run_main", lambda: served.append(True))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    assert main(["--logdir", str(tmp_path / "runs"), "--port", "6012"]) == 0
    assert served and f"note: {tmp_path / 'runs'}/ holds no runs yet" in capsys.readouterr().out
    (tmp_path / "runs").mkdir()
    main(["--logdir", str(tmp_path / "runs"), "--port", "6012"])
    assert "holds no runs yet" not in capsys.readouterr().out
