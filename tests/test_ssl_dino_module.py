"""The DINO LightningModule's recipe, step by step, on random crops (no data, no Lightning magic
assumed): schedules applied per step, last layer frozen in epoch 1, per-parameter clipping, EMA."""
import math
from functools import partial

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader

from skipless.config import load_config
from skipless.pretrain import backbone_factory
from skipless.ssl.dino.module import DINO, MultiCropNet, clip_gradients_per_parameter, param_groups
from skipless.ssl.dino.self_distillation import collate_multicrop
from skipless.models import create_vit

TINY = ["model.arch=vit_tiny", "model.depth=2", "dino.out_dim=32", "dino.hidden_dim=32",
        "dino.bottleneck_dim=16", "dino.global_crop_size=32", "dino.local_crop_size=16",
        "dino.local_crops_number=2", "train.batch_size_per_device=4", "optim.warmup_epochs=1"]


class Crops(torch.utils.data.Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return [torch.randn(3, 32, 32, generator=g) for _ in range(2)] + \
               [torch.randn(3, 16, 16, generator=g) for _ in range(2)]


class Recorder(pl.Callback):
    def __init__(self):
        self.rows = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.before = {k: v.detach().clone() for k, v in module.student.head.last_layer.state_dict().items()}

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        opt = module.optimizers().optimizer
        last = module.student.head.last_layer.weight_v
        self.rows.append(dict(epoch=trainer.current_epoch, lrs=[g["lr"] for g in opt.param_groups],
                              wds=[g["weight_decay"] for g in opt.param_groups],
                              last_moved=not torch.equal(self.before["weight_v"], last)))


def run(optim="adamw", epochs=2, *extra):
    cfg = load_config("pretrain", [*TINY, f"optim={optim}", f"train.epochs={epochs}", *extra])
    module = DINO(cfg, partial(backbone_factory, cfg))
    rec = Recorder()
    loader = DataLoader(Crops(), batch_size=4, collate_fn=collate_multicrop)
    trainer = pl.Trainer(accelerator="cpu", max_epochs=epochs, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[rec])
    trainer.fit(module, loader)
    return cfg, module, rec


def test_schedules_per_step_and_last_layer_frozen_in_the_first_epoch():
    cfg, module, rec = run("adamw", 2)
    assert len(rec.rows) == 6  # 12 images / 4 per batch x 2 epochs
    peak = cfg.optim.lr * cfg.optim.lr_scale * 4 / 256  # lr scaled by the global batch (one device)
    n = 6
    for step, row in enumerate(rec.rows):
        warm = 3  # one warm-up epoch of 3 steps, linear from 0 to the peak, both included (DINO)
        if step < warm:
            lr = peak * step / (warm - 1)
        else:
            i = step - warm
            lr = cfg.optim.min_lr + 0.5 * (peak - cfg.optim.min_lr) * (1 + math.cos(math.pi * i / (n - warm)))
        wd = cfg.optim.weight_decay_end + 0.5 * (cfg.optim.weight_decay - cfg.optim.weight_decay_end) * \
            (1 + math.cos(math.pi * step / n))
        assert all(math.isclose(v, lr, rel_tol=1e-6, abs_tol=1e-12) for v in row["lrs"]), (step, row, lr)
        assert math.isclose(row["wds"][0], wd, rel_tol=1e-6) and row["wds"][1] == 0.0
        assert row["last_moved"] == (row["epoch"] >= 1), step


def test_soap_runs_the_same_recipe():
    _, module, rec = run("soap", 2)
    # Frozen in epoch 1 (no gradient, so SOAP keeps no state for it); its first step with a gradient
    # only initialises SOAP's preconditioner (as the reference does), so it moves from step 5 on.
    assert [r["last_moved"] for r in rec.rows] == [False] * 4 + [True] * 2
    last = module.student.head.last_layer.weight_v
    assert module.optimizers().optimizer.state[last]["step"] >= 1
    assert all(torch.isfinite(p).all() for p in module.parameters())


def test_teacher_is_the_ema_of_the_student():
    cfg = load_config("pretrain", TINY)
    module = DINO(cfg, partial(backbone_factory, cfg))
    t0 = [p.detach().clone() for p in module.teacher.parameters()]
    with torch.no_grad():
        for p in module.student.parameters():
            p.add_(torch.randn_like(p))
    module._ema_update(0.99)
    for a, s, t in zip(t0, module.student.parameters(), module.teacher.parameters()):
        torch.testing.assert_close(t, 0.99 * a + 0.01 * s)


def test_teacher_has_no_drop_path_and_starts_equal_to_the_student():
    cfg = load_config("pretrain", [*TINY, "model=skip", "model.drop_path_rate=0.1"])  # DINO's own value
    module = DINO(cfg, partial(backbone_factory, cfg))
    assert any(r > 0 for blk in module.student.backbone.blocks for r in blk.drop_path_rates())
    assert all(r == 0 for blk in module.teacher.backbone.blocks for r in blk.drop_path_rates())
    for s, t in zip(module.student.state_dict().values(), module.teacher.state_dict().values()):
        assert torch.equal(s, t)
    assert not any(p.requires_grad for p in module.teacher.parameters())


def test_param_groups_decay_weights_only():
    cfg = load_config("pretrain", TINY)
    net = DINO(cfg, partial(backbone_factory, cfg)).student
    decay, no_decay = param_groups(net)
    names = {id(p): n for n, p in net.named_parameters()}
    assert all(p.ndim > 1 and not names[id(p)].endswith(".bias") for p in decay["params"])
    assert all(p.ndim == 1 or names[id(p)].endswith(".bias") for p in no_decay["params"])
    assert no_decay["weight_decay"] == 0.0
    grouped = {id(p) for g in (decay, no_decay) for p in g["params"]}
    assert grouped == {id(p) for p in net.parameters() if p.requires_grad}
    assert id(net.head.last_layer.weight_g) not in grouped  # frozen gain


def test_clipping_is_per_parameter():
    a, b = torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(2))
    a.grad, b.grad = torch.tensor([30.0, 40.0, 0.0]), torch.tensor([0.3, 0.4])
    clip_gradients_per_parameter([a, b], 3.0)
    torch.testing.assert_close(a.grad.norm(), torch.tensor(3.0), rtol=1e-5, atol=0)
    torch.testing.assert_close(a.grad / a.grad.norm(), torch.tensor([0.6, 0.8, 0.0]))
    torch.testing.assert_close(b.grad, torch.tensor([0.3, 0.4]))  # under the limit: untouched


def test_multicrop_net_groups_equal_sizes_without_changing_results():
    cfg = load_config("pretrain", TINY)
    net = DINO(cfg, partial(backbone_factory, cfg)).teacher.eval()
    crops = Crops()[0]
    crops = [c.unsqueeze(0) for c in crops]
    together = net(crops)
    one_by_one = torch.cat([net.head(net.backbone(c)) for c in crops])
    torch.testing.assert_close(together, one_by_one, rtol=1e-4, atol=1e-5)
    assert isinstance(net, MultiCropNet)


def test_peak_lr_follows_the_global_batch():
    from types import SimpleNamespace

    from skipless.reports.summary import module_peak_lr
    cfg = load_config("pretrain", [*TINY, "optim.lr_scale=2.0"])
    module = DINO(cfg, partial(backbone_factory, cfg))
    for world in (1, 2, 16):
        module._trainer = SimpleNamespace(world_size=world)
        assert math.isclose(module_peak_lr(module), cfg.optim.lr * 2.0 * 4 * world / 256)


def test_model_keys_reach_the_backbone_and_its_saved_arguments():
    """model.global_pool and model.init_args.center_mlp are config keys that change the backbone."""
    import torch
    from skipless.config import load_config

    cfg = load_config("pretrain", ["model=skipless", "model.arch=vit_tiny", "model.depth=2",
                                   "model.global_pool=avg", "model.init_args.center_mlp=true"])
    model = backbone_factory(cfg, 0.0).eval()
    assert model.skipless_args["global_pool"] == "avg"
    assert model.skipless_args["init_args"]["center_mlp"] is True
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        tokens = model.forward_features(x)
        pooled = model.fc_norm(tokens[:, model.num_prefix_tokens:].mean(1))  # timm: LayerNorm after the mean
        assert torch.allclose(model(x), pooled, atol=1e-5)
        assert model.blocks[0].mlp.fc2.bias.abs().sum() > 0  # the centring bias is set


def test_cls_token_is_drawn_as_dino_draws_it_for_pretraining():
    """DINO: trunc_normal_(cls_token, std=.02); the model factory keeps timm's std 1e-6, and the
    pretraining factory redraws it, the same token in student and teacher."""
    from skipless.models import create_vit

    cfg = load_config("pretrain", ["data=imagenet", "model=skip"])  # ViT-S: 384 values
    torch.manual_seed(0)
    cls = backbone_factory(cfg, 0.0).cls_token.detach().flatten()
    assert cls.numel() == 384
    # sample std of 384 N(0, 0.02^2) values: relative standard error 1/sqrt(2*383) ~ 3.6%
    assert abs(cls.std().item() - 0.02) < 4 * 0.02 / (2 * 383) ** 0.5 and abs(cls.mean().item()) < 4 * 0.02 / 384 ** 0.5
    assert create_vit("vit_small").cls_token.abs().max() < 1e-5  # timm's own init stays in the factory
    module = DINO(load_config("pretrain", TINY), partial(backbone_factory, load_config("pretrain", TINY)))
    s, t = module.student.backbone.cls_token, module.teacher.backbone.cls_token
    assert torch.equal(s, t) and s.std() > 0.01


def test_foreach_clipping_equals_one_parameter_at_a_time():
    """The foreach clipping against DINO's loop (each gradient times min(1, max / (norm + 1e-6))), over the
    gradients of a real backbone of mixed sizes, some under the limit and some over."""
    torch.manual_seed(0)
    net = create_vit("vit_tiny", depth=2)
    params = [p for p in net.parameters()]
    for i, p in enumerate(params):
        p.grad = torch.randn_like(p) * (0.01 if i % 3 else 10.0)
    expected = [p.grad * torch.clamp(2.0 / (p.grad.norm(2) + 1e-6), max=1.0) for p in params]
    clip_gradients_per_parameter(params, 2.0)
    for p, e in zip(params, expected):
        torch.testing.assert_close(p.grad, e, rtol=1e-6, atol=0)
    assert any(p.grad.norm() < 1.9 for p in params) and any(abs(p.grad.norm() - 2.0) < 1e-3 for p in params)
