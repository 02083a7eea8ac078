"""explain.hops: the hop summary sums to one per head and follows each head's power of Â."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.model.graphs import adjacency, norm_powers
from xmask_cli.explain.hops import hop_mass
from xmask_cli.explain.record import Recorded, record_terms, to_numpy
from xmask_cli.model.batches import DenseBatch
from xmask_cli.model.network import ModelConfig, XMaskNet


def test_hop_summary_sums_to_one(mutag):
    result = mutag["result"]
    assert [t["name"] for t in result["targets"]] == ["graph_0", "graph_5"]
    buckets = result["hop_buckets"]
    assert buckets[-1] == "unreachable" and buckets[0] == "0"
    for layer in ("layer_0", "layer_1"):
        for hd, k in (("head_0", 1), ("head_1", 2)):
            entry = result["hop_summary"][layer][hd]
            assert entry["k"] == k and list(entry["mass"]) == buckets
            assert sum(entry["mass"].values()) == pytest.approx(1.0, abs=1e-9)


def test_hop_summary_respects_head_power_on_a_path():
    n = 8
    a = adjacency(n, [(i, i + 1) for i in range(n - 1)])
    powers = torch.from_numpy(norm_powers(a, 2)).float().unsqueeze(0)
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=3, out_dim=2, hidden=8, heads=2, layers=2, mask_scale="none", eps=1e-30, dropout=0.0)
    model = XMaskNet(cfg).eval()
    x = torch.randn(1, n, 3)
    _, layers = record_terms(model, DenseBatch(x, powers, torch.ones(1, n, dtype=torch.bool)))
    rec = Recorded(n=n, layers=[to_numpy(t, 0) for t in layers])
    dist = np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])  # path graph hop distances
    masses = hop_mass(rec, np.arange(n), dist, 8)
    for mass in masses:
        p = mass / mass.sum(1, keepdims=True)
        assert p[0, 2:].sum() < 1e-6  # head 0 reads Â^1: nothing beyond 1 hop
        assert p[1, 3:].sum() < 1e-6  # head 1 reads Â^2: nothing beyond 2 hops
        # Independently: per head, the attention mass at distance d, averaged over rows.
        for h in range(2):
            att = layers[0]["attention"][0, h].numpy() if mass is masses[0] else layers[1]["attention"][0, h].numpy()
            for d in range(3):
                assert p[h, d] == pytest.approx(att[dist == d].sum() / n, abs=1e-6)


def test_distance_rows_are_networkx_distances_with_the_cut_off():
    """Rows of the cache's SPD (a repeated row included) against networkx: the distance up to the cut-off,
    -1 beyond it in the same component, -2 in another component."""
    import tempfile
    from pathlib import Path

    import networkx as nx

    from tests.cache.graphs import prepare_toy, random_graphs
    from xmask_cli.cache import StructureCache
    from xmask_cli.config_resolve import resolve
    from xmask_cli.explain.hops import distance_rows

    edges, nodes = random_graphs(7, 6)
    cfg = resolve("graph-level", ["structure.spd.enabled=true", "structure.spd.max_distance=2"]).structure
    seen = set()
    with tempfile.TemporaryDirectory() as tmp, StructureCache(prepare_toy(Path(tmp), edges, nodes, cfg=cfg).path) as c:
        for g, (e, n) in enumerate(zip(edges, nodes)):
            G = nx.Graph()
            G.add_nodes_from(range(n))
            G.add_edges_from((int(u), int(v)) for u, v in e.T if u != v)
            rows = np.array([0, n - 1, 0])
            got, d_max = distance_rows(c, g, rows)
            assert d_max == 2 and got.shape == (3, n)
            for i, r in enumerate(rows):
                lengths = nx.single_source_shortest_path_length(G, int(r))
                want = [lengths[j] if lengths.get(j, 99) <= 2 else (-1 if j in lengths else -2) for j in range(n)]
                assert got[i].tolist() == want
                seen |= set(want)
    assert {-2, -1, 0, 1, 2} <= seen  # every kind of entry was checked


@pytest.mark.parametrize("queries", ["all", "some"])
def test_dense_hop_mass_equals_the_pair_list_formula(queries):
    """The dense branch (one bincount per head over the row block) against the same maps given as a full pair
    list (the sparse branch), on a random graph with two components and -1/-2 distances."""
    rng = np.random.default_rng(0)
    n, H, d_max = 30, 3, 3
    att = rng.random((H, n, n)).astype(np.float32)
    att /= att.sum(-1, keepdims=True)
    dist = rng.integers(0, 6, (n, n)).astype(np.int16)
    dist[rng.random((n, n)) < 0.1] = -1
    dist[:, 25:] = -2
    q = np.arange(n) if queries == "all" else np.array([3, 17, 29, 0])
    dense = Recorded(n=n, layers=[{"attention": att}, {"attention": att[::-1].copy()}])
    r, c = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    pairs = np.stack([r.ravel(), c.ravel()])
    sparse = Recorded(n=n, layers=[{"attention": a[:, pairs[0], pairs[1]].T} for a in (att, att[::-1].copy())],
                      pairs=pairs)
    got, want = hop_mass(dense, q, dist[q], d_max), hop_mass(sparse, q, dist[q], d_max)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
        # By hand: head 0's mass at distance 1 and in the unreachable bucket.
        a0 = att if g is got[0] else att[::-1]
        assert g[0, 1] == pytest.approx(sum(float(a0[0, i][dist[i] == 1].sum()) for i in q))
        assert g[0, d_max + 1] == pytest.approx(sum(float(a0[0, i, 25:].sum()) for i in q))
