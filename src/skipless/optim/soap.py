"""SOAP: Adam run in the eigenbasis of Shampoo's preconditioner.

Vyas, Morwani, Zhao, Kwun, Shapira, Brandfonbrener, Janson, Kakade, "SOAP: Improving and Stabilizing
Shampoo using Adam", ICLR 2025 (arXiv:2409.11321). This is our own implementation of the algorithm of the
authors' reference code (github.com/nikhilvyas/SOAP, ``soap.py``, without ``merge_dims``), written
against it detail by detail and tested against an independent step-by-step version of the math.

For a gradient ``G`` of a parameter with dimensions ``d_1 .. d_n``, SOAP keeps one Kronecker factor per
dimension ``k`` no larger than ``max_precond_dim``: ``GG_k = EMA(G_(k) G_(k)^T)`` (``L = EMA(G G^T)``,
``R = EMA(G^T G)`` for a matrix), and its eigenbasis ``Q_k``. Every step

1. rotates the gradient into the eigenbasis, ``G' = G x_1 Q_1^T .. x_n Q_n^T`` (``Q_L^T G Q_R``);
2. runs Adam there: ``m = b1 m + (1-b1) G'``, ``v = b2 v + (1-b2) G'^2`` (both kept rotated);
3. rotates ``m / (sqrt(v) + eps)`` back and steps with ``lr * sqrt(1 - b2^t) / (1 - b1^t)``, then applies
   decoupled weight decay ``p -= lr * wd * p`` to the updated weights (the reference's order);
4. adds ``G`` to the factors (EMA with ``shampoo_beta``, ``betas[1]`` when negative) and, every
   ``precondition_frequency`` steps, refreshes the bases by one power-iteration step and a QR
   decomposition, ``Q_k <- qr(GG_k Q_k)``, after sorting the columns of ``Q_k`` by their estimated
   eigenvalues ``diag(Q_k^T GG_k Q_k)`` (descending). The second moment ``v`` is permuted by the same
   sort; the first moment ``m`` is rotated back with the old bases and into the new ones, so it is the
   same vector in the original space.

The first step of a parameter only initialises the factors with its gradient and takes their exact
eigenbases (``torch.linalg.eigh``, descending eigenvalues): the reference never rotates a gradient with
a basis computed from that same gradient, so the parameter does not move (no weight decay either) and
Adam's step count ``t`` starts at the second gradient (a non-square weight's first factor is rank-deficient,
so round-off picks its null-space basis, as in the reference: tests/test_optim_implementation.py). Dimensions above ``max_precond_dim`` are not
rotated (identity basis, no factor); 1-D parameters get plain Adam unless ``precondition_1d``.

The reference rotates ``m`` back and into the bases at every step; the bases change only at a
refresh, so we do it only then (same result up to rounding, two rotations fewer per step).

Batched (``foreach=True``, ``optim.implementation=foreach``): a ViT's parameters come in few
shapes (a ViT-S has twelve ``qkv`` weights of one shape, twelve ``fc1`` ...). Parameters of one group
with the same shape, the same rotated dimensions and the same step count are stepped together: their rotations, factors, sorts and
QR decompositions as batched matrix products (one ``bmm`` for twelve matrices), their moments and
weights by ``torch._foreach_*`` operations; parameters with no rotated dimension (biases, norms) are
stepped together whatever their shapes; a rotated parameter whose shape no other parameter has takes
the per-parameter path. The state stays per parameter, as in the per-parameter path
(``foreach=False``, the readable one), so checkpoints of either path load into the other; both give
the same numbers up to the order of floating-point sums (tests/test_optim_soap.py). On a CPU the
loop is faster (``make bench --only optim``: batched products gain nothing there, and stacking the
bases every step costs memory traffic); batching is for a GPU, where it saves kernel launches.

Cost: per step and rotated dimension ``d`` of a parameter with ``N`` entries, ``2 d N`` multiply-adds
for the two rotations (into the basis and back) and ``d N`` for the factor, against ``O(N)`` for Adam;
per refresh, one ``d x d`` matrix product and one QR (``O(d^3)``) per factor; the first step one
``eigh`` per factor. Measured on a loaded 2-core CPU, a ViT-S SOAP step (refresh every 10 steps) took
~60x an AdamW step; ``make bench`` measures it within a whole DINO step. Memory: two ``d x d``
matrices (factor and basis) per rotated dimension, plus Adam's two moments. The linear algebra runs in
float32 (float64 for float64 parameters; the reference uses float32 there too), and the moments are
kept in that dtype.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from ..devices.full_precision import full_precision


def _compute_dtype(p: Tensor) -> torch.dtype:
    """float64 parameters keep float64 statistics; others use float32 (eigh in bf16 is useless)."""
    return torch.float64 if p.dtype == torch.float64 else torch.float32


def _rotate(x: Tensor, bases: list[Tensor | None], back: bool) -> Tensor:
    """Multiply every dimension ``k`` of ``x`` by ``Q_k^T`` (into the eigenbasis) or ``Q_k`` (``back``).

    Each ``tensordot`` contracts the leading dimension and appends the new one at the end, so after one
    pass over all dimensions they are in their original order again; ``None`` (an unrotated dimension)
    only moves its dimension to the end.
    """
    for q in bases:
        if q is None:
            x = x.movedim(0, -1)
        else:
            x = torch.tensordot(x, q, dims=([0], [1 if back else 0]))
    return x


def _rotate_stacked(x: Tensor, bases: list[Tensor | None], back: bool) -> Tensor:
    """``_rotate`` of a stack of ``P`` tensors ``x`` (P, d_1 .. d_n) with stacked bases (P, d_k, d_k).
    Matrices (the weights of a ViT) take ``Q_L^T G Q_R`` / ``Q_L M Q_R^T`` as two batched products
    whose transposes BLAS reads in place; other shapes go dimension by dimension, as ``_rotate``."""
    if x.dim() == 3:
        ql, qr = bases
        if ql is not None:
            x = (ql if back else ql.mT) @ x
        if qr is not None:
            x = x @ (qr.mT if back else qr)
        return x
    for q in bases:
        if q is not None:
            n, d, rest = x.shape[0], x.shape[1], x.shape[2:]
            x = ((q if back else q.transpose(1, 2)) @ x.reshape(n, d, -1)).reshape(n, d, *rest)
        x = x.movedim(1, -1)
    return x


def _accumulate_factors(g: Tensor, factors: list[Tensor | None], beta: float) -> None:
    """``GG_k <- beta GG_k + (1 - beta) G_(k) G_(k)^T``: contract ``g`` with itself over all other dims."""
    for k, f in enumerate(factors):
        if f is None:
            continue
        others = [i for i in range(g.dim()) if i != k]
        f.lerp_(torch.tensordot(g, g, dims=(others, others)), 1.0 - beta)


def _eigenbasis(f: Tensor) -> Tensor:
    """Eigenvectors of a symmetric factor as columns, by decreasing eigenvalue (the reference's order).

    ``eigh`` can fail on badly conditioned float32 input: it raises, or (measured with LAPACK on CPU,
    a position-embedding factor of 197 rows of which most are exactly zero, from 32-px images) it
    returns NaN without a word, which would make the parameter NaN at the next step. Either way the
    retry runs in float64 with a diagonal shift of ``1e-12`` of the mean eigenvalue, which leaves the
    eigenvectors unchanged.
    """
    try:
        _, q = torch.linalg.eigh(f)
        if torch.isfinite(q).all():
            return q.flip(1)
    except torch.linalg.LinAlgError:
        pass
    f64 = f.double()
    shift = 1e-12 * max(f64.diagonal().mean().item(), torch.finfo(torch.float64).tiny)
    _, q = torch.linalg.eigh(f64 + shift * torch.eye(f.shape[0], dtype=f64.dtype, device=f.device))
    return q.to(f.dtype).flip(1)


def _stack(tensors: list[Tensor]) -> Tensor:
    """``torch.stack``, without its copy for a bucket of one (a view; the shapes that do not repeat)."""
    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)


def _stacked(states: list[dict[str, Any]], name: str) -> list[Tensor | None]:
    """Per dimension, the ``name`` matrices (``Q`` or ``GG``) of all states stacked, or None where unrotated."""
    return [None if m is None else _stack([s[name][k] for s in states]) for k, m in enumerate(states[0][name])]


class SOAP(Optimizer):
    """SOAP (Vyas et al., ICLR 2025): Adam in the eigenbasis of Shampoo's preconditioner.

    The algorithm, its reference and its cost are in the module docstring. The ``lr`` and
    ``weight_decay`` of every group are read at each step, so schedules may change them every step;
    parameters whose ``grad`` is ``None`` are skipped without touching their state (DINO's frozen last
    layer). ``precondition_frequency``, ``shampoo_beta`` and ``betas`` are read at each step too;
    ``max_precond_dim`` and ``precondition_1d`` decide which dimensions are rotated at a parameter's
    first step.

    Args:
        params: parameters or parameter groups.
        lr: learning rate (reference default 3e-3).
        betas: Adam's ``(beta1, beta2)`` (reference default ``(0.95, 0.95)``).
        shampoo_beta: EMA coefficient of the Kronecker factors; negative means ``betas[1]``.
        eps: added to ``sqrt(v)`` in the rotated basis.
        weight_decay: decoupled weight decay, ``p -= lr * weight_decay * p`` after the update.
        precondition_frequency: steps between refreshes of the eigenbases (power iteration + QR).
        max_precond_dim: dimensions larger than this are not rotated (10000 in the reference, which
            excludes vocabulary-sized dimensions but keeps the layers' widths).
        precondition_1d: rotate 1-D parameters too (with a ``d x d`` factor) instead of plain Adam.
        normalize_grads: divide each update by its RMS (the reference: helps at large refresh
            intervals, ~100, hurts at ~10).
        correct_bias: Adam's bias correction ``sqrt(1 - b2^t) / (1 - b1^t)`` of the step size.
        foreach: step parameters of one shape together (module docstring; for a GPU); False (the
            default, faster on a CPU): one at a time.
    """

    def __init__(
        self,
        params: Iterable[Tensor] | Iterable[dict[str, Any]],
        lr: float = 3e-3,
        betas: tuple[float, float] = (0.95, 0.95),
        shampoo_beta: float = -1,
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        precondition_frequency: int = 10,
        max_precond_dim: int = 10000,
        precondition_1d: bool = False,
        normalize_grads: bool = False,
        correct_bias: bool = True,
        foreach: bool = False,
    ) -> None:
        if lr < 0:
            raise ValueError(f"SOAP needs lr >= 0, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"SOAP needs two betas in [0, 1), got {betas}")
        if shampoo_beta >= 1.0:
            raise ValueError(f"SOAP needs shampoo_beta < 1 (negative for betas[1]), got {shampoo_beta}")
        if eps < 0 or weight_decay < 0:
            raise ValueError(f"SOAP needs eps >= 0 and weight_decay >= 0, got {eps} and {weight_decay}")
        if int(precondition_frequency) != precondition_frequency or precondition_frequency < 1:
            raise ValueError(f"SOAP needs an integer precondition_frequency >= 1, got {precondition_frequency}")
        if max_precond_dim < 1:
            raise ValueError(f"SOAP needs max_precond_dim >= 1, got {max_precond_dim}")
        defaults = dict(lr=lr, betas=tuple(betas), shampoo_beta=shampoo_beta, eps=eps,
                        weight_decay=weight_decay, precondition_frequency=int(precondition_frequency),
                        max_precond_dim=max_precond_dim, precondition_1d=precondition_1d,
                        normalize_grads=normalize_grads, correct_bias=correct_bias, foreach=bool(foreach))
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One SOAP step for every parameter with a gradient; the first one only initialises it.

        The step runs outside any autocast region (``full_precision``), wherever it is called from: under
        autocast the factors' products ``G G^T``, the rotations and the refreshes would be rounded to
        bf16/fp16 (eigenbases of bf16 factors are useless, and the in-place update of an fp32 factor by a
        bf16 product fails). A closure still runs under the caller's autocast."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with full_precision():
            self._step_groups()
        return loss

    def _step_groups(self) -> None:
        for group in self.param_groups:
            buckets: dict[tuple, list[Tensor]] = {}
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("SOAP does not support sparse gradients")
                state = self.state[p]
                if not group.get("foreach", True) or "Q" not in state:
                    self._step_parameter(p, group)
                    continue
                rotated = tuple(q is not None for q in state["Q"])
                key = (state["step"], p.dtype, p.device, rotated, tuple(p.shape) if any(rotated) else None)
                buckets.setdefault(key, []).append(p)
            for (*_, shape), params in buckets.items():
                if shape is not None and len(params) == 1:  # a shape that does not repeat: nothing to batch
                    self._step_parameter(params[0], group)
                else:
                    self._step_bucket(params, group)

    def _step_parameter(self, p: Tensor, group: dict[str, Any]) -> None:
        state = self.state[p]
        g = p.grad.to(_compute_dtype(p))
        beta1, beta2 = group["betas"]
        shampoo_beta = group["shampoo_beta"] if group["shampoo_beta"] >= 0 else beta2
        if "Q" not in state:
            self._init_state(g, state, group, shampoo_beta)
            return

        state["step"] += 1
        t, bases = state["step"], state["Q"]
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        g_rot = _rotate(g, bases, back=False)
        exp_avg.mul_(beta1).add_(g_rot, alpha=1.0 - beta1)
        exp_avg_sq.mul_(beta2).add_(g_rot.square(), alpha=1.0 - beta2)

        step_size = group["lr"]
        if group["correct_bias"]:
            step_size = step_size * (1.0 - beta2**t) ** 0.5 / (1.0 - beta1**t)
        update = _rotate(exp_avg / (exp_avg_sq.sqrt() + group["eps"]), bases, back=True)
        if group["normalize_grads"]:
            update = update / (1e-30 + update.square().mean().sqrt())
        p.add_(update.to(p.dtype), alpha=-step_size)
        if group["weight_decay"] > 0:
            p.add_(p, alpha=-group["lr"] * group["weight_decay"])

        # The factors take the gradient only after it was used, as in the reference.
        _accumulate_factors(g, state["GG"], shampoo_beta)
        if t % group["precondition_frequency"] == 0:
            self._refresh_bases(state)

    def _step_bucket(self, params: list[Tensor], group: dict[str, Any]) -> None:
        """``_step_parameter`` for parameters of one shape, rotated dimensions and step count, batched."""
        states = [self.state[p] for p in params]
        dtype = _compute_dtype(params[0])
        grads = [p.grad.to(dtype) for p in params]
        beta1, beta2 = group["betas"]
        shampoo_beta = group["shampoo_beta"] if group["shampoo_beta"] >= 0 else beta2
        for state in states:
            state["step"] += 1
        t = states[0]["step"]
        bases = _stacked(states, "Q")
        rotated = any(q is not None for q in bases)
        stacked_grads = _stack(grads) if rotated else None
        g_rot = list(_rotate_stacked(stacked_grads, bases, back=False).unbind(0)) if rotated else grads
        exp_avgs = [s["exp_avg"] for s in states]
        exp_avg_sqs = [s["exp_avg_sq"] for s in states]
        torch._foreach_mul_(exp_avgs, beta1)
        torch._foreach_add_(exp_avgs, g_rot, alpha=1.0 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_add_(exp_avg_sqs, torch._foreach_mul(g_rot, g_rot), alpha=1.0 - beta2)

        step_size = group["lr"]
        if group["correct_bias"]:
            step_size = step_size * (1.0 - beta2**t) ** 0.5 / (1.0 - beta1**t)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denom, group["eps"])
        ratio = torch._foreach_div(exp_avgs, denom)
        if rotated:
            update = _rotate_stacked(_stack(ratio), bases, back=True)
            if group["normalize_grads"]:
                rms = update.square().mean(dim=tuple(range(1, update.dim())), keepdim=True).sqrt()
                update = update / (1e-30 + rms)
            updates = list(update.unbind(0))
        else:
            updates = [u / (1e-30 + u.square().mean().sqrt()) for u in ratio] if group["normalize_grads"] else ratio
        if params[0].dtype != dtype:
            updates = [u.to(params[0].dtype) for u in updates]
        torch._foreach_add_(params, updates, alpha=-step_size)
        if group["weight_decay"] > 0:
            torch._foreach_add_(params, params, alpha=-group["lr"] * group["weight_decay"])

        # The factors take the gradient only after it was used, as in the reference.
        for k, q in enumerate(bases):
            if q is None:
                continue
            if stacked_grads.dim() == 3:  # G G^T or G^T G, transposes read in place
                outer = stacked_grads @ stacked_grads.mT if k == 0 else stacked_grads.mT @ stacked_grads
            else:
                g_k = stacked_grads.movedim(k + 1, 1).reshape(len(params), q.shape[1], -1)
                outer = g_k @ g_k.mT
            torch._foreach_lerp_([s["GG"][k] for s in states], list(outer.unbind(0)), 1.0 - shampoo_beta)
        if rotated and t % group["precondition_frequency"] == 0:
            self._refresh_bucket(states, bases)

    @staticmethod
    def _refresh_bucket(states: list[dict[str, Any]], old: list[Tensor | None]) -> None:
        """``_refresh_bases`` for a bucket: batched products, sorts (per matrix) and QR decompositions."""
        exp_avg = _rotate_stacked(_stack([s["exp_avg"] for s in states]), old, back=True)
        exp_avg_sq = _stack([s["exp_avg_sq"] for s in states])
        new: list[Tensor | None] = []
        for k, (f, q) in enumerate(zip(_stacked(states, "GG"), old)):
            if f is None:
                new.append(None)
                continue
            fq = f @ q
            order = torch.argsort((q * fq).sum(1), dim=-1, descending=True, stable=True)  # diag(Q^T GG Q)
            index = order.view(order.shape[0], *[order.shape[1] if i == k else 1 for i in range(exp_avg_sq.dim() - 1)])
            exp_avg_sq = exp_avg_sq.gather(k + 1, index.expand_as(exp_avg_sq))
            new.append(torch.linalg.qr(fq.gather(2, order.unsqueeze(1).expand_as(fq))).Q)
        exp_avg = _rotate_stacked(exp_avg, new, back=False)
        torch._foreach_copy_([s["exp_avg"] for s in states], list(exp_avg.unbind(0)))
        torch._foreach_copy_([s["exp_avg_sq"] for s in states], list(exp_avg_sq.unbind(0)))
        for k, q in enumerate(new):
            if q is not None:
                torch._foreach_copy_([s["Q"][k] for s in states], list(q.unbind(0)))

    @staticmethod
    def _init_state(g: Tensor, state: dict[str, Any], group: dict[str, Any], shampoo_beta: float) -> None:
        """Zero moments, factors from the first gradient and their exact eigenbases; no update."""
        rotated = [(g.dim() > 1 or group["precondition_1d"]) and d <= group["max_precond_dim"] for d in g.shape]
        state["step"] = 0  # Adam steps taken; the initialising gradient is not one
        state["exp_avg"] = torch.zeros_like(g, memory_format=torch.contiguous_format)
        state["exp_avg_sq"] = torch.zeros_like(g, memory_format=torch.contiguous_format)
        state["GG"] = [g.new_zeros(d, d) if r else None for d, r in zip(g.shape, rotated)]
        _accumulate_factors(g, state["GG"], shampoo_beta)
        state["Q"] = [None if f is None else _eigenbasis(f) for f in state["GG"]]

    @staticmethod
    def _refresh_bases(state: dict[str, Any]) -> None:
        """One power-iteration step + QR per factor, from the current basis sorted by estimated eigenvalue.

        ``v`` follows the sort (each eigen-direction keeps its second moment); ``m`` is rotated back to
        the original space with the old bases and into the new ones.
        """
        old = state["Q"]
        exp_avg = _rotate(state["exp_avg"], old, back=True)
        exp_avg_sq = state["exp_avg_sq"]
        new: list[Tensor | None] = []
        for k, (f, q) in enumerate(zip(state["GG"], old)):
            if f is None:
                new.append(None)
                continue
            fq = f @ q
            order = torch.argsort((q * fq).sum(0), descending=True, stable=True)  # diag(Q^T GG Q)
            exp_avg_sq = exp_avg_sq.index_select(k, order)
            new.append(torch.linalg.qr(fq[:, order]).Q)
        state["Q"] = new
        state["exp_avg_sq"] = exp_avg_sq
        state["exp_avg"] = _rotate(exp_avg, new, back=False)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``Optimizer.load_state_dict``, keeping float32 statistics of low-precision parameters.

        torch casts every floating state tensor to its parameter's dtype and device; SOAP keeps its
        moments, factors and bases in float32 for bf16/fp16 parameters, so for those they are taken
        again from ``state_dict`` at full precision (on the parameter's device), and a resumed run
        continues bit for bit.
        """
        super().load_state_dict(state_dict)
        saved_ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        params = chain.from_iterable(g["params"] for g in self.param_groups)
        for pid, p in zip(saved_ids, params):
            if pid not in state_dict["state"] or _compute_dtype(p) == p.dtype:
                continue
            dtype = _compute_dtype(p)
            for key, value in state_dict["state"][pid].items():
                if isinstance(value, Tensor):
                    self.state[p][key] = value.to(device=p.device, dtype=dtype)
                elif isinstance(value, list):
                    self.state[p][key] = [v if v is None else v.to(device=p.device, dtype=dtype) for v in value]
