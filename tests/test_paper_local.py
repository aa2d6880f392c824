"""``make paper`` on one machine: one slot per GPU this process sees, each naming its GPU as the
parent's ``CUDA_VISIBLE_DEVICES`` names it (a child reads its list against the machine, not the parent's list)."""
import pytest

from paper import local
from paper.jobs import Job, write_marker


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


def test_a_preempted_or_busy_training_blocks_its_evaluations_and_is_said_so(monkeypatch, tmp_path):
    """A training stopped by a signal (exit 75, marked preempted by run_job) or left to another run holding its
    folder (exit 73) is neither done nor failed: its evaluations wait for the next call."""
    _machine(monkeypatch, None, 0)
    codes = {"a": 75, "b": 73}

    def fake_run_job(folder, job, env):
        if job.name in codes:
            if codes[job.name] == 75:
                write_marker(folder, job, "preempted", error="stopped after a checkpoint (...)")
            return codes[job.name]
        raise AssertionError(f"{job.name} ran although its training did not finish")

    monkeypatch.setattr(local, "run_job", fake_run_job)
    jobs = [Job(name=n, kind="run", entry="pretrain", overrides=(), labels={}, config_hash="h", marker=f"m/{n}.json",
                log=f"logs/{n}.log") for n in codes]
    jobs += [Job(name=f"eval-{n}", kind="eval", entry="probe", overrides=(), labels={}, config_hash="h",
                 marker=f"m/eval-{n}.json", log=f"logs/eval-{n}.log", depends=(n,)) for n in codes]
    said = []
    state = local.run_local(tmp_path, jobs, 1, say=said.append)
    assert state == {"a": "preempted", "b": "busy", "eval-a": "blocked", "eval-b": "blocked"}
    assert any(line.startswith("[preempted] a") for line in said)
    assert "[blocked] eval-a: a did not finish" in said and "[blocked] eval-b: b did not finish" in said
    assert any(line.startswith("[busy] b: another run holds its folder") for line in said)
