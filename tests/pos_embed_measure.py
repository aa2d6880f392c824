"""How far DINO's and timm's position-embedding resamples are apart (the table in models/pos_embed.py).

Run: ``PYTHONPATH=src OMP_NUM_THREADS=1 python tests/pos_embed_measure.py`` (CPU, ~1 min). Not a test:
it prints numbers. Released weights cannot be fetched here, so the position embeddings are two
stand-ins for a learned 14 x 14 table: a smooth one (2-D sin-cos, the shape learned tables take)
and DINO's i.i.d. initialisation (the roughest possible). Relative differences are per token,
``|timm - dino| / |dino|`` in L2 (DINO's rule is the one DINO-trained weights expect), max and mean over the patch tokens (for the CLS output, over images).
"""
from __future__ import annotations

import math

import torch

from skipless.models import create_vit
from skipless.models.pos_embed import resample_pos_embed

SIZES = (96, 160, 480)
PATCH, GRID, DIM = 16, 14, 384


def sincos_2d(grid: int, dim: int) -> torch.Tensor:
    """(grid * grid, dim): a quarter of the channels each sin/cos of row and column at log-spaced frequencies."""
    quarter = dim // 4
    freq = 1.0 / 10000 ** (torch.arange(quarter) / quarter)
    rows, cols = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    r, c = rows.reshape(-1, 1) * freq, cols.reshape(-1, 1) * freq
    return torch.cat([r.sin(), r.cos(), c.sin(), c.cos()], dim=1)


def relative(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    rel = (a - b).norm(dim=-1) / b.norm(dim=-1)
    return rel.max().item(), rel.mean().item()


def main() -> None:
    torch.manual_seed(0)
    tables = {"smooth (2-D sin-cos)": sincos_2d(GRID, DIM), "i.i.d. (DINO's init)": torch.randn(GRID * GRID, DIM)}
    print("pos-embed, max / mean relative difference per patch token")
    for label, table in tables.items():
        pos = torch.cat([torch.zeros(1, DIM), table]).unsqueeze(0)
        cells = []
        for size in SIZES:
            grid = (size // PATCH, size // PATCH)
            d = resample_pos_embed(pos, grid, (GRID, GRID), 1, "dino")[0, 1:]
            t = resample_pos_embed(pos, grid, (GRID, GRID), 1, "timm")[0, 1:]
            cells.append("%.2f / %.2f" % relative(t, d))
        print(f"  {label:22s}" + "".join(f"{size:>5d} px {c:14s}" for size, c in zip(SIZES, cells)))

    print("CLS output of a ViT-S (timm's random init), max / mean relative difference over 8 images")
    for label, table in tables.items():
        model = create_vit("vit_small").eval()
        with torch.no_grad():
            tokens = model.patch_embed(torch.randn(8, 3, 224, 224)).flatten(1, 2)
            scale = tokens.norm(dim=-1).mean() / table.norm(dim=-1).mean()  # as large as a patch embedding
            model.pos_embed[0, 1:] = table * scale
        cells = []
        for size in SIZES:
            x = torch.randn(8, 3, size, size, generator=torch.Generator().manual_seed(size))
            with torch.no_grad():
                model.pos_embed_interp = "dino"
                d = model(x)
                model.pos_embed_interp = "timm"
                t = model(x)
            cells.append("%.3f / %.3f" % relative(t, d))
        print(f"  {label:22s}" + "".join(f"{size:>5d} px {c:14s}" for size, c in zip(SIZES, cells)))
    assert math.isfinite(scale.item())


if __name__ == "__main__":
    main()
