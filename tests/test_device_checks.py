"""The bodies of ``test_gpu.py`` on the CPU: they work, and they can fail."""
import pytest
import torch

import device_checks
from device_checks import dino_step_moves_weights, fused_attention_equals_explicit, ncut_matches_lapack


def test_bf16_mixed_dino_step_on_cpu_is_finite_and_moves_the_weights():
    dino_step_moves_weights("cpu", "bf16-mixed")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_attention_on_cpu_equals_the_explicit_path(dtype):
    fused_attention_equals_explicit("cpu", dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_batched_torch_ncut_on_cpu_equals_lapack_up_to_sign(dtype):
    assert ncut_matches_lapack("cpu", dtype) >= 4


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
