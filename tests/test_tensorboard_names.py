"""Short TensorBoard run names (``skipless/reports/tensorboard_names.py``): the mapping drops ``tb`` and ``eval``
without giving two runs one name, TensorBoard itself reads the linked folder under those names with the
same values, and the folder follows ``runs/`` as runs start and go."""
import time
from pathlib import Path

import pytest
from torch.utils.tensorboard import SummaryWriter

from skipless.reports.tensorboard_names import ViewKeeper, short_names, sync_view


def test_the_words_every_run_has_are_dropped():
    folders = [Path(p) for p in ("demo/tb", "demo/tb/random-init", "demo/eval/tb/probe-default/lr=0.01",
                                 "demo/eval/tb/knn-default", "random-vit_tiny-skipless-cutskip/eval/tb/probe-default")]
    assert list(short_names(folders).values()) == [
        "demo", "demo/random-init", "demo/probe-default/lr=0.01", "demo/knn-default",
        "random-vit_tiny-skipless-cutskip/probe-default"]


def test_eval_stays_where_dropping_it_would_give_two_runs_one_name():
    names = short_names([Path("demo/tb"), Path("demo/eval/tb"), Path("demo/eval/tb/knn-default")])
    assert names == {Path("demo/tb"): "demo", Path("demo/eval/tb"): "demo/eval",
                     Path("demo/eval/tb/knn-default"): "demo/knn-default"}
    # still clashing without eval (a folder named so by hand): the whole path, as TensorBoard would name it
    names = short_names([Path("a/tb/x"), Path("a/x"), Path("tb")])
    assert names == {Path("a/tb/x"): "a/tb/x", Path("a/x"): "a/x", Path("tb"): "tb"}
    assert len(set(names.values())) == len(names)


def _scalars(folder: Path, tag: str, values):
    with SummaryWriter(str(folder)) as w:
        for step, v in enumerate(values):
            w.add_scalar(tag, v, step)


def _tensorboard_runs(logdir: Path) -> dict[str, list[float]]:
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
    mux = EventMultiplexer().AddRunsFromDirectory(str(logdir))
    mux.Reload()
    out = {}
    for run, tags in mux.Runs().items():
        for tag in tags.get("tensors", []):
            out[f"{run}:{tag}"] = [float(e.tensor_proto.float_val[0]) for e in mux.Tensors(run, tag)]
    return out


def test_tensorboard_reads_the_view_under_the_short_names_with_the_same_values(tmp_path):
    runs, view = tmp_path / "runs", tmp_path / "view"
    _scalars(runs / "demo/tb", "train/loss", [6.5, 6.1])
    _scalars(runs / "demo/tb/random-init", "watch/knn/teacher", [0.22])
    _scalars(runs / "demo/eval/tb/probe-default/lr=0.01", "probe/val_miou", [25.1])
    sync_view(runs, view)
    seen = _tensorboard_runs(view)
    assert seen == {"demo:train/loss": [6.5, pytest.approx(6.1)], "demo/random-init:watch/knn/teacher": [pytest.approx(0.22)],
                    "demo/probe-default/lr=0.01:probe/val_miou": [pytest.approx(25.1)]}
    assert {k.split(":")[1]: v for k, v in _tensorboard_runs(runs).items()} == \
        {k.split(":")[1]: v for k, v in seen.items()}
    assert not any(p.is_symlink() for p in runs.rglob("*")), "runs/ is only read"


def test_the_view_follows_runs_that_start_and_go(tmp_path):
    runs, view = tmp_path / "runs", tmp_path / "view"
    _scalars(runs / "a/tb", "train/loss", [1.0])
    keeper = ViewKeeper(runs, view, every_s=0.05)
    try:
        assert set(keeper.names) == {"a"}
        _scalars(runs / "b/tb", "train/loss", [2.0])
        deadline = time.monotonic() + 10
        while set(keeper.names) != {"a", "b"} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(keeper.names) == {"a", "b"}
    finally:
        keeper.stop()
    for f in (runs / "a/tb").iterdir():
        f.unlink()
    assert set(sync_view(runs, view)) == {"b"}
    assert [p.parent.name for p in view.rglob("events.out.tfevents.*")] == ["b"]
