"""MAE pretraining end to end on a tiny generated dataset (``make pretrain SSL=mae``): the recipe's
optimisation (parameter groups, betas, constant weight decay, no clipping), exact resume, bf16-mixed, the
reconstructions and the loss floor in TensorBoard, the exported encoder read by the evaluators' loader,
and bad MAE keys refused in one sentence before anything is written."""
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import skipless.ssl.mae.module as mae_module
from skipless.reports.summary import module_peak_lr
from skipless.config import load_config
from skipless.models import load_backbone
from skipless.pretrain import main, pretrain, run_dir_of
from skipless.ssl import method_of
from skipless.ssl.mae.decoder import mirror_skip_pairs
from skipless.reports.summary import pretrain_header
from tiny_runs import Losses

TINY = [
    "ssl=mae", "model=decayed", "model.arch=vit_tiny", "model.depth=4", "model.img_size=32",
    "mae.input_size=32", "mae.decoder.dim=32", "mae.decoder.depth=2", "mae.decoder.heads=2",
    "mae.reconstructions_every_n_epochs=1", "mae.reconstruction_images=2",
    "data.n_train=16", "data.n_val=8", "train.batch_size_per_device=4", "train.num_workers=0",
    "train.log_every_n_steps=1", "train.knn_k=3", "train.knn_every_n_epochs=1", "optim.warmup_epochs=1", "train.epochs=1",
    "diagnostics.every_n_epochs=0", "diagnostics.signals_every_n_steps=0", "diagnostics.rank_images=8",
    "train.precision=32-true",
]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def tiny_cfg(tmp_path: Path, data_root: Path, *extra: str):
    return load_config("pretrain", [*TINY, f"data.root={data_root}", f"run.root={tmp_path / 'runs'}", *extra])


class StopAfterEpoch(pl.Callback):
    def __init__(self, epoch):
        self.epoch = epoch

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch + 1 >= self.epoch:
            trainer.should_stop = True


def test_the_paper_recipe_is_the_seeds_with_maes_values_where_it_is_silent():
    cfg = load_config("pretrain", ["ssl=mae", "model=decayed", "data=imagenet"])
    assert cfg.choices.recipe == "paper" and cfg.ssl == "mae"
    o, t, m = cfg.optim, cfg.train, cfg.mae
    assert (o.lr, o.lr_scale, o.min_lr, o.warmup_epochs) == (1.5e-4, 1.0, 0.0, 40)  # seed App 8.1; MAE's blr
    assert o.weight_decay == o.weight_decay_end == 0.05  # constant
    assert list(o.betas) == [0.9, 0.95] and o.clip_grad == 0.0  # MAE's betas, no clipping
    assert t.epochs == 800 and t.global_batch == t.batch_size_per_device * 8 == 1024  # no accumulation on 8 GPUs
    assert (m.mask_ratio, m.norm_pix_loss, list(m.crop_scale)) == (0.75, True, [0.2, 1.0])
    assert (m.decoder.dim, m.decoder.depth, m.decoder.heads) == (512, 8, 16)
    assert cfg.model.pos_embed == "sincos" and cfg.model.residual == "decayed"
    # 6e-4 at the seed's batch of 1024: the linear rule on MAE's base lr
    assert cfg.optim.lr * cfg.optim.lr_scale * 1024 / 256 == pytest.approx(6e-4)
    assert load_config("pretrain", ["ssl=mae"]).choices.recipe == "demo"
    assert load_config("pretrain").choices.recipe == "demo"  # DINO stays the default


def test_param_groups_betas_constant_weight_decay_and_no_clipping(tmp_path, data_root, monkeypatch):
    def no_clip(*args, **kwargs):
        raise AssertionError("the MAE recipe clips nothing")

    monkeypatch.setattr(mae_module, "clip_gradients_per_parameter", no_clip)
    cfg = tiny_cfg(tmp_path, data_root, "optim.weight_decay=0.05", "optim.weight_decay_end=0.05", "optim.clip_grad=0",
                   "optim.betas=[0.9,0.95]", "model.pos_embed=sincos", "train.epochs=2")
    trainer, module = pretrain(cfg)
    opt = trainer.optimizers[0]
    decay, no_decay = (g for g in opt.param_groups)
    assert decay["name"] == "decay" and no_decay["name"] == "no_decay" and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in module.net.named_parameters()}
    assert all(p.ndim > 1 and not names[id(p)].endswith(".bias") for p in decay["params"])
    assert all(p.ndim == 1 or names[id(p)].endswith(".bias") for p in no_decay["params"])
    grouped = {id(p) for g in opt.param_groups for p in g["params"]}
    frozen = [n for n, p in module.net.named_parameters() if not p.requires_grad]
    assert "encoder.pos_embed" in frozen and "decoder.decoder_pos_embed" in frozen
    assert not any(id(p) in grouped for n, p in module.net.named_parameters() if n in frozen)
    assert tuple(decay["betas"]) == (0.9, 0.95)
    np.testing.assert_allclose(module.schedules["wd"], 0.05)
    # MAE's lr_sched, every step: base x s / W in the warm-up (1 epoch), then the cosine to min_lr
    steps, lr = trainer.num_training_batches, module.schedules["lr"]
    base, w = module_peak_lr(module), steps * int(cfg.optim.warmup_epochs)
    assert len(lr) == 2 * steps and lr.tolist() == pytest.approx(
        [base * i / w if i < w else cfg.optim.min_lr + (base - cfg.optim.min_lr) * 0.5 * (
            1 + np.cos(np.pi * (i - w) / (len(lr) - w))) for i in range(len(lr))], rel=1e-12, abs=1e-18)


def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path, data_root):
    straight = Losses()
    pretrain(tiny_cfg(tmp_path, data_root, "run.name=straight", "train.epochs=2"), extra_callbacks=[straight])
    first, second = Losses(), Losses()
    cfg = tiny_cfg(tmp_path, data_root, "run.name=resumed", "train.epochs=2")
    pretrain(cfg, extra_callbacks=[first, StopAfterEpoch(1)])
    pretrain(tiny_cfg(tmp_path, data_root, "run.name=resumed", "train.epochs=2", "run.resume=true"),
             extra_callbacks=[second])
    assert len(straight.values) == 8 and len(first.values) == 4 and len(second.values) == 4
    torch.testing.assert_close(torch.tensor(first.values + second.values), torch.tensor(straight.values),
                               rtol=1e-5, atol=1e-6)


def test_bf16_mixed_trains_and_the_loss_stays_float32(tmp_path, data_root):
    losses = Losses()
    trainer, module = pretrain(tiny_cfg(tmp_path, data_root, "train.precision=bf16-mixed"), extra_callbacks=[losses])
    assert len(losses.values) == 4 and all(np.isfinite(losses.values))
    assert all(p.dtype == torch.float32 for p in module.parameters())


def test_a_run_logs_reconstructions_the_floor_and_the_rank_and_exports_the_encoder(tmp_path, data_root, capsys):
    cfg = tiny_cfg(tmp_path, data_root)
    trainer, module = pretrain(cfg)
    run = run_dir_of(cfg)
    assert run.name == "mae-decayed-adamw-default"
    events = EventAccumulator(str(run / "tb"), size_guidance={"images": 0, "scalars": 0}).Reload()
    assert "reconstructions" in events.Tags()["images"]
    assert len(events.Images("reconstructions")) == 2  # at the start and after the one epoch
    pngs = sorted(p.name for p in (run / "reconstructions").iterdir())
    assert pngs == ["epoch000.png", "epoch001.png"]  # the same panels as files, for make paper's reports
    from PIL import Image
    with Image.open(run / "reconstructions" / "epoch001.png") as png:  # a row of 4 panels per image, 2 images
        assert png.size[0] > png.size[1] > 0
    for tag in ("train/loss", "train/mean_patch_loss", "watch/knn/encoder", "watch/rank/rho", "watch/rank/erank"):
        assert tag in events.Tags()["scalars"], tag
    # the random init's k-NN on the encoder's chart: the same tag in the sub-run random-init, at the start and at
    # each scoring step, a flat line
    floor = EventAccumulator(str(run / "tb" / "random-init")).Reload()
    assert floor.Tags()["scalars"] == ["watch/knn/encoder"] and "watch/knn/random" not in events.Tags()["scalars"]
    points = floor.Scalars("watch/knn/encoder")
    scored = [e.step for e in events.Scalars("watch/knn/encoder")]
    assert [e.step for e in points] == [0, *scored] and len({e.value for e in points}) == 1
    backbone = load_backbone(run / "backbone.pt")
    encoder = module.net.encoder.eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(backbone.eval()(x), encoder(x))
    assert backbone.skipless_args["residual"] == "decayed"
    assert (run / "rank.jsonl").read_text().count("\n") == 1
    out = capsys.readouterr().out
    assert "k-NN top-1 of the encoder" in out and "class-token effective rank (epoch 1): rho" in out


def test_unet_skips_follow_the_keys():
    cfg = load_config("pretrain", ["ssl=mae", "model.depth=4", "mae.decoder.depth=2"])
    assert mae_module.skip_pairs_of(cfg, 4) == mirror_skip_pairs(4, 2) == [(1, 1), (3, 0)]
    cfg = load_config("pretrain", ["ssl=mae", "mae.unet_skips=false"])
    assert mae_module.skip_pairs_of(cfg, 12) == []
    cfg = load_config("pretrain", ["ssl=mae", "mae.skip_pairs=[[0,3],[11,0]]"])
    assert mae_module.skip_pairs_of(cfg, 12) == [(0, 3), (11, 0)]
    header = pretrain_header(cfg, method_lines=method_of(cfg).header(cfg))
    assert "ssl=mae" in header and "U-Net skips (encoder->decoder block) 0->3, 11->0" in header
    assert "unstable" not in header
    cfg = load_config("pretrain", ["ssl=mae", "model=decayed", "model.alpha_min=0.4"])
    assert "alpha_min 0.4 <= 0.4: the seed found these unstable for ViT-B (Sec 4.3)" in "\n".join(
        method_of(cfg).header(cfg))


@pytest.mark.parametrize("bad,said", [
    ("mae.mask_ratio=1.0", "mae.mask_ratio must be a number in (0, 1), got 1.0"),
    ("mae.mask_ratio=0", "mae.mask_ratio must be a number in (0, 1), got 0"),
    ("mae.skip_pairs=[[7,0]]", "mae.skip_pairs: skip pair (7, 0) names a block that does not exist"),
    ("mae.decoder.heads=3", "mae.decoder.dim=32 is not divisible by mae.decoder.heads=3"),
    ("recipe=paper300", "unknown recipe 'paper300' for mae; expected one of: demo, paper"),  # DINO's only
])
def test_bad_mae_keys_are_one_sentence_before_anything_is_written(tmp_path, capsys, bad, said):
    code = main([*TINY, f"run.root={tmp_path / 'runs'}", f"data.root={tmp_path / 'data'}", bad])
    err = capsys.readouterr().err
    assert code == 1 and len(err.strip().splitlines()) == 1 and said in err, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()


def test_the_exported_encoder_is_what_every_evaluator_loads_with_the_features_each_reads(tmp_path, data_root):
    """Every evaluator resolves CKPT through eval/shared/backbones.py and reads the feature API: the MAE
    run's folder resolves to its encoder (decayed gains, frozen sin-cos table), which gives the block
    outputs (probe, PCA, k-NN, linear, t-SNE), attention keys (TokenCut) and attention maps, and its random
    floor is an encoder of the same architecture."""
    from skipless.eval.shared.backbones import load_spec, resolve_backbones
    from skipless.models.features import extract_features

    cfg = tiny_cfg(tmp_path, data_root, "model.pos_embed=sincos", "mae.reconstructions_every_n_epochs=0",
                   "train.knn_every_n_epochs=0", "diagnostics.rank_images=0")
    _, module = pretrain(cfg)
    specs = resolve_backbones(f"{run_dir_of(cfg)} random", runs_root=tmp_path / "runs")
    trained, floor = (load_spec(s) for s in specs)
    assert trained.skipless_args["pos_embed"] == "sincos" and not trained.pos_embed.requires_grad
    torch.testing.assert_close(trained.state_dict()["pos_embed"], module.net.encoder.state_dict()["pos_embed"])
    assert floor.skipless_args["residual"] == "decayed" and floor.skipless_args["arch"] == "vit_tiny"
    x = torch.randn(2, 3, 48, 48)  # another size than the training crops: positions resampled
    feats = extract_features(trained, x, "all", ("out", "k", "attn"), norm=True)
    assert feats[("out", 3)].shape == (2, 1 + 9, 192) and feats[("attn", 0)].shape == (2, 3, 10, 10)
    assert all(torch.isfinite(t).all() for t in feats.values())
