"""The DINO loss with its centering (Caron et al. 2021, Algorithm 1 and Section 3.1).

Teacher probabilities ``P_t = softmax((t - c) / T_t)`` of the 2 global views; student
log-probabilities ``log softmax(s / T_s)`` of all views. The loss is the cross-entropy
``-sum_k P_t log P_s`` averaged over the batch and then over every (teacher view, student view)
pair with different views. The center ``c`` follows the batch mean of the teacher outputs by EMA
(momentum 0.9); the mean is taken over the **global** batch, all-reduced across DDP ranks, so the
center is the same at any world size.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class DINOLoss(nn.Module):
    """Cross-entropy between centred, sharpened teacher outputs and student outputs.

    Args:
        out_dim: number of prototypes (the head's output size).
        n_global: number of global views (the teacher's inputs).
        student_temp: ``T_s`` (0.1).
        center_momentum: EMA momentum of the center (0.9).
    """

    def __init__(self, out_dim: int, n_global: int = 2, student_temp: float = 0.1,
                 center_momentum: float = 0.9) -> None:
        super().__init__()
        self.n_global = n_global
        self.student_temp = student_temp
        self.center_momentum = center_momentum
        self.register_buffer("center", torch.zeros(1, out_dim))

    def forward(self, student_out: torch.Tensor, teacher_out: torch.Tensor,
                teacher_temp: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Loss and mean teacher entropy (nats).

        Args:
            student_out: (n_views * B, K), views stacked view-major (all of view 0, then view 1, ...),
                the global views first.
            teacher_out: (n_global * B, K), same order.
            teacher_temp: ``T_t`` at this epoch.

        Returns:
            ``(loss, teacher_entropy)``. ``loss - teacher_entropy`` is the mean KL divergence from
            teacher to student over the pairs (every teacher view meets the same number of student
            views), which is how collapse shows: both fall to 0 when all outputs agree.
        """
        n_views = student_out.shape[0] // (teacher_out.shape[0] // self.n_global)
        student_logp = F.log_softmax(student_out.float() / self.student_temp, dim=-1).chunk(n_views)
        teacher_p = F.softmax((teacher_out.float() - self.center) / teacher_temp, dim=-1).detach().chunk(self.n_global)
        total, pairs = student_out.new_zeros((), dtype=torch.float32), 0
        for t, p in enumerate(teacher_p):
            for s, logq in enumerate(student_logp):
                if s == t:
                    continue
                total = total + torch.sum(-p * logq, dim=-1).mean()
                pairs += 1
        with torch.no_grad():
            probs = torch.cat(teacher_p)
            entropy = -(probs * probs.clamp_min(1e-30).log()).sum(-1).mean()
        return total / pairs, entropy

    @torch.no_grad()
    def update_center(self, teacher_out: torch.Tensor | Sequence[torch.Tensor]) -> None:
        """EMA of the center towards the mean teacher output of the global batch (all ranks). ``teacher_out``
        is one batch's, or the list of an accumulated step's micro-batches: their mean over every row is
        that of one batch of them all (``module.py``)."""
        outs = [teacher_out] if isinstance(teacher_out, torch.Tensor) else list(teacher_out)
        batch_sum = outs[0].float().sum(dim=0, keepdim=True)
        for more in outs[1:]:
            batch_sum += more.float().sum(dim=0, keepdim=True)
        # written by a kernel: torch.tensor(..., device=) would copy from the host, a sync on a GPU
        count = torch.full((1,), float(sum(t.shape[0] for t in outs)), dtype=torch.float32, device=outs[0].device)
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(batch_sum)
            dist.all_reduce(count)
        self.center.mul_(self.center_momentum).add_(batch_sum / count, alpha=1 - self.center_momentum)
