"""DINO head: weight normalisation of the last layer, L2 bottleneck, frozen gain."""
import torch

from skipless.ssl.dino.self_distillation import DINOHead


def test_last_layer_rows_have_unit_norm_with_a_frozen_gain():
    head = DINOHead(8, out_dim=32, hidden_dim=16, bottleneck_dim=4, norm_last_layer=True)
    assert not head.last_layer.weight_g.requires_grad
    with torch.no_grad():
        head.last_layer.weight_v.mul_(torch.rand(32, 1) * 10)
    w = head.last_layer.weight()
    torch.testing.assert_close(w.norm(dim=1), torch.ones(32))


def test_output_is_cosine_similarity_to_prototypes():
    head = DINOHead(8, out_dim=12, hidden_dim=16, bottleneck_dim=5)
    x = torch.randn(3, 8)
    z = torch.nn.functional.normalize(head.mlp(x), dim=-1)
    protos = torch.nn.functional.normalize(head.last_layer.weight_v, dim=-1)
    torch.testing.assert_close(head(x), z @ protos.T)
    assert head(x).abs().max() <= 1.0 + 1e-6


def test_gain_trains_when_not_normalised():
    head = DINOHead(8, out_dim=12, hidden_dim=16, bottleneck_dim=5, norm_last_layer=False)
    assert head.last_layer.weight_g.requires_grad
    assert dict(head.named_parameters()).keys() >= {"last_layer.weight_g", "last_layer.weight_v"}


def test_last_layer_keeps_nn_linears_default_init_as_dino_does():
    """DINO builds the weight-normed last layer after its trunc-normal init has run, so it keeps
    nn.Linear's default: the same draw as nn.Linear(bias=False) from the same seed."""
    from skipless.ssl.dino.self_distillation import WeightNormLinear

    torch.manual_seed(0)
    ours = WeightNormLinear(256, 1024, fix_gain=True).weight_v
    torch.manual_seed(0)
    reference = torch.nn.Linear(256, 1024, bias=False).weight
    torch.testing.assert_close(ours, reference, rtol=0, atol=0)


def test_last_layer_init_matches_the_uniform_law_of_kaiming_uniform_a_sqrt5():
    """kaiming_uniform_(a=sqrt(5)) is U(-b, b) with b = sqrt(6 / ((1 + 5) fan_in)) = 1/sqrt(fan_in):
    variance b^2/3, so each row's squared norm has mean fan_in * b^2 / 3 = 1/3 for any width."""
    from scipy import stats

    torch.manual_seed(0)
    fan_in, rows = 256, 4096
    head = DINOHead(384, out_dim=rows, hidden_dim=64, bottleneck_dim=fan_in)
    v = head.last_layer.weight_v.detach().double()
    b = 1 / fan_in ** 0.5
    assert v.abs().max() <= b
    assert stats.kstest(v.flatten()[:200_000].numpy(), stats.uniform(loc=-b, scale=2 * b).cdf).pvalue > 1e-3
    sq = v.pow(2).sum(1)
    # mean of 4096 row norms^2; per-row std is sqrt(fan_in * 4 b^4 / 45) ~ 0.019
    assert abs(sq.mean().item() - 1 / 3) < 4 * (fan_in * 4 * b ** 4 / 45) ** 0.5 / rows ** 0.5
    assert abs(v.norm(dim=1).mean().item() - 3 ** -0.5) < 0.005  # DINO's trunc-normal(0.02) gave 0.32
    # the MLP keeps DINO's truncated normal, std 0.02, zero biases
    w = head.mlp[0].weight.detach()
    assert abs(w.std().item() - 0.02) < 0.001 and head.mlp[0].bias.abs().max() == 0
    torch.testing.assert_close(head.last_layer.weight_g, torch.ones(rows, 1))


def test_logits_come_out_in_fp32_under_autocast():
    """Under bf16 autocast the MLP runs in bf16 but the L2 normalisation and the prototypes' logits in fp32
    (issue 26): a bf16 logit near 1 lies on a grid of 2^-8, which the loss's 1/T_t = 25 (50 in the CPU
    demo) turns into steps of 10-20% in a teacher probability. The logits must be exactly the fp32 last
    layer applied to the bf16 bottleneck."""
    torch.manual_seed(0)
    head = DINOHead(32, out_dim=256, hidden_dim=64, bottleneck_dim=16)
    x = torch.randn(8, 32)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits = head(x)
        bottleneck = head.mlp(x)
    assert bottleneck.dtype == torch.bfloat16 and logits.dtype == torch.float32
    z = torch.nn.functional.normalize(bottleneck.float(), dim=-1)
    with torch.no_grad():
        expected = z @ head.last_layer.weight().T
    torch.testing.assert_close(logits, expected, rtol=1e-6, atol=1e-7)
    assert not torch.equal(logits, logits.bfloat16().float())  # not on bf16's grid
