"""AddLogSMask: Â^k against dense numpy, and the same pairs and values as the structure cache stores."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data

from xmask_cli.cache import StructureCache
from xmask_cli.config import LargeGraphSection, PowersSection, StructureSection
from xmask_cli.errors import UsageError
from xmask_cli.prepare import prepare_graphs
from xmask_cli.transforms import AddLogSMask


def _dense_powers(edges: np.ndarray, n: int, k: int) -> np.ndarray:
    """``[k, n, n]`` Â^1..Â^k by brute force: symmetrize, drop self loops, add I once, normalize, multiply."""
    a = np.zeros((n, n))
    for u, v in edges.T:
        if u != v:
            a[u, v] = a[v, u] = 1.0
    a += np.eye(n)
    d = 1.0 / np.sqrt(a.sum(1))
    a_hat = d[:, None] * a * d[None, :]
    return np.stack([np.linalg.matrix_power(a_hat, j) for j in range(1, k + 1)])


def _random_graph(n: int, m: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(2, m))


def test_powers_equal_dense_numpy_on_a_small_graph():
    # One-way edges, a duplicate, a self loop and an isolated node (7): each handled as the method says.
    edges = np.array([[0, 1, 2, 3, 3, 1, 4, 5, 2], [1, 2, 3, 4, 4, 1, 5, 6, 0]])
    n, k = 8, 3
    data = AddLogSMask(k=k)(Data(edge_index=torch.from_numpy(edges), num_nodes=n))
    index, values = data.logsmask_index.numpy(), data.logsmask_values.numpy()
    want = _dense_powers(edges, n, k)
    assert values.dtype == np.float32 and values.shape == (index.shape[1], k)
    pairs = set(zip(*index))
    assert len(pairs) == index.shape[1]  # no pair twice
    # The support is the union of the powers' supports: every pair within k hops, and nothing else.
    assert pairs == set(zip(*np.nonzero(want.sum(0))))
    got = np.zeros((k, n, n))
    got[:, index[0], index[1]] = values.T
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert (7, 7) in pairs and got[0, 7, 7] == pytest.approx(1.0)  # an isolated node keeps its self loop


@pytest.mark.parametrize("normalization", ["sym", "no-symnorm"])
def test_pairs_equal_what_the_cache_stores(tmp_path, normalization):
    # Small graphs (exact) and one above large.min_nodes (truncated by tau and topk), in one cache.
    graphs = [_random_graph(12, 20, 0), _random_graph(30, 45, 1), _random_graph(90, 400, 2)]
    nn = np.array([12, 30, 90])
    large = LargeGraphSection(min_nodes=60, tau=1e-3, topk=12)
    cfg = StructureSection(powers=PowersSection(k=4, normalization=normalization), large=large)
    summary = prepare_graphs(dataset_key="toy", level="graph", edges=graphs, num_nodes=nn, fingerprint="toy",
                             cfg=cfg, cache_dir=tmp_path)
    assert summary.truncation["large_graphs"] == 1
    transform = AddLogSMask(k=4, normalization=normalization, large_min_nodes=60, tau=1e-3, topk=12)
    with StructureCache(summary.path) as cache:
        for g, (edges, n) in enumerate(zip(graphs, nn)):
            row, col, vals = cache.powers(g)
            data = transform(Data(edge_index=torch.from_numpy(edges), num_nodes=int(n)))
            np.testing.assert_array_equal(data.logsmask_index.numpy(), np.stack([row, col.astype(np.int64)]))
            np.testing.assert_array_equal(data.logsmask_values.numpy(), vals)
    # The large graph really was truncated: fewer pairs than the exact ball of radius 4.
    exact = AddLogSMask(k=4, normalization=normalization)(Data(edge_index=torch.from_numpy(graphs[2]), num_nodes=90))
    assert data.logsmask_index.size(1) < exact.logsmask_index.size(1)


def test_a_pyg_batch_offsets_the_pairs_like_edge_index():
    t = AddLogSMask(k=2)
    a = t(Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3))
    b = t(Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2))
    batch = Batch.from_data_list([a, b])
    assert torch.equal(batch.logsmask_index, torch.cat([a.logsmask_index, b.logsmask_index + 3], dim=1))
    assert torch.equal(batch.logsmask_values, torch.cat([a.logsmask_values, b.logsmask_values]))


def test_the_input_is_not_modified_and_bad_settings_fail_like_a_preset():
    data = Data(edge_index=torch.tensor([[0], [1]]), num_nodes=2)
    out = AddLogSMask(k=2, attr="mask")(data)
    assert "mask_index" in out and "mask_index" not in data
    # A wrong type or value names the parameter; a value past a preset's range fails as the preset would.
    with pytest.raises(UsageError, match="^k: expected an int >= 1; got 0"):
        AddLogSMask(k=0)
    with pytest.raises(UsageError, match="^normalization: expected one of 'sym', 'no-symnorm'; got 'rw'"):
        AddLogSMask(normalization="rw")
    for k in (17, 50):  # above a preset's bound: named as this parameter, not as structure.powers.k
        with pytest.raises(UsageError, match=rf"^k: expected an int in \[1, 16\]; got {k}$"):
            AddLogSMask(k=k)


@pytest.mark.parametrize("edges, n, said", [
    (torch.tensor([[0, 5], [1, 2]]), 5, r"^data\.edge_index: expected node ids in \[0, 5\) \(5 nodes\); got 5$"),
    (torch.tensor([[0, -1], [1, 2]]), 5, r"^data\.edge_index: expected node ids in \[0, 5\) \(5 nodes\); got -1$"),
    (torch.tensor([[0.0, 1.0], [1.0, 2.0]]), 5, r"^data\.edge_index: expected integer node ids \[2, E\]; got float32"),
    (torch.tensor([0, 1, 2]), 5, r"^data\.edge_index: expected integer node ids \[2, E\]; got int64 \[3\]"),
])
def test_edges_that_name_no_node_are_refused(edges, n, said):
    with pytest.raises(UsageError, match=said):
        AddLogSMask(k=2)(Data(edge_index=edges, num_nodes=n))
    # The array entry point checks the same, under its own parameter name.
    with pytest.raises(UsageError, match="^edge_index: "):
        AddLogSMask(k=2).pairs(edges.numpy(), n)
