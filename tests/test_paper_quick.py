"""``make paper SCALE=quick``: every experiment's demo cells with ``configs/paper.yaml``'s quick overrides
appended to every job (they win over the cell's own), the demo's checkpoints at the same fraction of the
shortened run, its own folder and training runs; the overrides checked in one sentence."""
import pytest

from paper.experiment import ExperimentError, known_experiments, load_experiment
from paper.jobs import plan
from paper.quick import quick_epochs, quick_overrides
from skipless.config import load_config


def _cfg(job):
    return load_config(job.entry, [o for o in job.overrides if not o.startswith(("run.", "out=", "ckpt="))])


@pytest.mark.parametrize("name", known_experiments())
def test_quick_is_the_demos_cells_shortened_with_every_jobs_quick_overrides_last(tmp_path, name):
    experiment = load_experiment(name)
    exports = load_config("paper").exports
    demo, demo_skipped = plan(experiment, "demo", tmp_path / "demo", exports=list(exports.demo))
    quick, quick_skipped = plan(experiment, "quick", tmp_path / "quick", exports=list(exports.quick))
    shrink = quick_overrides()
    assert [j.name for j in quick if j.kind == "run"] == [j.name for j in demo if j.kind == "run"]
    assert len(quick_skipped) >= len(demo_skipped) and len(quick) <= len(demo)
    by_name = {j.name: j for j in demo}
    for job in quick:
        tail = shrink.get(job.entry, [])
        if job.kind == "run":
            words = [o for o in job.overrides if not o.startswith(("run.", "train.export_epochs="))]
            assert words[len(words) - len(tail):] == tail  # after the cell's own: they win
            assert words[:len(words) - len(tail)] == [o for o in by_name[job.name].overrides
                                                      if not o.startswith(("run.", "train.export_epochs="))]
            cfg = _cfg(job)
            if job.entry == "lm":  # steps, not epochs (table7): a few steps, no checkpoints of epochs
                assert cfg.train.steps == 8 and not any(o.startswith("train.export_epochs=") for o in job.overrides)
                continue
            assert cfg.train.epochs == 2 and cfg.train.limit_train_batches == 4
            assert set(cfg.train.export_epochs) <= {1, 2}
        else:
            assert tail and all(o in job.overrides for o in tail)
    assert f"run.root={(tmp_path / 'quick').resolve() / 'runs'}" in quick[0].overrides


def test_quick_reads_the_demos_checkpoints_at_the_same_fraction_of_its_two_epochs(tmp_path):
    assert quick_epochs([1, 2, 3, 4], 4, 2) == [1, 2] and quick_epochs([4], 4, 2) == [2]
    assert quick_epochs([2, 4, 8], 8, 2) == [1, 2] and quick_epochs([], 8, 2) == []
    jobs, _ = plan(load_experiment("tables5-6"), "quick", tmp_path)
    assert sorted({j.labels["epoch"] for j in jobs if j.kind == "eval"}) == ["1", "2"]
    assert all(_cfg(j).diagnostics.every_n_epochs == 0 for j in jobs if j.kind == "run")


def test_quick_overrides_of_an_unknown_entry_or_not_key_value_are_one_sentence():
    with pytest.raises(ExperimentError, match=r"paper quick.finetuning: unknown entry"):
        quick_overrides({"finetuning": ["a=1"]})
    with pytest.raises(ExperimentError, match=r"paper quick.knn: expected a list of key=value overrides"):
        quick_overrides({"knn": "train_subset=10"})


def test_a_file_may_name_its_own_quick_cells(tmp_path):
    import yaml

    experiment = {"title": "t", "runs": {"entry": "train", "axes": {"model": {
        "skip": ["model=skip"], "skipless": {"demo": ["model=skipless"], "quick": ["model=skipless-plain"]},
        "osa": {"full": ["model=osa"]}}}, "scales": {"demo": ["data=default"]}}}
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(experiment))
    loaded = load_experiment("mine", tmp_path)
    jobs, skipped = plan(loaded, "quick", tmp_path / "q")
    assert {j.labels["model"]: _cfg(j).model.residual for j in jobs} == {"skip": "skip", "skipless": "skipless"}
    assert "model=skipless-plain" in jobs[1].overrides and "data=default" in jobs[0].overrides
    assert skipped == [{"kind": "run", "model": "osa"}]
