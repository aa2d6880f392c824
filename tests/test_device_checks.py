"""bf16 DINO and supervised training, fused attention, TokenCut's torch eigensolver and DINO's batched colour
augmentation, on every device present.

Each check runs on the CPU (so its body is known to work, and ``test_ncut_check_fails_on_a_wrong_solver``
shows it can fail) and on CUDA, where the ``cuda`` cases carry the ``gpu`` marker and skip themselves
without a CUDA device (``make test`` on a laptop or CI reports them as skipped).
"""
import pytest
import torch

import device_checks
from device_checks import (batched_colour_matches_the_cpu, dino_step_moves_weights, fused_attention_equals_explicit,
                           ncut_matches_lapack, supervised_step_moves_weights)

DEVICES = ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device")])]


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_mixed_dino_step_is_finite_and_moves_the_weights(device):
    dino_step_moves_weights(device, "bf16-mixed")


@pytest.mark.parametrize("device", DEVICES)
def test_bf16_mixed_supervised_step_with_mixup_is_finite_and_moves_the_weights(device):
    supervised_step_moves_weights(device, "bf16-mixed")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_attention_equals_the_explicit_path(device, dtype):
    fused_attention_equals_explicit(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_batched_torch_ncut_equals_cpu_lapack_up_to_sign(device, dtype):
    assert ncut_matches_lapack(device, dtype) >= 4


@pytest.mark.parametrize("device", DEVICES)
def test_batched_colour_augmentation_matches_the_cpus(device):
    assert batched_colour_matches_the_cpu(device) < 2e-5


def test_ncut_check_fails_on_a_wrong_solver(monkeypatch):
    """Taking the third eigenvector instead of the second must be caught."""
    def third(adjacency, dtype=torch.float64):
        a = adjacency.to(dtype)
        inv_sqrt = a.sum(-1).rsqrt()
        lap = torch.eye(a.shape[-1], dtype=dtype) - inv_sqrt[..., :, None] * a * inv_sqrt[..., None, :]
        values, vectors = torch.linalg.eigh(lap)
        return inv_sqrt * vectors[..., 2], values[..., 2] - values[..., 1]

    monkeypatch.setattr(device_checks, "ncut_spectrum", third)
    with pytest.raises(AssertionError, match="graph 0"):
        ncut_matches_lapack("cpu")
