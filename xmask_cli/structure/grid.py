"""The patch grid of an image as a graph (paper 000, appendix: X-LogSMask in a ViT).

An ``H x W`` image cut into ``p x p`` patches is a ``(H/p) x (W/p)`` grid of
patch nodes, numbered row-major (patch ``(r, c)`` is node ``r * cols + c``),
the order a strided convolution's output is flattened in. Two patches are
adjacent when they share an edge (4-neighbour) or also a corner (8-neighbour).
The graph is the same for every image of a dataset, so its powers are
computed once and shared by every batch.
"""
from __future__ import annotations

import numpy as np

__all__ = ["CONNECTIVITIES", "patch_grid", "grid_edges"]

#: Supported neighbourhoods: 4 (edge-sharing patches) or 8 (also diagonal ones).
CONNECTIVITIES = (4, 8)


def patch_grid(height: int, width: int, patch: int) -> tuple[int, int]:
    """``(rows, cols)`` of the patch grid of an ``height x width`` image.

    Raises:
        ValueError: ``patch < 1`` or a side not divisible by ``patch`` (a ViT's
            strided convolution would silently drop the remainder).
    """
    if patch < 1:
        raise ValueError(f"patch size must be >= 1, got {patch}")
    bad = [(name, side) for name, side in (("height", height), ("width", width)) if side % patch]
    if bad:
        divisors = [d for d in range(1, min(height, width) + 1) if height % d == 0 and width % d == 0]
        sides = ", ".join(f"{name} {side}" for name, side in bad)
        raise ValueError(f"patch size {patch} does not divide the image ({sides}); "
                         f"patch sizes that divide {height}x{width}: {', '.join(map(str, divisors))}")
    return height // patch, width // patch


def grid_edges(rows: int, cols: int, connectivity: int = 4) -> np.ndarray:
    """Edges of the ``rows x cols`` grid graph, both directions, as ``[2, E]`` int64.

    Args:
        rows, cols: grid size (``>= 1`` each).
        connectivity: 4 (up, down, left, right) or 8 (also the diagonals).

    Returns:
        Every ordered pair ``(i, j)`` of adjacent nodes, sorted by ``(i, j)``;
        node ``r * cols + c`` is the patch in row ``r``, column ``c``. No self
        loops (``Â`` adds them).
    """
    if connectivity not in CONNECTIVITIES:
        raise ValueError(f"connectivity must be one of {CONNECTIVITIES}, got {connectivity!r}")
    if rows < 1 or cols < 1:
        raise ValueError(f"grid size must be >= 1 x 1, got {rows} x {cols}")
    offsets = [(-1, 0), (1, 0), (0, -1), (0, 1)]
    if connectivity == 8:
        offsets += [(-1, -1), (-1, 1), (1, -1), (1, 1)]
    r, c = np.divmod(np.arange(rows * cols, dtype=np.int64), cols)
    src, dst = [], []
    for dr, dc in offsets:
        rr, cc = r + dr, c + dc
        ok = (rr >= 0) & (rr < rows) & (cc >= 0) & (cc < cols)
        src.append(r[ok] * cols + c[ok])
        dst.append(rr[ok] * cols + cc[ok])
    s, d = np.concatenate(src), np.concatenate(dst)
    order = np.lexsort((d, s))
    return np.stack([s[order], d[order]])
