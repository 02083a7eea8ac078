"""Cached extras (SPD, RRWP, spectra) served by ``GraphExtras`` against networkx / numpy references."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
import torch

from tests.model.biases.refs import spd_matrix
from xmask_cli.cache import StructureCache
from xmask_cli.config_resolve import resolve
from xmask_cli.data.load import graphs_fingerprint
from xmask_cli.engine import GraphLevelStream
from xmask_cli.engine.batching.extras import GraphExtras, pad_extras, to_tensors
from xmask_cli.prepare import prepare_graphs
from xmask_cli.structure.spectrum import magnetic_laplacian

MAX_DIST = 2  # path5 has pairs beyond it (cached as absent, served as -1)
STEPS = 3  # walks I, P, P^2, P^3: path5's end-to-end pair has no walk
NEEDS = ("spd", "rrwp", "spectrum", "magnetic")

# Edge lists are directed as given (the magnetic Laplacian reads the direction).
GRAPHS = [
    (5, [(0, 1), (1, 2), (2, 3), (3, 4)]),  # directed path
    (4, [(0, 1), (1, 2), (2, 0)]),  # directed triangle + isolated node 3
    (1, []),  # one node
    (6, [(0, 1), (1, 2), (2, 0), (3, 4), (5, 4)]),  # triangle + path: two components with edges
]


class Toy:
    def __init__(self, root: Path):
        self.edges = [np.array(e, dtype=np.int64).reshape(-1, 2).T.copy() for _, e in GRAPHS]
        self.num_nodes = np.array([n for n, _ in GRAPHS], dtype=np.int64)
        st = resolve("graph-level").structure
        self.cfg = dataclasses.replace(
            st, spd=dataclasses.replace(st.spd, enabled=True, max_distance=MAX_DIST),
            rrwp=dataclasses.replace(st.rrwp, enabled=True, steps=STEPS),
            magnetic=dataclasses.replace(st.magnetic, enabled=True))
        self.path = prepare_graphs(dataset_key="toy", level="graph", edges=self.edges, num_nodes=self.num_nodes,
                                   fingerprint=graphs_fingerprint(self.edges, self.num_nodes), cfg=self.cfg,
                                   cache_dir=root / "cache").path
        gen = torch.Generator().manual_seed(0)
        self.features = [torch.randn(int(n), 2, generator=gen) for n in self.num_nodes]
        self.labels = torch.arange(len(GRAPHS))


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Toy:
    return Toy(tmp_path_factory.mktemp("extras"))


@pytest.fixture
def cache(toy: Toy):
    with StructureCache(toy.path) as c:
        yield c


def adjacency(g: int, directed: bool = False) -> np.ndarray:
    n, edges = GRAPHS[g]
    a = np.zeros((n, n))
    for u, v in edges:
        a[u, v] = 1.0
        if not directed:
            a[v, u] = 1.0
    return a


def ref_spd(g: int) -> np.ndarray:
    n, edges = GRAPHS[g]
    return spd_matrix(n, edges, MAX_DIST)


def ref_rrwp(g: int) -> np.ndarray:
    a = adjacency(g)
    deg = a.sum(1)
    p = np.divide(a, deg[:, None], out=np.zeros_like(a), where=deg[:, None] > 0)
    return np.stack([np.linalg.matrix_power(p, s) for s in range(STEPS + 1)])


@pytest.mark.parametrize("g", range(len(GRAPHS)))
def test_dense_against_references(cache: StructureCache, g: int):
    ex = GraphExtras(cache, g, NEEDS).dense()
    n = GRAPHS[g][0]
    assert ex["spd"].shape == (n, n) and ex["spd"].dtype == np.int16
    np.testing.assert_array_equal(ex["spd"], ref_spd(g))
    assert ex["rrwp"].shape == (STEPS + 1, n, n)
    np.testing.assert_allclose(ex["rrwp"], ref_rrwp(g), atol=1e-6)
    vals, vecs = cache.spectrum(g)
    np.testing.assert_allclose(ex["eig_vals"], vals, atol=1e-6)
    np.testing.assert_allclose(ex["eig_vecs"], vecs, atol=1e-6)
    assert ex["eig_mask"].all() and ex["eig_mask"].shape == vals.shape
    mv, mu = cache.magnetic(g)
    np.testing.assert_allclose(ex["mag_vals"], mv, atol=1e-6)
    np.testing.assert_allclose(ex["mag_vecs"], mu, atol=1e-6)
    assert np.iscomplexobj(ex["mag_vecs"]) and ex["mag_mask"].all()
    # the cached eigenpairs are eigenpairs of the Laplacians built here (every pair kept: small graphs)
    a = adjacency(g)
    deg = a.sum(1)
    dis = np.divide(1.0, np.sqrt(deg), out=np.zeros_like(deg), where=deg > 0)
    lap = np.eye(n) - dis[:, None] * a * dis[None, :]
    assert len(vals) == n
    np.testing.assert_allclose(lap @ ex["eig_vecs"], ex["eig_vecs"] * ex["eig_vals"], atol=1e-5)
    np.testing.assert_allclose(np.sort(ex["eig_vals"]), np.linalg.eigvalsh(lap), atol=1e-5)
    mag = magnetic_laplacian(sp.csr_matrix(adjacency(g, directed=True)), toy_q()).toarray()
    np.testing.assert_allclose(mag @ ex["mag_vecs"], ex["mag_vecs"] * ex["mag_vals"], atol=1e-5)
    np.testing.assert_allclose(np.sort(ex["mag_vals"]), np.linalg.eigvalsh(mag), atol=1e-5)


def toy_q() -> float:
    return resolve("graph-level").structure.magnetic.q


def test_dense_references_cover_the_conventions():
    # sanity of the set-up: beyond-cut-off and unreachable pairs, and walk-less pairs, exist
    assert (ref_spd(0) == -1).any() and (ref_spd(1) == -2).any() and (ref_spd(3) == -2).any()
    assert (ref_rrwp(0) == 0).all(0).any()


@pytest.mark.parametrize("g,nodes", [(0, [0, 2, 3]), (1, [1, 3]), (3, [0, 2, 4, 5]), (0, [4]), (2, [0])])
def test_dense_block_is_submatrix(cache: StructureCache, g: int, nodes: list[int]):
    extras = GraphExtras(cache, g, NEEDS)
    full, block = extras.dense(), extras.dense(np.array(nodes))
    ids = np.array(nodes)
    np.testing.assert_array_equal(block["spd"], full["spd"][ids][:, ids])
    np.testing.assert_array_equal(block["rrwp"], full["rrwp"][:, ids][:, :, ids])
    for pre in ("eig", "mag"):
        np.testing.assert_array_equal(block[f"{pre}_vals"], full[f"{pre}_vals"])
        np.testing.assert_array_equal(block[f"{pre}_vecs"], full[f"{pre}_vecs"][ids])
        np.testing.assert_array_equal(block[f"{pre}_mask"], full[f"{pre}_mask"])


@pytest.mark.parametrize("g", range(len(GRAPHS)))
def test_pairs_equal_dense(cache: StructureCache, g: int):
    extras = GraphExtras(cache, g, NEEDS)
    full = extras.dense()
    n = GRAPHS[g][0]
    rng = np.random.default_rng(g)
    r, c = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    rows = np.concatenate([r.ravel(), rng.integers(0, n, 20)])  # all pairs, then repeats in any order
    cols = np.concatenate([c.ravel(), rng.integers(0, n, 20)])
    out = extras.pairs(rows, cols)
    np.testing.assert_array_equal(out["spd"], full["spd"][rows, cols])
    assert out["spd"].dtype == np.int16
    np.testing.assert_allclose(out["rrwp"], full["rrwp"][:, rows, cols].T, atol=0)
    for pre in ("eig", "mag"):
        m = len(full[f"{pre}_vals"])
        assert out[f"{pre}_vals"].shape == (n, m)
        np.testing.assert_array_equal(out[f"{pre}_vals"], np.broadcast_to(full[f"{pre}_vals"], (n, m)))
        np.testing.assert_array_equal(out[f"{pre}_vecs"], full[f"{pre}_vecs"])
        assert out[f"{pre}_mask"].all() and out[f"{pre}_mask"].shape == (n, m)
    if g == 0:  # pairs off the cached supports are among them
        sr, sc, _ = cache.spd(g)
        wr, wc, _ = cache.rrwp(g)
        stored_spd = set(zip(sr.tolist(), sc.tolist()))
        stored_walk = set(zip(wr.tolist(), wc.tolist()))
        pairs = set(zip(rows.tolist(), cols.tolist()))
        assert pairs - stored_spd and pairs - stored_walk
        assert (out["spd"] == -1).any() and (out["rrwp"] == 0).all(1).any()


def test_pairs_of_a_block(cache: StructureCache):
    extras = GraphExtras(cache, 3, NEEDS)
    full = extras.dense()
    nodes = np.array([1, 3, 4])
    rows, cols = np.array([1, 3, 4, 1, 4]), np.array([3, 4, 1, 1, 3])
    out = extras.pairs(rows, cols, nodes)
    np.testing.assert_array_equal(out["spd"], full["spd"][rows, cols])
    np.testing.assert_array_equal(out["rrwp"], full["rrwp"][:, rows, cols].T)
    np.testing.assert_array_equal(out["eig_vecs"], full["eig_vecs"][nodes])
    assert out["mag_vals"].shape == (3, len(full["mag_vals"]))


def test_missing_or_unknown_section(toy: Toy, tmp_path: Path, cache: StructureCache):
    with pytest.raises(ValueError, match="unknown"):
        GraphExtras(cache, 0, ("spd", "walks"))
    cfg = dataclasses.replace(toy.cfg, rrwp=dataclasses.replace(toy.cfg.rrwp, enabled=False))
    path = prepare_graphs(dataset_key="toy", level="graph", edges=toy.edges, num_nodes=toy.num_nodes,
                          fingerprint=graphs_fingerprint(toy.edges, toy.num_nodes), cfg=cfg,
                          cache_dir=tmp_path / "c2").path
    with StructureCache(path) as c2:
        with pytest.raises(ValueError, match="rrwp"):
            GraphExtras(c2, 0, ("rrwp",))
        GraphExtras(c2, 0, ("spd",))


def test_pad_extras(cache: StructureCache):
    items = [GraphExtras(cache, g, NEEDS).dense() for g in (1, 0, 2)]  # 4, 5, 1 nodes; 4, 5, 1 eigenpairs
    out = pad_extras(items, 6)
    assert out["spd"].shape == (3, 6, 6) and out["rrwp"].shape == (3, STEPS + 1, 6, 6)
    for b, it in enumerate(items):
        n = it["spd"].shape[0]
        np.testing.assert_array_equal(out["spd"][b, :n, :n], it["spd"])
        assert (out["spd"][b][n:] == -2).all() and (out["spd"][b][:, n:] == -2).all()
        np.testing.assert_array_equal(out["rrwp"][b, :, :n, :n], it["rrwp"])
        assert not out["rrwp"][b, :, n:].any() and not out["rrwp"][b, :, :, n:].any()
        for pre in ("eig", "mag"):
            k = len(it[f"{pre}_vals"])
            assert out[f"{pre}_vals"].shape == (3, 5) and out[f"{pre}_vecs"].shape == (3, 6, 5)
            np.testing.assert_array_equal(out[f"{pre}_vals"][b, :k], it[f"{pre}_vals"])
            assert not out[f"{pre}_vals"][b, k:].any()
            np.testing.assert_array_equal(out[f"{pre}_vecs"][b, :n, :k], it[f"{pre}_vecs"])
            assert not out[f"{pre}_vecs"][b, n:].any() and not out[f"{pre}_vecs"][b, :, k:].any()
            assert out[f"{pre}_mask"][b].tolist() == [True] * k + [False] * (5 - k)
    assert np.iscomplexobj(out["mag_vecs"]) and out["mag_mask"].dtype == bool
    assert pad_extras([], 3) == {}
    t = to_tensors(out)
    assert t["spd"].dtype == torch.int16 and t["mag_vecs"].dtype == torch.complex64 and t["eig_mask"].dtype == torch.bool
    one = to_tensors(items[0], batch_dim=True)
    assert one["spd"].shape == (1, 4, 4) and one["eig_vals"].shape == (1, 4)


@pytest.mark.parametrize("in_memory", [False, True])
def test_stream_batches_carry_extras(toy: Toy, in_memory: bool):
    stream = GraphLevelStream(toy.path, toy.features, toy.labels, np.arange(len(GRAPHS)), batch_size=2,
                              shuffle=True, seed=1, load_in_memory=in_memory, needs=NEEDS)
    seen = []
    with StructureCache(toy.path) as c:
        for batch in stream.epoch(0):
            assert batch.extras is not None
            ex = batch.extras
            n_max = batch.mask.size(1)
            for b, g in enumerate(batch.index.tolist()):
                seen.append(g)
                ref = GraphExtras(c, g, NEEDS).dense()
                n = GRAPHS[g][0]
                assert batch.mask[b].sum() == n
                np.testing.assert_array_equal(ex["spd"][b, :n, :n].numpy(), ref_spd(g))
                assert (ex["spd"][b, n:] == -2).all()
                np.testing.assert_allclose(ex["rrwp"][b, :, :n, :n].numpy(), ref_rrwp(g), atol=1e-6)
                for pre in ("eig", "mag"):
                    k = len(ref[f"{pre}_vals"])
                    np.testing.assert_array_equal(ex[f"{pre}_vals"][b, :k].numpy(), ref[f"{pre}_vals"])
                    np.testing.assert_array_equal(ex[f"{pre}_vecs"][b, :n, :k].numpy(), ref[f"{pre}_vecs"])
                    assert ex[f"{pre}_mask"][b].sum() == k
                assert ex["spd"].shape[1:] == (n_max, n_max)
    assert sorted(seen) == list(range(len(GRAPHS)))
    plain = GraphLevelStream(toy.path, toy.features, toy.labels, np.arange(len(GRAPHS)), batch_size=2)
    assert all(b.extras is None for b in plain.epoch(0))


# ------------------------------------------ spectra of disconnected graphs
def _big_disconnected(seed: int) -> tuple[np.ndarray, int]:
    """A directed graph above 200 nodes with 8 components (one above DENSE_MAX) and an isolated node."""
    rng = np.random.default_rng(seed)
    parts, sizes = [], []
    for s in (200, 30, 12, 9, 5, 5, 3, 1):
        g = nx.gnp_random_graph(s, 0.05, seed=int(rng.integers(1 << 20)), directed=True)
        g.add_edges_from(zip(range(s - 1), range(1, s)))  # a directed path: weakly connected
        parts.append(np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2).T)
        sizes.append(s)
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    e = np.concatenate([p + o for p, o in zip(parts, offs)], axis=1)
    n = int(sum(sizes))
    return np.random.default_rng(seed + 1).permutation(n)[e], n


def _randomized(mod: torch.nn.Module, seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in mod.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return mod


def test_spectra_and_biases_are_permutation_equivariant_through_the_cache(tmp_path: Path):
    from xmask_cli.model.biases import EigenBias, MagneticBias

    e, n = _big_disconnected(0)
    perm = np.random.default_rng(9).permutation(n)  # node i of graph 0 is node perm[i] of graph 1
    e2 = perm[e]
    st = resolve("graph-level").structure
    cfg = dataclasses.replace(st, spd=dataclasses.replace(st.spd, enabled=False),
                              spectrum=dataclasses.replace(st.spectrum, num_eigs=8),
                              magnetic=dataclasses.replace(st.magnetic, enabled=True, num_eigs=8))
    nn = np.array([n, n])
    path = prepare_graphs(dataset_key="perm", level="graph", edges=[e, e2], num_nodes=nn,
                          fingerprint=graphs_fingerprint([e, e2], nn), cfg=cfg, cache_dir=tmp_path / "cache").path
    eig = EigenBias(2)
    mag = MagneticBias(2, width=4)
    _randomized(eig, 1)
    _randomized(mag, 2)
    with StructureCache(path) as c:
        outs = []
        for g in (0, 1):
            vals, _ = c.spectrum(g)
            # 7 components with edges: 7 zero eigenvalues, then the 8 lowest non-zero ones
            # (fewer if a repeated eigenvalue straddles the cut: identical components here).
            assert (vals <= 1e-6).sum() == 7 and 0 < (vals > 1e-6).sum() <= 8
            assert 0 < (c.magnetic(g)[0] > 1e-6).sum() <= 8
            x = to_tensors(GraphExtras(c, g, ("spectrum", "magnetic")).dense(), batch_dim=True)
            with torch.no_grad():
                outs.append((eig(x)[0].numpy(), mag(x)[0].numpy(), c.spectrum(g), c.magnetic(g)))
    (eb0, mb0, s0, m0), (eb1, mb1, s1, m1) = outs
    # Graph 1 is graph 0 relabelled by perm: every output is graph 0's, permuted.
    ix = np.ix_(perm, perm)
    np.testing.assert_allclose(eb1[:, perm][:, :, perm], eb0, atol=1e-4 * np.abs(eb0).max())
    np.testing.assert_allclose(mb1[:, perm][:, :, perm], mb0, atol=1e-4 * np.abs(mb0).max())
    assert np.abs(eb0).max() > 1e-3 and np.abs(mb0).max() > 1e-3  # the biases carry information
    for (v0, x0), (v1, x1) in ((s0, s1), (m0, m1)):
        np.testing.assert_allclose(v1, v0, atol=1e-6)
        x0, x1 = x0.astype(np.complex128), x1.astype(np.complex128)
        # As projectors onto each eigenspace (eigenvectors of a repeated eigenvalue have no fixed basis).
        bounds = np.flatnonzero(np.diff(v0) > 1e-6) + 1
        for lo, hi in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [len(v0)]])):
            p0 = x0[:, lo:hi] @ x0[:, lo:hi].conj().T
            p1 = x1[:, lo:hi] @ x1[:, lo:hi].conj().T
            np.testing.assert_allclose(p1[ix], p0, atol=1e-5)
