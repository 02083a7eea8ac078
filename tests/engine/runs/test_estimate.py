"""engine.runs.estimate: pairs within k hops against networkx, the cache's own counts, attention entries and the
memory formula worked by hand."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from xmask_cli.engine.runs.estimate import (
    DROPPED_FLOATS,
    ENTRY_FLOATS,
    TOKEN_FLOATS,
    StepShape,
    graph_batch_shape,
    hop_pair_counts,
    step_bytes,
)


def _nx_counts(edges: np.ndarray, n: int, k: int) -> list[int]:
    """Ordered pairs (u, v) at hop distance <= j (u = v included), j = 1..k, by breadth-first search."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges.T.tolist())
    dist = [d for u in range(n) for d in nx.single_source_shortest_path_length(g, u, cutoff=k).values()]
    return [sum(1 for d in dist if d <= j) for j in range(1, k + 1)]


def test_hop_pair_counts_equal_breadth_first_search_per_graph():
    rng = np.random.default_rng(0)
    edges, sizes = [], []
    for n in (1, 2, 7, 15, 30):
        m = rng.integers(0, 2 * n + 1)
        e = rng.integers(0, n, size=(2, m))
        edges.append(e[:, e[0] != e[1]])  # self loops would not change the counts; leave them out of the input
        sizes.append(n)
    got = hop_pair_counts(edges, np.array(sizes), 4)
    want = [_nx_counts(e, n, 4) for e, n in zip(edges, sizes)]
    assert got.tolist() == want
    # One direction of each edge is enough: the adjacency is made symmetric.
    assert hop_pair_counts([edges[3][::-1]], np.array([15]), 4).tolist() == [want[3]]


def test_hop_pair_counts_cap_the_rows_of_large_graphs():
    star = np.array([[0] * 9, list(range(1, 10))])  # a centre and 9 leaves: row pairs 10 (centre), 2 (leaves)
    assert hop_pair_counts([star], np.array([10]), 2).tolist() == [[10 + 9 * 2, 10 * 10]]
    capped = hop_pair_counts([star], np.array([10]), 2, large_min=5, topk=4)
    assert capped.tolist() == [[4 + 9 * 2, 10 * 4]]
    assert hop_pair_counts([star], np.array([10]), 2, large_min=10, topk=4).tolist() == [[28, 100]]  # not above


def test_cached_pair_counts_equal_the_counts_from_the_graphs(tmp_path):
    """The two ways the dry run finds the stored pairs agree on MUTAG (powers of Â^1..Â^4, 188 graphs)."""
    from xmask_cli.cache import StructureCache
    from xmask_cli.config_resolve import resolve
    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset
    from xmask_cli.engine.runs.estimate import cached_pair_counts
    from xmask_cli.prepare import prepare_dataset

    summary = prepare_dataset(resolve("graph-level", []), cache_dir=tmp_path / "cache")
    graphs = load_graphs(get_dataset("MUTAG"), data_root=None, cache_dir=tmp_path / "cache")
    with StructureCache(summary.path) as cache:
        cached = cached_pair_counts(cache, 4)
        assert cached[:, -1].tolist() == [cache.num_pairs("powers", g) for g in range(cache.num_graphs)]
    assert cached.tolist() == hop_pair_counts(graphs.edge_index, graphs.num_nodes, 4).tolist()


def test_attention_entries_of_packed_and_padded_batches():
    # Two groups beat one here: 2 calls + 100^2 + 2^2 < 1 call + 2 * 100^2 (GROUP_CALL_PAIRS = 4096).
    packed = graph_batch_shape([100, 2], heads=2, layout="packed")
    assert (packed.nodes, packed.entries, packed.path) == (102, 2 * (100 * 100 + 2 * 2), "packed")
    padded = graph_batch_shape([100, 2], heads=2, layout="padded")
    assert (padded.nodes, padded.entries, padded.path) == (200, 2 * 2 * 100 * 100, "dense")
    small = graph_batch_shape([3, 3, 2], heads=1, layout="packed")  # one group, padded to 3
    assert small.entries == 3 * 9


@pytest.mark.parametrize("path", ["packed", "sparse"])
def test_step_bytes_is_the_documented_sum(path):
    shape = StepShape(graphs=4, nodes=50, entries=1000, path=path, dropped_width=7)
    want = 4 * (123 + TOKEN_FLOATS[path] * 2 * 50 * 16 + DROPPED_FLOATS * 50 * 7 + ENTRY_FLOATS[path] * 1000)
    assert step_bytes(shape, parameters=123, hidden=16, layers=2) == int(want)
