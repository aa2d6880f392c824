"""One rule for torch's CPU threads (``skipless/cpu_threads.py``): its arithmetic, and every evaluator
setting it from its own ``cpu_threads`` key and loader workers before it loads any backbone."""
import pytest
import torch

from skipless.config import ConfigError, load_config
from skipless.cpu_threads import cpu_threads, set_cpu_threads, usable_cores


@pytest.mark.parametrize("cores, workers, threads", [
    (2, 0, 1), (2, 2, 1), (2, 8, 1), (1, 0, 1), (16, 8, 4), (16, 0, 8), (64, 8, 28)])
def test_the_rule_is_half_the_cores_the_workers_leave_and_at_least_one(cores, workers, threads):
    assert cpu_threads(None, workers, cores) == threads


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
    module = importlib.import_module(f"eval.{name}.run")
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
    from skipless.cpu_threads import loader_workers
    assert loader_workers(3) == 3 and loader_workers(0) == 0
    assert loader_workers(None) == min(8, usable_cores())
