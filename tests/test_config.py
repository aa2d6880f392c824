"""The config loader: groups, struct mode, CLI overrides, the saved config."""
import pytest
from omegaconf import OmegaConf

from skipless.config import ConfigError, load_config, load_saved_config, save_config


def test_defaults_and_group_choice():
    cfg = load_config("pretrain")
    assert cfg.model.name == "skipless" and cfg.model.init == "cutskip" and cfg.optim.name == "adamw"
    cfg = load_config("pretrain", ["model=skip", "optim=soap"])
    assert cfg.model.residual == "skip" and cfg.model.drop_path_rate == 0.1
    assert cfg.optim.name == "soap" and cfg.optim.precondition_frequency == 10
    assert cfg.choices.model == "skip"


def test_lr_comes_from_the_model_preset_per_optimizer():
    cfg = load_config("pretrain", ["model=skipless", "optim=soap", "model.lr.soap=1.5e-4"])
    assert cfg.optim.lr == pytest.approx(1.5e-4)
    assert load_config("pretrain", ["optim.lr=2e-4"]).optim.lr == pytest.approx(2e-4)


def test_unknown_group_choice_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown model 'nonsense'; expected one of: decayed, skip, skipless, skipless-plain"):
        load_config("pretrain", ["model=nonsense"])


def test_misspelt_key_is_an_error_naming_it():
    with pytest.raises(ConfigError, match=r"unknown config key 'train.epoch'.*train.epochs"):
        load_config("pretrain", ["train.epoch=3"])


def test_values_are_typed():
    cfg = load_config("pretrain", ["train.epochs=3", "dino.global_crops_scale=[0.25,1.0]",
                                   "run.name=my-run", "run.resume=true"])
    assert cfg.train.epochs == 3 and list(cfg.dino.global_crops_scale) == [0.25, 1.0]
    assert cfg.run.name == "my-run" and cfg.run.resume is True


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="key=value"):
        load_config("pretrain", ["epochs"])


def test_resolved_config_is_written_and_reloadable(tmp_path):
    cfg = load_config("pretrain", ["optim=soap", "train.epochs=7"])
    path = save_config(cfg, tmp_path / "run")
    again = load_saved_config(path)
    assert OmegaConf.to_container(again) == OmegaConf.to_container(cfg, resolve=True)
    assert "${" not in path.read_text()
    with pytest.raises(Exception):
        again.train.epochz = 1  # struct mode stays on
