"""``make paper`` on one machine: one slot per GPU this process sees, each naming its GPU as the
parent's ``CUDA_VISIBLE_DEVICES`` names it (a child reads its list against the machine, not the parent's list)."""
import pytest

from paper import local
from paper.jobs import Job


def _machine(monkeypatch, visible: str | None, count: int) -> None:
    """A process with ``CUDA_VISIBLE_DEVICES=visible`` (None: unset) that CUDA shows ``count`` GPUs."""
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(local.torch.cuda, "device_count", lambda: count)


@pytest.mark.parametrize("visible,count,expected", [
    ("2,3", 2, ["2", "3"]),  # was 0 and 1: the machine's first two GPUs, outside the parent's list
    (None, 2, ["0", "1"]),
    ("GPU-aa11, GPU-bb22", 2, ["GPU-aa11", "GPU-bb22"]),
    ("1,7", 1, ["1"]),  # CUDA stops at the first entry it cannot open (7 on a 4-GPU machine)
    ("", 0, []),
])
def test_slots_follow_the_parents_visible_list(monkeypatch, visible, count, expected):
    _machine(monkeypatch, visible, count)
    assert local.visible_gpus() == expected
    assert local.slots("gpus") == ([{"CUDA_VISIBLE_DEVICES": name} for name in expected] or [{}])
    assert local.slots(3) == [{}, {}, {}]  # a number of slots pins nothing


def test_jobs_run_on_the_parents_gpus(monkeypatch, tmp_path):
    _machine(monkeypatch, "2,3", 2)
    seen = []
    monkeypatch.setattr(local, "run_job", lambda folder, job, env: seen.append((job.name, env["CUDA_VISIBLE_DEVICES"])))
    jobs = [Job(name=f"j{i}", kind="run", entry="pretrain", overrides=(), labels={}, config_hash="h",
                marker=f"markers/j{i}.json", log=f"logs/j{i}.log") for i in range(4)]
    local.run_local(tmp_path, jobs, "gpus", say=lambda line: None)
    assert sorted(name for name, _ in seen) == ["j0", "j1", "j2", "j3"]
    assert {gpu for _, gpu in seen} <= {"2", "3"} and {gpu for name, gpu in seen if name in ("j0", "j1")} == {"2", "3"}
