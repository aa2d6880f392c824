"""The DINO center under DDP: two gloo processes, each with half of a global batch, end with the
center that one process computes on the whole batch."""
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from skipless.ssl.dino.self_distillation import DINOLoss

STEPS, BATCH, K = 3, 8, 16


def _batches():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2 * BATCH, K, generator=g) for _ in range(STEPS)]  # (2 global views x BATCH)


def _shard(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """The rows of this rank: its part of the batch, in each global view (view-major layout)."""
    views = t.chunk(2)
    per = BATCH // world
    return torch.cat([v[rank * per:(rank + 1) * per] for v in views])


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    loss_fn = DINOLoss(K, center_momentum=0.9)
    for t in _batches():
        loss_fn.update_center(_shard(t, rank, world))
    if rank == 0:
        torch.save(loss_fn.center, out)
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_process_center_equals_one_process_center_on_the_global_batch(tmp_path):
    out = str(tmp_path / "center.pt")
    mp.spawn(_worker, args=(2, _free_port(), out), nprocs=2, join=True)
    ddp_center = torch.load(out)

    single = DINOLoss(K, center_momentum=0.9)
    for t in _batches():
        single.update_center(t)
    torch.testing.assert_close(ddp_center, single.center, rtol=1e-6, atol=1e-7)
    # and a rank that ignored the others would differ: the all-reduce matters
    alone = DINOLoss(K, center_momentum=0.9)
    for t in _batches():
        alone.update_center(_shard(t, 0, 2))
    assert not torch.allclose(alone.center, single.center)
