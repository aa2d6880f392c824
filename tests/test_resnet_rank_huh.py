"""Seed 002's Figure 4 at the full scale on Huh et al.'s setup (issue 50): SGD, lr 0.1 at batch 256, weight decay
1e-4, 90 epochs with the lr x 0.1 at 30 and 60 (configs/recipe/supervised-huh.yaml), while the demo and quick
runs keep the hashes, and so the run folders, they had. Planned only, nothing trains."""
import numpy as np
import pytest
import torch

from paper.experiment import load_experiment
from paper.jobs import job_config, plan
from skipless.optim import optimizer_from_config, step_schedule
from skipless.reports.summary import peak_lr

# The hashes before issue 50 moved the full scale to Huh et al.'s setup (paper.jobs.config_hash).
BEFORE = {
    ("resnet-rank-depth", "demo"): {"train-8-0.6": "7d763da7", "train-8-1.0": "11e77a12", "train-12-0.6": "8a6b4eb5",
                                    "train-12-1.0": "366160ff", "train-16-0.6": "0fc34264", "train-16-1.0": "ba181196"},
    ("resnet-rank-depth", "quick"): {"train-8-0.6": "d1141d9a", "train-8-1.0": "3e761a4f", "train-12-0.6": "993fb6b9",
                                     "train-12-1.0": "bfc4f130", "train-16-0.6": "a955168b", "train-16-1.0": "ee313ad4"},
    ("resnet-rank-training", "demo"): {"train-0.6": "7d763da7", "train-0.7": "8916fc66", "train-1.0": "11e77a12"},
    ("resnet-rank-training", "quick"): {"train-0.6": "d1141d9a", "train-0.7": "5242f448", "train-1.0": "3e761a4f"},
}


@pytest.mark.parametrize("name,scale", sorted(BEFORE))
def test_demo_and_quick_runs_keep_their_hashes(tmp_path, name, scale):
    jobs, _ = plan(load_experiment(name), scale, tmp_path)
    assert {j.name: j.config_hash for j in jobs if j.kind == "run"} == BEFORE[name, scale]


@pytest.mark.parametrize("name,cells", [("resnet-rank-depth", 15), ("resnet-rank-training", 6)])
def test_full_scale_trains_with_huh_et_al_setup(tmp_path, name, cells):
    jobs, _ = plan(load_experiment(name), "full", tmp_path)
    runs = [j for j in jobs if j.kind == "run"]
    assert len(runs) == cells
    for job in runs:
        cfg = job_config(job.entry, list(job.overrides))
        assert (cfg.optim.name, cfg.optim.momentum, cfg.optim.nesterov) == ("sgd", 0.9, False)
        assert peak_lr(cfg) == pytest.approx(0.1) and cfg.train.global_batch == 256
        assert (cfg.optim.weight_decay, cfg.optim.warmup_epochs, list(cfg.optim.lr_drops)) == (1e-4, 0, [30, 60])
        assert (cfg.train.epochs, cfg.data.name, cfg.aug.image_size, cfg.diagnostics.rank_images) == (
            90, "imagenet10", 224, 500)
        assert (cfg.aug.auto_augment, cfg.aug.mixup, cfg.aug.cutmix, cfg.aug.label_smoothing) == (None, 0, 0, 0)
        assert cfg.model.timm_name == "resnet18"


def test_figure_4b_runs_are_figure_4a_depth_8_runs(tmp_path):
    """One run per config: Fig. 4a's depth-8 cells at alpha_min 0.6 and 1.0 are Fig. 4b's, at the full scale too."""
    depth = {j.name: j.config_hash for j in plan(load_experiment("resnet-rank-depth"), "full", tmp_path)[0]}
    training = {j.name: j.config_hash for j in plan(load_experiment("resnet-rank-training"), "full", tmp_path)[0]}
    assert (depth["train-8-0.6"], depth["train-8-1.0"]) == (training["train-0.6"], training["train-1.0"])


def test_step_schedule_is_the_pytorch_example_lr():
    """lr 0.1 x 0.1 ** (epoch // 30) over 90 epochs, each epoch's value on its every step."""
    values = step_schedule(0.1, 90, 3, [30, 60])
    expected = np.repeat([0.1 * 0.1 ** (e // 30) for e in range(90)], 3)
    np.testing.assert_allclose(values, expected, rtol=1e-12)
    warm = step_schedule(0.1, 4, 2, [2], warmup_epochs=1)  # DINO's warm-up: its last step is the peak
    np.testing.assert_allclose(warm, [0.0, 0.1, 0.1, 0.1, 0.01, 0.01, 0.01, 0.01], rtol=1e-12)
    for drops in ([60, 30], [0], [90]):
        with pytest.raises(ValueError, match="increasing epochs within 1..89"):
            step_schedule(0.1, 90, 3, drops)


def test_sgd_takes_momentum_and_l2_weight_decay_from_the_config(tmp_path):
    cfg = job_config("train", ["optim=sgd", "recipe=huh", "data=imagenet10", "model=resnet"])
    weight = torch.nn.Parameter(torch.ones(2))
    opt = optimizer_from_config(cfg.optim, [weight], lr=0.1)
    assert isinstance(opt, torch.optim.SGD) and opt.param_groups[0]["momentum"] == 0.9
    weight.grad = torch.zeros(2)
    opt.step()  # a zero gradient: the step is the L2 decay alone, lr x wd x w
    torch.testing.assert_close(weight.detach(), torch.full((2,), 1 - 0.1 * 1e-4))
