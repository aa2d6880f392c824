"""GPU tests: bf16 DINO training, fused attention, TokenCut's torch eigensolver, on CUDA.

Skipped without a CUDA device (``make test`` on a laptop reports them as skipped). The bodies live
in ``device_checks.py`` and also run on the CPU in ``test_device_checks.py``.
"""
import pytest
import torch

from device_checks import dino_step_moves_weights, fused_attention_equals_explicit, ncut_matches_lapack

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


def test_bf16_mixed_dino_step_on_cuda_is_finite_and_moves_the_weights():
    dino_step_moves_weights("cuda", "bf16-mixed")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_attention_on_cuda_equals_the_explicit_path(dtype):
    fused_attention_equals_explicit("cuda", dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_batched_torch_ncut_on_cuda_equals_cpu_lapack_up_to_sign(dtype):
    ncut_matches_lapack("cuda", dtype)
