"""Planning blocks of graphs and the parameters that key a cache."""
from __future__ import annotations

import numpy as np
import pytest

from xmask_cli.config import resolve
from xmask_cli.prepare import col_dtype, plan_blocks, structure_params


@pytest.mark.parametrize("seed", range(5))
def test_blocks_cover_every_graph_once_in_order(seed):
    rng = np.random.default_rng(seed)
    nn = rng.integers(0, 300, size=200)
    nn[rng.integers(0, 200, size=3)] = 6000  # a few large graphs among small ones
    blocks = plan_blocks(nn, large_min=5000, block_nodes=1000)
    flat = [g for s, e, _ in blocks for g in range(s, e)]
    assert flat == list(range(200))
    for s, e, large in blocks:
        if large:
            assert e == s + 1 and nn[s] > 5000  # a large graph always goes alone
        else:
            assert (nn[s:e] <= 5000).all()
            assert nn[s:e].sum() <= 1000 or e == s + 1  # only a single graph may exceed the budget


def test_col_dtype_halves_columns_only_when_safe():
    assert col_dtype(np.array([10, 65536])) == np.uint16
    assert col_dtype(np.array([10, 65537])) == np.int32


def test_key_parameters_ignore_what_prepare_does_not_read():
    base = structure_params(resolve("graph-level").structure, "graph")
    assert "eps" not in base["powers"]
    off = structure_params(resolve("graph-level", ["structure.spd.enabled=false", "structure.spd.max_distance=3"]).structure, "graph")
    assert off["spd"] == {"enabled": False}  # a disabled section's settings do not matter
    node = structure_params(resolve("node-level").structure, "node")
    graph = structure_params(resolve("node-level").structure, "graph")
    assert node["partition"]["parts"] == 32 and graph["partition"] == {"parts": 0}
