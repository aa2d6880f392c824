"""Fixed 2-D sine-cosine position embeddings (MAE, He et al. 2022; Vaswani et al. 2017 per axis).

MAE's encoder and decoder add a fixed, not learned, table. Per axis the 1-D code of a coordinate ``p``
over ``D`` channels is ``[sin(p w_0) .. sin(p w_{D/2-1}), cos(p w_0) .. cos(p w_{D/2-1})]`` with
``w_k = 10000 ** (-k / (D/2))``. The 2-D table gives the first half of the channels to the column
(x) coordinate and the second half to the row (y) coordinate, the order MAE's released code uses, so a
table written here equals the one in MAE's checkpoints. A class token, when asked for, gets a zero row
in front (MAE: the CLS token carries no position).
"""
from __future__ import annotations

import torch


def sincos_1d(dim: int, positions: torch.Tensor) -> torch.Tensor:
    """(len(positions), dim): the sine half then the cosine half of each position's code."""
    if dim % 2:
        raise ValueError(f"a 1-D sin-cos code needs an even width, got {dim}")
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0))
    angles = positions.to(torch.float64).reshape(-1, 1) * omega.reshape(1, -1)
    return torch.cat([angles.sin(), angles.cos()], dim=1)


def sincos_2d(dim: int, rows: int, cols: int, cls_token: bool = False) -> torch.Tensor:
    """(1, [1 +] rows * cols, dim) float32, row-major over the patch grid: the x (column) code in the
    first ``dim / 2`` channels, the y (row) code in the rest; a zero row first with ``cls_token``."""
    if dim % 4:
        raise ValueError(f"a 2-D sin-cos table needs a width divisible by 4, got {dim}")
    y, x = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    table = torch.cat([sincos_1d(dim // 2, x.flatten()), sincos_1d(dim // 2, y.flatten())], dim=1)
    if cls_token:
        table = torch.cat([torch.zeros(1, dim, dtype=table.dtype), table], dim=0)
    return table.float().unsqueeze(0)
