"""``optim.implementation`` changes how an update is computed, never what it is: AdamW fused /
foreach / loop and SOAP foreach / loop give the same weights step by step, and the same losses in a
short DINO and supervised run (the issue's rule for every speed key)."""
import pytest
import torch

from skipless.config import ConfigError, load_config
from skipless.optim import IMPLEMENTATIONS, build_optimizer
from skipless.optim.param_groups import param_groups
from skipless.pretrain import pretrain
from skipless.train import train
from skipless.pretrain import check_keys
from tiny_runs import DINO_TINY, SUP_TINY, Losses

LONGER = ["model.depth=2", "train.epochs=2"]  # two blocks, four steps
# SOAP's first bases are the eigenvectors of the first gradient's factors; a factor of lower rank than its
# size (G G^T of a non-square G) has a null space whose basis eigh picks by round-off, and Adam's
# per-coordinate step in it follows that pick. Runs that differ only in round-off then part at step 3:
# measured on the runs below, 1e-7 relative noise on the initial weights moved the losses by up to 5.1e-4
# (DINO) and 9.4e-5 (supervised) on a CPU, and foreach against loop differed by 1.5e-4 on an H200
# (batched and single matrix products round differently there; on a CPU they agree to the bit).
RUN_RTOL = {"adamw": 1e-4, "soap": 2e-3, "sgd": 1e-4}


def _model_params():
    """Square matrices and a tensor whose every unfolding has more columns than rows: every factor of
    the first gradient has full rank, so the bases are defined by the numbers, not by round-off (with
    (8, 4) matrices, 1e-7 noise on the gradients moved SOAP's weights by 2e-2 in six steps)."""
    torch.manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s)) for s in [(6, 6), (6, 6), (4,), (3, 5, 2), (7,)]]


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_every_implementation_takes_the_same_steps(name):
    gen = torch.Generator().manual_seed(1)
    grads = [[torch.randn(p.shape, generator=gen) for p in _model_params()] for _ in range(6)]
    final = {}
    for impl in IMPLEMENTATIONS[name]:
        params = _model_params()
        opt = build_optimizer(name, [{"params": params[:2]}, {"params": params[2:], "weight_decay": 0.0}], lr=1e-2,
                              betas=(0.9, 0.95), eps=1e-8, weight_decay=0.05, implementation=impl,
                              **({"precondition_frequency": 2} if name == "soap" else {}))
        for g in grads:
            for p, gi in zip(params, g):
                p.grad = gi.clone()
            opt.step()
        final[impl] = params
    first, *others = IMPLEMENTATIONS[name]
    moved = max((a - b).abs().max().item() for a, b in zip(final[first], _model_params()))
    assert moved > 1e-3  # the steps did something
    for impl in others:
        for a, b in zip(final[first], final[impl]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optim", sorted(IMPLEMENTATIONS))
@pytest.mark.parametrize("entry,run,tiny", [("pretrain", pretrain, DINO_TINY), ("train", train, SUP_TINY)])
def test_runs_give_the_same_losses_with_every_implementation(tmp_path, entry, run, tiny, optim):
    losses = {}
    for impl in IMPLEMENTATIONS[optim]:
        rec = Losses()
        cfg = load_config(entry, [*tiny, *LONGER, f"optim={optim}", f"optim.implementation={impl}",
                                  f"data.root={tmp_path / 'data'}", f"run.root={tmp_path}", f"run.name={impl}"])
        run(cfg, extra_callbacks=[rec])
        losses[impl] = torch.tensor(rec.values)
    first, *others = IMPLEMENTATIONS[optim]
    assert len(losses[first]) == 4 and len(set(losses[first].tolist())) > 1
    for impl in others:
        torch.testing.assert_close(losses[impl], losses[first], rtol=RUN_RTOL[optim], atol=1e-5)


def test_an_implementation_the_optimizer_lacks_is_refused_in_one_sentence():
    with pytest.raises(ConfigError, match=r"^optim.implementation=fused does not exist for soap; expected one of "
                                          r"loop, foreach \(optim=soap sets loop\)$"):
        check_keys(load_config("pretrain", ["optim=soap", "optim.implementation=fused"]))


def test_param_groups_feed_every_implementation():
    """DINO's groups (decayed weights, undecayed biases) with a frozen parameter left out."""
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    net[1].weight.requires_grad_(False)
    for name, impls in IMPLEMENTATIONS.items():
        for impl in impls:
            opt = build_optimizer(name, param_groups(net), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                  implementation=impl)
            assert sum(len(g["params"]) for g in opt.param_groups) == 3
