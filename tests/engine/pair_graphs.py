"""Independent math for the pair tasks' tests: random graphs, dense Â^k, networkx SPD, the leakage check."""
from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np

from xmask_cli.cache import StructureCache
from xmask_cli.config import PowersSection, SpdSection, SpectrumSection, StructureSection

SPD_MAX = 8
#: Everything on, full spectrum for the small graphs: the leakage checks read every cached group.
FULL = StructureSection(powers=PowersSection(k=3), spd=SpdSection(enabled=True, max_distance=SPD_MAX),
                       spectrum=SpectrumSection(enabled=True, num_eigs=8, full_max_nodes=64))
#: Powers only: what training reads, and fast to prepare on Cora.
POWERS_ONLY = StructureSection(powers=PowersSection(k=2), spd=SpdSection(enabled=False),
                              spectrum=SpectrumSection(enabled=False))


def random_graph(n: int, p: float, seed: int) -> np.ndarray:
    """``[2, 2E]`` undirected G(n, p) edges in both directions."""
    rng = np.random.default_rng(seed)
    u, v = np.triu_indices(n, 1)
    keep = rng.random(u.size) < p
    u, v = u[keep], v[keep]
    return np.stack([np.concatenate([u, v]), np.concatenate([v, u])]).astype(np.int64)


def adjacency(edge_index: np.ndarray, n: int) -> np.ndarray:
    a = np.zeros((n, n))
    a[edge_index[0], edge_index[1]] = 1.0
    a[edge_index[1], edge_index[0]] = 1.0
    np.fill_diagonal(a, 0.0)
    return a


def dense_powers(edge_index: np.ndarray, n: int, k: int) -> np.ndarray:
    """``[k, n, n]`` Â^1..Â^k, Â = D^-1/2 (A + I) D^-1/2 (DESIGN.md)."""
    a = adjacency(edge_index, n) + np.eye(n)
    d = 1.0 / np.sqrt(a.sum(1))
    ahat = d[:, None] * a * d[None, :]
    out, m = [], np.eye(n)
    for _ in range(k):
        m = m @ ahat
        out.append(m)
    return np.stack(out)


def dense_spd(edge_index: np.ndarray, n: int, cutoff: int) -> np.ndarray:
    """Hop distances by networkx: -1 beyond ``cutoff`` (same component), -2 unreachable."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edge_index.T.tolist())
    comp = np.empty(n, dtype=np.int64)
    for c, nodes in enumerate(nx.connected_components(g)):
        comp[list(nodes)] = c
    out = np.where(comp[:, None] == comp[None, :], -1, -2)
    for src, dist in nx.all_pairs_shortest_path_length(g, cutoff=cutoff):
        for dst, d in dist.items():
            out[src, dst] = d
    return out


def laplacian_eigvals(edge_index: np.ndarray, n: int) -> np.ndarray:
    a = adjacency(edge_index, n)
    deg = a.sum(1)
    d = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-300)), 0.0)
    return np.linalg.eigvalsh(np.eye(n) - d[:, None] * a * d[None, :])


def check_no_leak(cache_path: Path, train_ei: np.ndarray, full_ei: np.ndarray, held_out: np.ndarray, n: int) -> None:
    """The cache is exactly the training graph's structure, and held-out pairs are not adjacent in it."""
    with StructureCache(cache_path) as c:
        powers, spd, (lam, _) = c.dense_powers(0), c.dense_spd(0), c.spectrum(0)
    u, v = held_out
    assert (powers[0, u, v] == 0).all() and (powers[0, v, u] == 0).all()
    assert (spd[u, v] != 1).all() and (spd[v, u] != 1).all()

    k = powers.shape[0]
    np.testing.assert_allclose(powers, dense_powers(train_ei, n, k), atol=1e-5)
    np.testing.assert_array_equal(spd, dense_spd(train_ei, n, SPD_MAX))
    np.testing.assert_allclose(np.sort(lam), laplacian_eigvals(train_ei, n), atol=1e-6)
    # ... and the full graph's would have been different.
    assert np.abs(powers - dense_powers(full_ei, n, k)).max() > 1e-3
    assert (spd != dense_spd(full_ei, n, SPD_MAX)).any()
    assert np.abs(np.sort(lam) - laplacian_eigvals(full_ei, n)).max() > 1e-3
