"""DINO head: weight normalisation of the last layer, L2 bottleneck, frozen gain."""
import torch

from skipless.ssl.head import DINOHead


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
