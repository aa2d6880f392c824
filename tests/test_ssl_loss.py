"""DINOLoss and its center against direct computations (Caron et al. 2021, Algorithm 1)."""
import math

import torch

from skipless.ssl.dino.self_distillation import DINOLoss


def direct_dino_loss(student, teacher, center, n_views, batch, t_s, t_t):
    """Per sample, per (teacher view, student view != teacher view): -sum_k p_t log p_s, in float64."""
    student, teacher, center = student.double(), teacher.double(), center.double()
    total, pairs = 0.0, 0
    for t in range(2):
        for s in range(n_views):
            if s == t:
                continue
            ce = 0.0
            for b in range(batch):
                logits_t = (teacher[t * batch + b] - center[0]) / t_t
                p = torch.exp(logits_t - torch.logsumexp(logits_t, 0))
                logits_s = student[s * batch + b] / t_s
                logq = logits_s - torch.logsumexp(logits_s, 0)
                ce += float(-(p * logq).sum())
            total += ce / batch
            pairs += 1
    return total / pairs


def test_loss_equals_the_cross_entropy_over_view_pairs():
    g = torch.Generator().manual_seed(0)
    batch, n_views, k = 3, 5, 7
    student = torch.randn(n_views * batch, k, generator=g)
    teacher = torch.randn(2 * batch, k, generator=g)
    loss_fn = DINOLoss(k, student_temp=0.1)
    loss_fn.center.copy_(torch.randn(1, k, generator=g))
    loss, _ = loss_fn(student, teacher, teacher_temp=0.04)
    expected = direct_dino_loss(student, teacher, loss_fn.center, n_views, batch, 0.1, 0.04)
    assert math.isclose(float(loss), expected, rel_tol=1e-5)


def test_loss_minus_entropy_is_the_kl_and_vanishes_when_student_matches_teacher():
    g = torch.Generator().manual_seed(1)
    batch, k, t = 4, 6, 0.1
    teacher = torch.randn(batch, k, generator=g).repeat(2, 1)  # both global views identical
    loss_fn = DINOLoss(k, student_temp=t)
    student = teacher.clone()  # same logits, same temperature, zero center -> same distributions
    loss, entropy = loss_fn(student, teacher, teacher_temp=t)
    p = torch.softmax(teacher[:batch].double() / t, -1)
    assert math.isclose(float(entropy), float(-(p * p.log()).sum(-1).mean()), rel_tol=1e-5)
    assert abs(float(loss - entropy)) < 1e-5
    other, _ = loss_fn(torch.randn(2 * batch, k, generator=g), teacher, teacher_temp=t)
    assert float(other - entropy) > 1e-3  # KL > 0 for a different student


def test_gradient_flows_to_the_student_only():
    student = torch.randn(6, 5, requires_grad=True)
    teacher = torch.randn(4, 5, requires_grad=True)
    loss, _ = DINOLoss(5)(student, teacher, 0.04)
    loss.backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    assert teacher.grad is None


def test_center_is_an_ema_of_the_batch_mean():
    g = torch.Generator().manual_seed(2)
    loss_fn = DINOLoss(4, center_momentum=0.9)
    c0 = torch.randn(1, 4, generator=g)
    loss_fn.center.copy_(c0)
    t1, t2 = torch.randn(6, 4, generator=g), torch.randn(10, 4, generator=g)
    loss_fn.update_center(t1)
    loss_fn.update_center(t2)
    expected = 0.9 * (0.9 * c0 + 0.1 * t1.mean(0, keepdim=True)) + 0.1 * t2.mean(0, keepdim=True)
    torch.testing.assert_close(loss_fn.center, expected)


def test_center_changes_the_teacher_targets():
    g = torch.Generator().manual_seed(3)
    student, teacher = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    a = DINOLoss(3)
    b = DINOLoss(3)
    b.center.fill_(0.0)
    b.center[0, 0] = 5.0  # a large center on prototype 0 suppresses it in the teacher target
    la, _ = a(student, teacher, 0.5)
    lb, _ = b(student, teacher, 0.5)
    assert not torch.isclose(la, lb)
