"""The config loader: groups, struct mode, CLI overrides, the saved config; where every pretraining
value comes from (the demo and the paper's recipe, key by key)."""
import math

import pytest
from omegaconf import OmegaConf

from skipless.config import CONFIG_DIR, ConfigError, load_config, load_saved_config, save_config


def flat(cfg) -> dict:
    """``{"model.arch": "vit_tiny", ...}`` for a config or a group file (leaf paths only)."""
    def walk(node, prefix):
        for k, v in node.items():
            if isinstance(v, dict):
                yield from walk(v, f"{prefix}{k}.")
            else:
                yield f"{prefix}{k}", v
    return dict(walk(OmegaConf.to_container(cfg, resolve=False), ""))


def test_defaults_and_group_choice():
    cfg = load_config("pretrain")
    assert cfg.model.name == "skipless" and cfg.model.init == "cutskip" and cfg.optim.name == "adamw"
    cfg = load_config("pretrain", ["model=skip", "optim=soap"])
    assert cfg.model.residual == "skip" and cfg.model.drop_path_rate == 0.0
    assert cfg.optim.name == "soap" and cfg.optim.precondition_frequency == 10
    assert dict(cfg.choices) == {"ssl": "dino", "model": "skip", "optim": "soap", "data": "default", "recipe": "demo"}
    assert cfg.ssl == "dino" and cfg.dino.out_dim == 1024  # the method and its section come from configs/ssl/dino.yaml


def test_lr_comes_from_the_model_preset_per_optimizer():
    cfg = load_config("pretrain", ["model=skipless", "optim=soap", "model.lr.soap=1.5e-4"])
    assert cfg.optim.lr == pytest.approx(1.5e-4)
    assert load_config("pretrain", ["optim.lr=2e-4"]).optim.lr == pytest.approx(2e-4)


def test_unknown_group_choice_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="unknown model 'nonsense'; expected one of: attn-skip, cait-s, convmixer, convmixer-skipless, decayed, mlp-skip, osa, pvt-v2-b3, resnet, resnet-decayed, skip, skipless, skipless-centered, skipless-plain, swin-s"):
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


# The CPU demo as `make pretrain` resolved it before the recipe group existed (data/default.yaml then
# set the model, dino, optim and train keys too), key by key. Changed since: train.export_every_n_epochs
# (0) has become train.export_epochs ([]); choices name the recipe; init_args and alpha_min are null
# (create_vit's defaults, the same values: test_null_model_keys_build_the_papers_values); and the new
# model.pos_embed_interp is dino (before: timm's resample, the only one there was); run.resume is null (auto
# under a scheduler) and run.requeue, train.checkpoint_every_minutes (off in the demo) and
# train.collective_timeout_minutes are new (issue 46).
DEMO = {
    "run.name": None, "run.root": "runs", "run.seed": 0, "run.resume": None, "run.requeue": "auto",
    "model.name": "skipless", "model.arch": "vit_tiny", "model.patch_size": 16, "model.depth": None,
    "model.residual": "skipless", "model.init": "cutskip", "model.init_args.alpha": None,
    "model.init_args.beta": None, "model.init_args.c": None, "model.init_args.center_mlp": True,
    "model.alpha_min": None, "model.pos_embed_interp": "dino", "model.attention": "softmax", "model.global_pool": "avg",
    "model.drop_path_rate": 0.0, "model.lr.adamw": 5e-4, "model.lr.soap": 5e-4,
    # added with the neighbouring architectures (issue 16): null / the model of before
    "model.attention_args.k": None, "model.attention_args.basis": None, "model.attention_args.ns_steps": None,
    "model.attention_args.alpha": None, "model.norm": "layernorm", "model.final_norm": True,
    "model.token_graying.method": "none", "model.token_graying.eps": None,
    "model.img_size": None,  # added with the digits recipe: null = create_vit's 224, the model of before
    # added with the MAE knobs (issue 29): the decay and position table of before
    "model.decay.indexing": "sub_block", "model.decay.branches": "both", "model.decay.zero_init": True,
    "model.pos_embed": "learned",
    "dino.out_dim": 1024, "dino.hidden_dim": 2048, "dino.bottleneck_dim": 256, "dino.norm_last_layer": True,
    "dino.use_bn_in_head": False, "dino.student_temp": 0.1, "dino.warmup_teacher_temp": 0.02,
    "dino.teacher_temp": 0.02, "dino.warmup_teacher_temp_epochs": 0, "dino.center_momentum": 0.9,
    "dino.momentum_teacher": 0.99, "dino.freeze_last_layer_epochs": 1, "dino.global_crops_scale": [0.4, 1.0],
    "dino.local_crops_scale": [0.1, 0.4], "dino.local_crops_number": 4, "dino.global_crop_size": 96,
    "dino.local_crop_size": 48,
    "optim.name": "adamw", "optim.lr": 5e-4, "optim.lr_scale": 4.8, "optim.min_lr": 1e-6, "optim.warmup_epochs": 1,
    "optim.weight_decay": 0.04, "optim.weight_decay_end": 0.4, "optim.clip_grad": 3.0, "optim.betas": [0.9, 0.999],
    "optim.eps": 1e-8, "optim.implementation": "fused",  # issue 15: the same numbers, the fastest kernel
    "train.epochs": 4, "train.batch_size_per_device": 32, "train.num_workers": 2, "train.cpu_threads": None, "train.accelerator": "auto",
    "train.devices": 1, "train.num_nodes": 1, "train.strategy": "auto", "train.precision": "auto",
    "train.log_every_n_steps": 10, "train.compile": False,  # issue 15: off by default
    "train.knn_every_n_epochs": 2, "train.knn_k": 20,
    "train.keep_checkpoints": False, "train.export_epochs": [], "train.max_steps": -1,
    "train.checkpoint_every_minutes": 0, "train.collective_timeout_minutes": 30,  # issue 46
    "train.limit_train_batches": 1.0,
    # added with the conditioning diagnostics (issue 13): the demo measures at epochs 0, 2, 4
    "diagnostics.every_n_epochs": 2, "diagnostics.signals_every_n_steps": 10, "diagnostics.layers": "paper",
    "diagnostics.images": 16, "diagnostics.jacobian_images": 1, "diagnostics.tol": 1e-3, "diagnostics.max_iter": 300,
    "diagnostics.dtype": "float64",
    "diagnostics.budget_s": 6,  # issue 27: the demo's diagnostics bounded near 10% of its wall time
    "diagnostics.rank_images": 256,  # issue 29: the class-token effective rank beside the k-NN (seed 002, Fig. 5)
    "data.name": "default", "data.root": "data/default", "data.n_train": 2000, "data.n_val": 1000, "data.seed": 0,
    "data.max_image_pixels": 89478485, "data.min_image_side": 32,  # issue 46: PIL's pixel limit, small images named
    "data.augment_on": "auto",  # issue 48: DINO's colour augmentation on the device on CUDA; the CPU demo's stays
    "choices.model": "skipless", "choices.optim": "adamw", "choices.data": "default", "choices.recipe": "demo",
    "ssl": "dino", "choices.ssl": "dino",  # issue 28: the method is a group (configs/ssl/dino.yaml), DINO by default
    # issue 34: no accumulation in the demo (the global batch is the per-device one), no checkpointing
    "train.global_batch": None, "model.grad_checkpointing": False,
    "model.init_args.qk": None,  # issue 49: null = head, the reading of Eq. 11 of before (bit-identical weights)
}


def test_the_default_is_the_cpu_demo_of_before_key_by_key():
    assert flat(load_config("pretrain")) == DEMO
    assert flat(load_config("pretrain", ["recipe=demo"])) == DEMO  # naming it changes nothing


# The paper's DINO recipe (Ji et al. Section 6.2 on DINO's ViT-S/16 defaults, main_dino.py), for
# every model preset: what a run with DATA=imagenet must resolve to.
PAPER = {
    "model.arch": "vit_small", "model.patch_size": 16, "model.depth": None, "model.attention": "softmax",
    "model.global_pool": "token", "model.drop_path_rate": 0.0, "model.alpha_min": None,
    "model.init_args.alpha": None, "model.init_args.beta": None, "model.init_args.c": None,
    "model.init_args.center_mlp": None, "model.pos_embed_interp": "dino", "model.lr.adamw": 5e-4, "model.lr.soap": 5e-4,
    "dino.out_dim": 65536, "dino.hidden_dim": 2048, "dino.bottleneck_dim": 256, "dino.norm_last_layer": True,
    "dino.use_bn_in_head": False, "dino.student_temp": 0.1, "dino.warmup_teacher_temp": 0.04,
    "dino.teacher_temp": 0.04, "dino.warmup_teacher_temp_epochs": 0, "dino.center_momentum": 0.9,
    "dino.momentum_teacher": 0.996, "dino.freeze_last_layer_epochs": 1, "dino.global_crops_scale": [0.4, 1.0],
    "dino.local_crops_scale": [0.05, 0.4], "dino.local_crops_number": 8, "dino.global_crop_size": 224,
    "dino.local_crop_size": 96,
    "optim.lr": 5e-4, "optim.lr_scale": 1.0, "optim.min_lr": 1e-6, "optim.warmup_epochs": 10,
    "optim.weight_decay": 0.04, "optim.weight_decay_end": 0.4, "optim.clip_grad": 3.0,
    "train.epochs": 300, "train.batch_size_per_device": 64, "train.export_epochs": [200, 300],
    "train.global_batch": 1024,  # DINO's ViT-S/16 batch (Caron et al., Section 3.2), on any number of GPUs
    "data.name": "imagenet", "choices.recipe": "paper",
}
MODELS = {"skip": ("skip", "timm"), "skipless": ("skipless", "cutskip"), "skipless-plain": ("skipless", "timm"),
          "skipless-centered": ("skipless", "cutskip"), "decayed": ("decayed", "timm")}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_imagenet_runs_the_papers_recipe(model):
    got = flat(load_config("pretrain", ["data=imagenet", f"model={model}"]))
    centered = {"model.init_args.center_mlp": True} if model == "skipless-centered" else {}
    assert {k: got[k] for k in PAPER} == {**PAPER, **centered}
    assert (got["model.residual"], got["model.init"]) == MODELS[model]


def test_the_paper_recipe_can_be_named_on_the_default_data_and_the_demo_on_imagenet():
    paper = flat(load_config("pretrain", ["recipe=paper"]))
    assert {k: paper[k] for k in PAPER if not k.startswith("data.")} == \
        {k: v for k, v in PAPER.items() if not k.startswith("data.")}
    demo = flat(load_config("pretrain", ["data=imagenet", "recipe=demo"]))
    assert demo["model.arch"] == "vit_tiny" and demo["train.epochs"] == 4 and demo["data.name"] == "imagenet"


def test_dino_300_epoch_teacher_settings_and_dino_drop_path_are_one_key_away():
    paper = flat(load_config("pretrain", ["data=imagenet"]))
    boosted = flat(load_config("pretrain", ["data=imagenet", "recipe=paper300"]))
    changed = {k: boosted[k] for k in paper if paper[k] != boosted[k]}
    assert changed == {"dino.teacher_temp": 0.07, "dino.warmup_teacher_temp_epochs": 30,
                       "dino.norm_last_layer": False, "choices.recipe": "paper300"}
    assert load_config("pretrain", ["data=imagenet", "model=skip", "model.drop_path_rate=0.1"]).model.drop_path_rate == 0.1


@pytest.mark.parametrize("group", ["model", "optim", "data"])
def test_model_optim_and_data_groups_set_only_their_own_section(group):
    files = sorted((CONFIG_DIR / group).glob("*.yaml"))
    assert files
    for path in files:
        keys = flat(OmegaConf.load(path))
        assert keys and all(k.startswith(f"{group}.") for k in keys), (path.name, sorted(keys))


def pretrain_keys() -> dict:
    """The keys of pretrain.yaml and of every method's section (configs/ssl/*.yaml), with their defaults."""
    base = flat(OmegaConf.load(CONFIG_DIR / "pretrain.yaml"))
    for path in sorted((CONFIG_DIR / "ssl").glob("*.yaml")):
        base.update(flat(OmegaConf.load(path)))
    return base


def _recipe_keys() -> set[str]:
    """The keys pretrain.yaml leaves to the method (``???``): its recipe values."""
    base = OmegaConf.load(CONFIG_DIR / "pretrain.yaml")
    base.pop("defaults")
    # read as written: optim.lr's interpolation of model.lr.<optim.name> is no recipe value, and resolving it
    # (OmegaConf.missing_keys does) stops at the optim group's name, unset until a group is merged
    return {k for k, v in flat(base).items() if v == "???"} - {"optim.name", "model.name", "model.residual"}


def test_the_shared_defaults_leave_every_recipe_value_to_the_method():
    # the base lr is the method's model.lr.<optim> (configs/ssl/<method>.yaml), which optim.lr follows
    assert _recipe_keys() == {"model.lr.adamw", "model.lr.soap", "optim.min_lr", "optim.warmup_epochs",
                              "optim.weight_decay", "optim.weight_decay_end", "optim.clip_grad", "optim.betas",
                              "train.epochs", "train.batch_size_per_device", "train.export_epochs"}


def test_ssl_groups_set_the_method_its_own_section_and_recipe_values_only():
    files = sorted((CONFIG_DIR / "ssl").glob("*.yaml"))
    assert "dino" in [p.stem for p in files]
    recipe = _recipe_keys()
    for path in files:
        keys = flat(OmegaConf.load(path))
        assert keys["ssl"] == path.stem, path.name
        assert all(k == "ssl" or k.startswith(f"{path.stem}.") or k in recipe for k in keys), (path.name, sorted(keys))


# The recipes written for each method: each states (with its ssl/ file) every recipe value.
METHOD_RECIPES = {"dino": ["demo", "paper", "paper300"], "mae": ["demo", "paper"],
                  "supervised": ["demo", "paper", "osa-mnist", "huh"], "finetune": ["demo", "paper"], "lm": ["demo", "paper"]}
SUPERVISED_ENTRIES = ("supervised", "finetune")  # make train's recipes, and make finetune's on train.yaml
# The methods whose recipes belong to an entry point of their own, not to pretrain.yaml: make train's and make
# finetune's (above), and make lm's on lm.yaml (tests/test_lm_config.py checks its groups).
ENTRY_RECIPES = (*SUPERVISED_ENTRIES, "lm")


@pytest.mark.parametrize("ssl, recipe", [(m, r) for m, rs in METHOD_RECIPES.items() for r in rs
                                         if m not in ENTRY_RECIPES])
def test_every_method_states_every_recipe_value_for_each_of_its_recipes(ssl, recipe):
    cfg = load_config("pretrain", [f"ssl={ssl}", f"recipe={recipe}", "data=imagenet", "optim=soap"])
    assert not OmegaConf.missing_keys(cfg)
    assert {k for k in _recipe_keys()} <= set(flat(cfg))


def test_a_method_missing_a_recipe_value_is_one_sentence_naming_the_key(tmp_path):
    import shutil
    shutil.copytree(CONFIG_DIR, tmp_path / "configs")
    dino = tmp_path / "configs" / "ssl" / "dino.yaml"
    text = dino.read_text()
    assert "  warmup_epochs: 10\n" in text
    dino.write_text(text.replace("  warmup_epochs: 10\n", ""))
    with pytest.raises(ConfigError) as err:
        load_config("pretrain", ["data=imagenet"], config_dir=tmp_path / "configs")
    assert "optim.warmup_epochs" in str(err.value) and "\n" not in str(err.value)
    # an MAE run never reads a recipe only DINO has (so never trains with DINO's optimizer values)
    with pytest.raises(ConfigError, match=r"^unknown recipe 'paper300' for mae; expected one of: demo, paper "):
        load_config("pretrain", ["ssl=mae", "recipe=paper300", "data=imagenet"])
    assert load_config("pretrain", ["ssl=mae", "recipe=mae-paper", "data=imagenet"]).choices.recipe == "paper"
    with pytest.raises(ConfigError, match=r"^unknown recipe 'dino-paper' for mae"):
        load_config("pretrain", ["ssl=mae", "recipe=dino-paper", "data=imagenet"])


@pytest.mark.parametrize("scale", ["demo", "paper"])
def test_a_recipe_is_a_method_times_a_scale(scale):
    """``recipe=<scale>`` is the chosen method's: recipe/mae-<scale>.yaml under ssl=mae, dino-<scale>.yaml for DINO."""
    mae = load_config("pretrain", ["ssl=mae", f"recipe={scale}", "data=imagenet"])
    assert mae.choices.recipe == scale and mae.ssl == "mae"
    assert flat(mae) == flat(load_config("pretrain", ["ssl=mae", f"recipe=mae-{scale}", "data=imagenet"]))
    dino = load_config("pretrain", [f"recipe={scale}", "data=imagenet"])
    assert dino.choices.recipe == scale and dino.ssl == "dino"
    # unnamed, the scale follows the data for either method
    data = "default" if scale == "demo" else "imagenet"
    assert load_config("pretrain", ["ssl=mae", f"data={data}"]).choices.recipe == scale
    assert load_config("pretrain", [f"data={data}"]).choices.recipe == scale


def entry_keys_of(method: str) -> dict:
    """The keys a recipe of ``method`` may set, with their defaults: pretrain.yaml's and the methods' sections,
    train.yaml's, train.yaml's with finetune.yaml's over them, or lm.yaml's."""
    if method == "lm":
        own = OmegaConf.load(CONFIG_DIR / "lm.yaml")
        own.pop("defaults")
        return flat(own)
    if method not in SUPERVISED_ENTRIES:
        return pretrain_keys()
    keys = flat(OmegaConf.load(CONFIG_DIR / "train.yaml"))
    if method == "finetune":
        own = OmegaConf.load(CONFIG_DIR / "finetune.yaml")
        own.pop("defaults")
        own.pop("base")
        keys.update(flat(own))
    return keys


def test_every_recipe_belongs_to_a_method_and_sets_no_data_or_run_keys_and_only_its_entrys_keys():
    paths = sorted((CONFIG_DIR / "recipe").glob("*.yaml"))
    assert sorted(p.stem for p in paths) == sorted(f"{m}-{r}" for m, rs in METHOD_RECIPES.items() for r in rs)
    for path in paths:
        keys = flat(OmegaConf.load(path))
        assert not [k for k in keys if k.startswith(("data.", "run."))], path.name
        allowed = entry_keys_of(path.stem.split("-")[0])
        assert set(keys) <= set(allowed), (path.name, sorted(set(keys) - set(allowed)))


def test_no_group_file_restates_a_value_of_pretrain_yaml():
    """Every default is written once: a group file sets a key only to change it."""
    base = pretrain_keys()
    shared = flat(OmegaConf.load(CONFIG_DIR / "pretrain.yaml"))
    for group in ("model", "optim", "data", "recipe"):
        for path in sorted((CONFIG_DIR / group).glob("*.yaml")):
            if path.stem == "supervised-osa-mnist":  # a transcription of seeds/004 App. E, whole on purpose (its header)
                continue
            keys = flat(OmegaConf.load(path))
            # a recipe is compared with the defaults of its own method (another method's values are not its)
            method = path.stem.split("-")[0] if group == "recipe" else None
            against = (base if method is None else entry_keys_of(method) if method in ENTRY_RECIPES
                       else {**shared, **flat(OmegaConf.load(CONFIG_DIR / "ssl" / f"{method}.yaml"))})
            restated = {k: v for k, v in keys.items() if k in against and against[k] == v}
            assert not restated, f"{group}/{path.name} restates {restated}"
    for key in ("model.init_args.alpha", "model.alpha_min", "model.lr.adamw", "model.lr.soap",
                "model.drop_path_rate", "model.init"):
        # the entry points with a base of their own state their lr there and their demo recipes change it
        # (supervised-demo's lr_scale, lm-demo's model.lr: the LM's lr is not scaled with the batch)
        setters = [p.name for g in ("model", "recipe") for p in (CONFIG_DIR / g).glob("*.yaml")
                   if key in flat(OmegaConf.load(p)) and not p.stem.startswith(("supervised-", "finetune-", "lm-"))]
        # cutskip, osa's own init, and the MAE recipes' (He et al.'s initialize_weights)
        init_setters = ["mae-demo.yaml", "mae-paper.yaml", "osa.yaml", "skipless-centered.yaml", "skipless.yaml"]
        assert sorted(setters) == (init_setters if key == "model.init" else []), (key, setters)


# One recipe convention: a value every recipe of a method shares is the method's, written once in its own file
# (configs/ssl/<method>.yaml; train.yaml for make train, finetune.yaml for make finetune), and its recipe files
# hold what a scale changes. The exceptions, in every recipe on purpose: keys that must win over a group merged
# after the method's file and before the recipe (model, optim, data), with why.
SHARED_BY_EVERY_RECIPE = {
    "mae": {"model.init": "mae",               # MODEL=skipless's cutskip (and osa's init) would win from ssl/mae.yaml
            "model.pos_embed": "sincos",       # the model group's section: an ssl/ file sets none of it (above)
            "optim.betas": [0.9, 0.95]},       # OPT=soap's (0.95, 0.95) would win from ssl/mae.yaml
}


def test_a_value_shared_by_every_recipe_of_a_method_is_written_once_in_the_methods_file():
    for method, scales in METHOD_RECIPES.items():
        recipes = [flat(OmegaConf.load(CONFIG_DIR / "recipe" / f"{method}-{scale}.yaml")) for scale in scales]
        alike = {k: v for k, v in recipes[0].items() if all(k in r and r[k] == v for r in recipes[1:])}
        assert alike == SHARED_BY_EVERY_RECIPE.get(method, {}), (method, alike)
    assert OmegaConf.load(CONFIG_DIR / "model" / "skipless.yaml").model.init == "cutskip"
    assert "betas" in OmegaConf.load(CONFIG_DIR / "optim" / "soap.yaml").optim
    assert "model.pos_embed" not in _recipe_keys() and "model.init" not in _recipe_keys()


def test_a_default_may_follow_an_earlier_groups_choice(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "entry.yaml").write_text("defaults:\n  a: x\n  b: {a=x: p, otherwise: q}\nv: 0\n")
    for name, value in (("a/x", "a"), ("a/y", "a"), ("b/p", 1), ("b/q", 2)):
        (tmp_path / f"{name}.yaml").write_text("{}\n" if value == "a" else f"v: {value}\n")
    assert load_config("entry", [], tmp_path).v == 1
    assert load_config("entry", ["a=y"], tmp_path).v == 2
    assert load_config("entry", ["a=x", "b=q"], tmp_path).v == 2
    (tmp_path / "entry.yaml").write_text("defaults:\n  b: {c=x: p}\n  c: x\n")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x.yaml").write_text("{}\n")
    with pytest.raises(ConfigError, match="default of b depends on 'c'"):
        load_config("entry", [], tmp_path)


def test_a_default_row_may_name_several_earlier_choices(tmp_path):
    """``"a=x,c=y": p``: every term must hold (the recipe follows both the method and the data)."""
    for group in "acb":
        (tmp_path / group).mkdir()
    (tmp_path / "entry.yaml").write_text('defaults:\n  a: x\n  c: y\n  b: {"a=x,c=y": p, "a=x": q, otherwise: r}\n'
                                         "v: 0\n")
    for name in ("a/x", "a/z", "c/y", "c/w"):
        (tmp_path / f"{name}.yaml").write_text("{}\n")
    for name, value in (("b/p", 1), ("b/q", 2), ("b/r", 3)):
        (tmp_path / f"{name}.yaml").write_text(f"v: {value}\n")
    assert load_config("entry", [], tmp_path).v == 1
    assert load_config("entry", ["c=w"], tmp_path).v == 2
    assert load_config("entry", ["a=z"], tmp_path).v == 3
    assert load_config("entry", ["a=z", "c=w"], tmp_path).v == 3


def test_null_model_keys_build_the_papers_values():
    """init_args / alpha_min left null in pretrain.yaml build the paper's values (stated in models/)."""
    from skipless.pretrain import backbone_factory

    for model, expect in (("skipless", {"alpha": 1.8, "beta": 1.0, "c": 3.0, "center_mlp": False, "qk": "head"}),):
        cfg = load_config("pretrain", ["data=imagenet", f"model={model}", "model.arch=vit_tiny", "model.depth=1"])
        assert backbone_factory(cfg, 0.0).skipless_args["init_args"] == expect
    cfg = load_config("pretrain", ["data=imagenet", "model=decayed", "model.arch=vit_tiny", "model.depth=1"])
    assert backbone_factory(cfg, 0.0).skipless_args["alpha_min"] == 0.6
    cfg = load_config("pretrain", ["data=imagenet", "model=skipless", "model.arch=vit_tiny", "model.depth=1",
                                   "model.init_args.alpha=2", "model.alpha_min=0.5"])
    args = backbone_factory(cfg, 0.0).skipless_args
    assert args["init_args"]["alpha"] == 2 and args["init_args"]["beta"] == 1.0 and args["alpha_min"] == 0.5
    cfg = load_config("pretrain", ["data=imagenet", "model=osa", "model.arch=vit_tiny", "model.depth=1"])
    args = backbone_factory(cfg, 0.0).skipless_args
    assert args["attention_args"] == {"basis": "qr", "ns_steps": 6, "alpha": 0.1}  # seeds/004, Appendix E
    assert (args["attention"], args["init"], args["norm"], args["final_norm"]) == ("osa", "osa", "none", False)


@pytest.mark.parametrize("entry", ["pretrain", "train"])
def test_model_img_size_sets_the_learned_position_table_and_null_keeps_224(entry):
    """model.img_size: the positions are learned for that size's patch grid (one per token, used as they
    are at that size); null leaves the argument out, so a backbone is built and stored as before (224)."""
    from skipless.models.from_config import vit_from_config

    tiny = ["model.arch=vit_micro", "model.depth=1", "model.patch_size=4"]
    native = vit_from_config(load_config(entry, [*tiny, "model.img_size=28"]).model)
    assert native.pos_embed.shape == (1, 1 + 7 * 7, 64) and native.skipless_args["img_size"] == 28
    default = vit_from_config(load_config(entry, tiny).model)
    assert default.pos_embed.shape == (1, 1 + 56 * 56, 64) and "img_size" not in default.skipless_args


def test_nan_and_inf_on_the_command_line_are_floats():
    """A NaN lr typed as `nan` must reach the checks as the float it means (and be refused as one)."""
    cfg = load_config("pretrain", ["optim.lr_scale=nan", "dino.global_crops_scale=[inf,1]", "run.name=nanny"])
    assert math.isnan(cfg.optim.lr_scale) and cfg.dino.global_crops_scale[0] == float("inf")
    assert cfg.run.name == "nanny"


def test_every_training_entry_point_names_its_data_and_recipe_alike():
    """One vocabulary: ``data=`` and ``recipe=<scale>`` (the method's file) for pretraining and make train;
    make train's former group names are one sentence that gives the new one."""
    train = load_config("train", ["data=digits"])
    assert (train.choices.data, train.choices.recipe) == ("digits", "osa-mnist")
    assert flat(load_config("train", ["data=digits", "recipe=supervised-osa-mnist"])) == flat(train)
    with pytest.raises(ConfigError, match=r"^unknown recipe 'paper300' for supervised; expected one of: demo, "):
        load_config("train", ["recipe=paper300"])  # DINO's recipe is never read by make train
    for old, new in (("dataset=digits", "data"), ("train-recipe=demo", "recipe")):
        with pytest.raises(ConfigError, match=rf"^unknown config key '{old.split('=')[0]}' for train; the group is "
                                              rf"named {new}= now$"):
            load_config("train", [old])
    assert load_config("knn", ["dataset=digits"]).dataset == "digits"  # the evaluators' key is untouched


def test_imagenet_is_one_root_for_pretraining_and_training(tmp_path):
    from skipless.training.data import image_folder_of

    assert load_config("pretrain", ["data=imagenet"]).data.root == load_config("train", ["data=imagenet"]).data.root
    assert image_folder_of(tmp_path) == tmp_path  # a folder of images, or a train/ named directly
    (tmp_path / "train").mkdir()
    assert image_folder_of(tmp_path) == tmp_path / "train"


def test_an_entry_may_build_on_another_and_choose_its_own_groups(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "h").mkdir()
    (tmp_path / "g" / "x.yaml").write_text("v: 1\n")
    (tmp_path / "h" / "y.yaml").write_text("w: 5\n")
    (tmp_path / "low.yaml").write_text("defaults:\n  g: x\nv: 0\nw: 0\nu: 7\n")
    (tmp_path / "high.yaml").write_text("base: low\ndefaults:\n  h: y\nu: 8\n")
    high = load_config("high", [], config_dir=tmp_path)
    assert (high.v, high.w, high.u, dict(high.choices)) == (0, 5, 8, {"h": "y"})  # low's g is not chosen
    assert load_config("low", [], config_dir=tmp_path).v == 1
    (tmp_path / "low.yaml").write_text("base: high\nv: 0\n")
    with pytest.raises(ConfigError, match=r"^configs/high.yaml is its own base \(through high -> low\)"):
        load_config("high", [], config_dir=tmp_path)
    assert flat(load_config("finetune", ["model.name=any", "model.residual=skip"]))["aug.mixup"] == 0.0
