"""Every training of ``make paper`` at the full scale makes the paper's global batch whatever cluster runs it
(issue 50): it states ``train.global_batch``, which the devices of either cluster divide into micro-batches, or
the SLURM plan gives it one device, where the per-device batch is the global one. Planned only, nothing runs."""
from dataclasses import replace

import pytest

from paper.batch import is_training
from paper.experiment import FINETUNE, Experiment, known_experiments, load_experiment
from paper.jobs import job_config, plan
from paper.slurm import run_overrides
from skipless.config import load_config
from skipless.devices.world import accumulation_steps, batch_per_device_step, global_batch, world_size

SLURM = load_config("paper", []).slurm


def trainings_of(experiment: Experiment) -> Experiment:
    """``experiment`` without the evaluations that do not train (planning them costs most of the time)."""
    return replace(experiment, evaluations={k: e for k, e in experiment.evaluations.items() if e.entry == FINETUNE})


@pytest.mark.parametrize("name", known_experiments())
def test_every_full_scale_training_states_one_global_batch_for_every_cluster(tmp_path, name):
    """The SLURM plan's trainings (runs and fine-tunings on ``slurm.nodes`` x ``slurm.gpus_per_node``) against
    the same configs on one device (this machine's plan: ``train.devices=1``): one global batch, divided."""
    extra = run_overrides(SLURM)
    jobs, _ = plan(trainings_of(load_experiment(name)), "full", tmp_path, extra)
    trainings = [j for j in jobs if is_training(j)]
    assert trainings, f"{name} has no training at the full scale"
    for job in trainings:
        cfg = job_config(job.entry, list(job.overrides))
        world = world_size(cfg)  # the SLURM job's; on this machine the same config trains on 1 (train.devices)
        assert world == SLURM.nodes * SLURM.gpus_per_node
        if world > 1:
            assert cfg.train.global_batch is not None, (
                f"{name}: {job.name} states no train.global_batch, so its batch is {global_batch(cfg, world)} "
                f"on SLURM and {global_batch(cfg, 1)} on one device")
        assert global_batch(cfg, world) == global_batch(cfg, 1)
        accumulation_steps(cfg, world), accumulation_steps(cfg, 1)  # a batch the devices do not divide: ConfigError


def test_osa_digits_trains_app_e_batch_of_128_on_one_gpu_and_on_slurms_eight(tmp_path):
    """seeds/004 App. E: batch 128 at lr 3e-4, 4,680 steps; before, 8 GPUs made 1,024 at 2.4e-3 (585 steps)."""
    from skipless.reports.summary import describe_batch, peak_lr

    jobs, _ = plan(trainings_of(load_experiment("osa-digits")), "full", tmp_path, run_overrides(SLURM))
    job = next(j for j in jobs if is_training(j))
    there = job_config(job.entry, list(job.overrides))
    here = job_config(job.entry, [o for o in job.overrides if o not in run_overrides(SLURM)])
    assert describe_batch(here) == "128 = 16/device x 1 device x 8 accumulation steps"
    assert describe_batch(there) == "128 = 16/device x 8 devices, no accumulation"
    assert peak_lr(here) == peak_lr(there) == pytest.approx(3e-4)
    for cfg in (here, there):  # MNIST's 60,000 images, each process's share in whole steps (training/data.py)
        assert 60_000 // world_size(cfg) // batch_per_device_step(cfg) * int(cfg.train.epochs) == 4_680
