"""One rule for torch's CPU threads (``skipless/devices/cpu_threads.py``): its arithmetic, every evaluator setting
it from its own ``cpu_threads`` key and loader workers before it loads any backbone, and pretraining and
supervised training from ``train.cpu_threads``, their workers and their processes, before their run folder."""
import pytest
import torch

from skipless.config import ConfigError, load_config
from skipless.devices.cpu_threads import cpu_threads, set_cpu_threads, usable_cores


@pytest.fixture(autouse=True)
def no_thread_count_in_the_environment(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


@pytest.mark.parametrize("cores, workers, threads", [
    (2, 0, 1), (2, 2, 1), (2, 8, 1), (1, 0, 1), (16, 8, 4), (16, 0, 8), (64, 8, 28)])
def test_the_rule_is_half_the_cores_the_workers_leave_and_at_least_one(cores, workers, threads):
    assert cpu_threads(None, workers, cores) == threads


@pytest.mark.parametrize("cores, workers, processes, threads", [
    (128, 8, 8, 4), (16, 0, 2, 4), (16, 8, 2, 1), (2, 2, 2, 1), (64, 0, 4, 8)])
def test_a_nodes_training_processes_share_its_cores(cores, workers, processes, threads):
    # (cores - processes x workers) // (2 x processes): each GPU process and its own workers
    assert cpu_threads(None, workers, cores, processes=processes) == threads


def test_omp_num_threads_stands_for_the_rule_and_the_key_for_both(monkeypatch):
    from skipless.devices.cpu_threads import threads_reason
    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    assert cpu_threads(None, 8, cores=2) == 6 and "OMP_NUM_THREADS" in threads_reason(None, 8)
    assert cpu_threads(3, 8, cores=2) == 3 and threads_reason(3, 8, key="train.cpu_threads") == "train.cpu_threads"
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")  # not a count: the rule
    assert cpu_threads(None, 0, cores=16) == 8 and "half of" in threads_reason(None, 0)


def test_a_number_is_taken_as_it_is_and_set_in_torch():
    before = torch.get_num_threads()
    try:
        assert cpu_threads(3, 8, cores=2) == 3
        assert set_cpu_threads(None, 0) == torch.get_num_threads() == max(1, usable_cores() // 2)
    finally:
        torch.set_num_threads(before)


class Set(Exception):
    """Raised by the stand-in for set_cpu_threads: the evaluator got as far as setting its threads."""


def _entry(name):
    import importlib
    module = importlib.import_module(f"skipless.eval.{name}.run")
    return module, getattr(module, {"probe": "run_probe", "knn": "run_knn", "linear": "run_linear",
                                    "tsne": "run_tsne"}.get(name, "run"))


@pytest.mark.parametrize("name, overrides, workers", [
    ("probe", ["num_workers=3"], 3), ("knn", ["features.num_workers=3"], 3), ("linear", ["features.num_workers=3"], 3),
    ("tsne", ["features.num_workers=3"], 3), ("tokencut", ["num_workers=3"], 3), ("pca", [], 0),
    ("conditioning", [], 0)])
def test_every_evaluator_sets_its_threads_from_its_key_and_workers(monkeypatch, tmp_path, name, overrides, workers):
    module, run = _entry(name)
    calls = []

    def record(requested, loader_workers):
        calls.append((requested, loader_workers))
        raise Set

    monkeypatch.setattr(module, "set_cpu_threads", record)
    cfg = load_config(name, ["cpu_threads=5", "ckpt=random", f"runs_root={tmp_path}", *overrides])
    with pytest.raises(Set):
        run(cfg)
    assert calls == [(5, workers)]


@pytest.mark.parametrize("name", ["tokencut", "pca", "conditioning", "probe", "knn"])
def test_a_thread_count_below_one_is_one_sentence(tmp_path, name):
    _, run = _entry(name)
    with pytest.raises(ConfigError, match=r"cpu_threads"):
        run(load_config(name, ["cpu_threads=0", "ckpt=random", f"runs_root={tmp_path}"]))


def test_loader_workers_default_to_the_usable_cores_up_to_eight():
    from skipless.devices.cpu_threads import loader_workers
    assert loader_workers(3) == 3 and loader_workers(0) == 0
    assert loader_workers(None) == min(8, usable_cores())


@pytest.mark.parametrize("entry, module_name, overrides, workers", [
    ("pretrain", "skipless.pretrain", ["train.num_workers=3"], 3),
    ("pretrain", "skipless.pretrain", ["ssl=mae", "train.num_workers=0"], 0),
    ("train", "skipless.train", ["train.num_workers=2"], 2)])
def test_training_sets_its_threads_from_its_key_workers_and_processes_before_its_run_folder(
        monkeypatch, tmp_path, entry, module_name, overrides, workers):
    import importlib

    from skipless.devices.world import training_threads
    module = importlib.import_module(module_name)
    run = getattr(module, entry)
    calls = []

    def record(threads):
        calls.append(threads)
        raise Set

    def too_late(*args):
        raise AssertionError("the run folder was taken before the threads were set")

    monkeypatch.setattr(module.torch, "set_num_threads", record)
    monkeypatch.setattr(module, "hold_run_folder", too_late)
    for key, expected in (("null", cpu_threads(None, workers)), ("5", 5)):
        cfg = load_config(entry, [f"run.root={tmp_path}", f"train.cpu_threads={key}", *overrides])
        assert training_threads(cfg) == expected
        with pytest.raises(Set):
            run(cfg)
        assert calls[-1] == expected
    cfg = load_config(entry, [f"run.root={tmp_path}", "train.accelerator=cpu", "train.devices=2", *overrides])
    assert training_threads(cfg) == cpu_threads(None, workers, processes=2)


@pytest.mark.parametrize("entry", ["pretrain", "train"])
def test_training_headers_say_the_threads_and_where_they_came_from(entry):
    from skipless.reports.summary import threads_line
    assert threads_line(load_config(entry, ["train.cpu_threads=3"])) == \
        "  threads  3 CPU threads per process (train.cpu_threads)"
    line = threads_line(load_config(entry, ["train.num_workers=2"]))
    assert line.startswith(f"  threads  {cpu_threads(None, 2)} CPU thread") and "less 2 loader workers" in line


@pytest.mark.parametrize("entry", ["pretrain", "train"])
def test_a_training_thread_count_below_one_is_one_sentence(tmp_path, entry):
    import importlib
    module = importlib.import_module(f"skipless.{entry}")
    with pytest.raises(ConfigError, match=r"train\.cpu_threads"):
        module.check_config(load_config(entry, [f"run.root={tmp_path}", "train.cpu_threads=0"]))
