"""explain.image: the grid distances of the hop summary are the patch grid graph's hop distances."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from xmask_cli.explain.image import grid_distances


@pytest.mark.parametrize("connectivity", [4, 8])
def test_grid_distances_are_the_grid_graphs_shortest_paths(connectivity):
    rows, cols = 3, 5
    g = nx.grid_2d_graph(rows, cols)
    if connectivity == 8:  # add the diagonals: the king's-move grid
        g.add_edges_from(((r, c), (r + dr, c + dc)) for r in range(rows) for c in range(cols)
                         for dr, dc in ((1, 1), (1, -1)) if 0 <= r + dr < rows and 0 <= c + dc < cols)
    nodes = [(r, c) for r in range(rows) for c in range(cols)]  # row-major, as the patches
    lengths = dict(nx.all_pairs_shortest_path_length(g))
    want = np.array([[lengths[a][b] for b in nodes] for a in nodes])
    np.testing.assert_array_equal(grid_distances(rows, cols, connectivity), want)
