"""The patch grid graph against hand-worked 3x3 cases and networkx's grid graphs."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from xmask_cli.structure.grid import grid_edges, patch_grid

# 3x3 grid, row-major ids:
#   0 1 2
#   3 4 5
#   6 7 8
HAND_4 = {0: {1, 3}, 1: {0, 2, 4}, 2: {1, 5}, 3: {0, 4, 6}, 4: {1, 3, 5, 7}, 5: {2, 4, 8}, 6: {3, 7}, 7: {4, 6, 8},
          8: {5, 7}}
HAND_8 = {0: {1, 3, 4}, 1: {0, 2, 3, 4, 5}, 2: {1, 4, 5}, 3: {0, 1, 4, 6, 7}, 4: {0, 1, 2, 3, 5, 6, 7, 8},
          5: {1, 2, 4, 7, 8}, 6: {3, 4, 7}, 7: {3, 4, 5, 6, 8}, 8: {4, 5, 7}}


def neighbours(edges: np.ndarray, n: int) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {i: set() for i in range(n)}
    for s, d in edges.T:
        out[int(s)].add(int(d))
    return out


@pytest.mark.parametrize("connectivity, hand, undirected", [(4, HAND_4, 12), (8, HAND_8, 20)])
def test_3x3_grid_matches_the_hand_worked_neighbourhoods(connectivity, hand, undirected):
    e = grid_edges(3, 3, connectivity)
    assert neighbours(e, 9) == hand
    assert e.shape[1] == 2 * undirected  # both directions, each once
    assert len({(int(s), int(d)) for s, d in e.T}) == e.shape[1]
    assert not np.any(e[0] == e[1])


@pytest.mark.parametrize("rows, cols", [(1, 5), (4, 7), (6, 6)])
def test_rectangular_grids_match_networkx(rows, cols):
    four = nx.grid_2d_graph(rows, cols)
    eight = nx.Graph(four)
    eight.add_edges_from(((r, c), (r + dr, c + dc)) for r in range(rows) for c in range(cols)
                         for dr, dc in ((1, 1), (1, -1)) if 0 <= r + dr < rows and 0 <= c + dc < cols)
    for graph, conn in ((four, 4), (eight, 8)):
        want = {tuple(sorted((r1 * cols + c1, r2 * cols + c2))) for (r1, c1), (r2, c2) in graph.edges}
        got = {tuple(sorted((int(s), int(d)))) for s, d in grid_edges(rows, cols, conn).T}
        assert got == want


def test_patch_grid_sizes_and_refusals():
    assert patch_grid(32, 32, 2) == (16, 16)
    assert patch_grid(8, 12, 4) == (2, 3)
    with pytest.raises(ValueError, match=r"patch size 3 does not divide the image \(height 8, width 8\).*1, 2, 4, 8"):
        patch_grid(8, 8, 3)
    with pytest.raises(ValueError, match="width 10"):
        patch_grid(8, 10, 4)
    with pytest.raises(ValueError, match="connectivity"):
        grid_edges(3, 3, 6)
