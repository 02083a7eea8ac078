"""The parameters that key a cache, large-graph truncation, spectra of real disconnected graphs, a cache
independent of the thread count."""
from __future__ import annotations

import numpy as np
import pytest

from xmask_cli.config_resolve import resolve
from xmask_cli.prepare import structure_params


def test_key_parameters_ignore_what_prepare_does_not_read():
    base = structure_params(resolve("graph-level").structure, "graph")
    assert "eps" not in base["powers"]
    off = structure_params(resolve("graph-level", ["structure.spd.enabled=false", "structure.spd.max_distance=3"]).structure, "graph")
    assert off["spd"] == {"enabled": False}  # a disabled section's settings do not matter
    node = structure_params(resolve("node-level").structure, "node")
    graph = structure_params(resolve("node-level").structure, "graph")
    assert node["partition"]["parts"] == 32 and graph["partition"] == {"parts": 0}


# ------------------------------------------------------------------ large-graph truncation
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import networkx as nx  # noqa: E402
import scipy.sparse as sp  # noqa: E402

from tests.model.graphs import a_hat_of  # noqa: E402
from xmask_cli.cache import StructureCache  # noqa: E402
from xmask_cli.data.load import graphs_fingerprint  # noqa: E402
from xmask_cli.prepare import prepare_graphs  # noqa: E402


def _dense_rule(m: np.ndarray, a_hat: np.ndarray, tau: float, topk: int) -> np.ndarray:
    """The documented rule, row by row: Â's support (edges + diagonal) always kept; other
    entries below tau dropped; then the largest others (ties: smaller column) up to topk in total."""
    out = np.zeros_like(m)
    for i in range(m.shape[0]):
        safe = np.flatnonzero(a_hat[i])
        others = [j for j in np.flatnonzero(m[i]) if a_hat[i, j] == 0 and m[i, j] >= tau]
        others.sort(key=lambda j: (-m[i, j], j))
        keep = list(safe) + others[: max(0, topk - len(safe))]
        out[i, keep] = m[i, keep]
    return out


def _prepare_large(tmp_path: Path, edges: np.ndarray, n: int, *sets: str):
    cfg = resolve("node-level", ["structure.large.min_nodes=100", "structure.spd.enabled=false",
                                 "structure.spectrum.enabled=false", "structure.partition.parts=0", *sets]).structure
    return prepare_graphs(dataset_key="toy", level="node", edges=[edges], num_nodes=np.array([n]),
                          fingerprint=graphs_fingerprint([edges], np.array([n])), cfg=cfg, cache_dir=tmp_path / "cache")


def _recorded(path: str) -> tuple[dict, np.ndarray]:
    with StructureCache(path) as c:
        assert bool(c.file["graphs/large"][0])
        return json.loads(c.file["powers"].attrs["dropped_mass"]), c.dense_powers(0).astype(np.float64)


def test_star_hub_keeps_every_edge_and_dropped_mass_is_recorded(tmp_path):
    # The tau / top-k rule alone (no fan-out cap); the cap on a star: test_star_under_a_fanout_cap_...
    leaves, K, topk = 500, 3, 128
    n = leaves + 1
    edges = np.stack([np.zeros(leaves, dtype=np.int64), np.arange(1, n)])
    s = _prepare_large(tmp_path, edges, n, f"structure.powers.k={K}", f"structure.large.topk={topk}",
                       "structure.large.fanout=0")
    rec, stored = _recorded(s.path)
    a_hat = a_hat_of(edges, n)

    # Â^1 whole: the hub's 500 edges and its self loop, each leaf's edge and its self loop.
    np.testing.assert_allclose(stored[0], a_hat, rtol=1e-6, atol=0)
    assert np.count_nonzero(stored[0][0]) == n and all(np.count_nonzero(stored[0][i]) == 2 for i in range(1, n))
    # k >= 2 by the documented rule, iterated on the truncated product.
    ref, exact = a_hat, a_hat
    for k in range(1, K):
        ref, exact = _dense_rule(ref @ a_hat, a_hat, 1e-6, topk), exact @ a_hat
        np.testing.assert_allclose(stored[k], ref, rtol=1e-6, atol=0)
        assert np.count_nonzero(stored[k][0]) == n  # the hub row: every entry is a real edge or the self loop
        # A leaf keeps itself, the hub and the 126 other leaves of smallest id (all tied in value).
        for i in (1, 2, 250, 500):
            others = [j for j in range(1, n) if j != i][: topk - 2]
            assert set(np.flatnonzero(stored[k][i])) == {0, i, *others}
        share = 1.0 - ref.sum(1) / exact.sum(1)
        assert rec["mean"][k] == pytest.approx(share.mean(), rel=1e-9)
        assert rec["max"][k] == pytest.approx(share.max(), rel=1e-9)
        # The stored (float32) rows drop the same mass.
        np.testing.assert_allclose(1.0 - stored[k].sum(1) / exact.sum(1), share, atol=2e-6)
    assert rec["rows"] == n and rec["mean"][0] == 0.0 and rec["max"][0] == 0.0
    # By hand, a leaf's Â^2 row: itself 1/4 + 1/1002, the hub (1/2 + 1/501)/sqrt(1002), 499 leaves
    # at 1/1002 each, of which 499 - 126 = 373 are dropped; the hub row drops nothing.
    leaf_row = 1 / 4 + 1 / 1002 + (1 / 2 + 1 / 501) / np.sqrt(1002) + 499 / 1002
    assert rec["max"][1] == pytest.approx(373 / 1002 / leaf_row, rel=1e-9)
    assert rec["mean"][1] == pytest.approx(373 / 1002 / leaf_row * leaves / n, rel=1e-9)
    assert s.truncation["powers"]["mean"] == rec["mean"] and s.truncation["large_graphs"] == 1


def test_star_under_a_fanout_cap_prepares_the_documented_rule(tmp_path):
    """A 4,000-leaf star under fanout 8: the hub passes mass on to itself and leaves 1..7 only. The stored
    powers equal the rule computed here by scipy products and a row loop; the cap is recorded."""
    leaves, K, topk, fanout = 4000, 3, 16, 8
    n = leaves + 1
    edges = np.stack([np.zeros(leaves, dtype=np.int64), np.arange(1, n)])
    s = _prepare_large(tmp_path, edges, n, f"structure.powers.k={K}", f"structure.large.topk={topk}",
                       f"structure.large.fanout={fanout}", "structure.large.tau=0")
    assert s.truncation["fanout"] == fanout and s.truncation["capped_rows"] == 1  # the hub alone
    a = sp.csr_matrix((np.ones(2 * leaves), (np.r_[edges[0], edges[1]], np.r_[edges[1], edges[0]])), shape=(n, n))
    d = 1.0 / np.sqrt(np.asarray(a.sum(1)).ravel() + 1.0)
    a_hat = sp.csr_matrix(sp.diags(d) @ (a + sp.identity(n)) @ sp.diags(d))
    # cap(Â): the hub's row keeps itself and its 7 neighbours of smallest degree (all 1: the smallest ids).
    right = a_hat.tolil()
    right[0, fanout:] = 0.0
    right = sp.csr_matrix(right)
    right.eliminate_zeros()
    ref = a_hat
    with StructureCache(s.path) as c:
        for k in range(1, K):
            prod = sp.csr_matrix(ref @ right)
            rr, cc, vv = [], [], []
            for i in range(n):  # trunc: Â's support, then the largest others (ties: smaller id) up to topk
                lo, hi = prod.indptr[i], prod.indptr[i + 1]
                val = dict(zip(prod.indices[lo:hi].tolist(), prod.data[lo:hi].tolist()))
                safe = [j for j in val if j == i or j == 0 or i == 0]
                others = sorted((j for j in val if j not in safe), key=lambda j: (-val[j], j))
                keep = safe + others[: max(0, topk - len(safe))]
                rr += [i] * len(keep)
                cc += keep
                vv += [val[j] for j in keep]
            ref = sp.csr_matrix((vv, (rr, cc)), shape=(n, n))
            for i in (0, 1, 5, fanout, 2500, leaves):
                got = np.zeros(n)
                lo, hi = c.file["powers/indptr"][i], c.file["powers/indptr"][i + 1]
                got[c.file["powers/col"][lo:hi].astype(np.int64)] = c.file["powers/values"][lo:hi, k]
                np.testing.assert_allclose(got, ref[i].toarray().ravel(), rtol=1e-6, atol=0)
    # By hand, Â^2 of a leaf i >= 8 under the cap: itself 1/4, the hub (1/2 + 1/4001)/sqrt(8002), leaves 1..7 at
    # 1/8002 each; the 3,992 other leaves get nothing through the capped hub row.
    row = np.zeros(n)
    with StructureCache(s.path) as c:
        lo, hi = c.file["powers/indptr"][2500], c.file["powers/indptr"][2501]
        row[c.file["powers/col"][lo:hi].astype(np.int64)] = c.file["powers/values"][lo:hi, 1]
    want = np.zeros(n)
    want[2500], want[0], want[1:fanout] = 1 / 4, (1 / 2 + 1 / 4001) / np.sqrt(8002), 1 / 8002
    np.testing.assert_allclose(row, want, rtol=1e-6, atol=0)


def test_truncation_report_of_a_fresh_build_equals_the_one_read_back(tmp_path):
    """prepare builds the report from the values it writes; a cached run reads it from the file: same report."""
    from xmask_cli.prepare import truncation_report

    g = nx.barabasi_albert_graph(200, 3, seed=2)
    g.add_edges_from((0, j) for j in range(100, 200))  # one hub above topk: something is dropped
    edges = np.array(list(g.edges())).T
    sets = ("structure.large.topk=16", "structure.rrwp.enabled=true", "structure.rrwp.steps=3")
    fresh = _prepare_large(tmp_path, edges, 200, *sets)
    cached = _prepare_large(tmp_path, edges, 200, *sets)
    assert not fresh.cached and cached.cached
    with StructureCache(fresh.path) as c:
        on_disk = truncation_report(c)
        assert on_disk["large_graphs"] == int(np.count_nonzero(c.file["graphs/large"][()])) == 1
        assert on_disk["rrwp"]["mean"] == json.loads(c.file["rrwp"].attrs["dropped_mass"])["mean"]
    assert max(on_disk["powers"]["max"]) > 0 and on_disk["rrwp"]["step"] == [0, 1, 2, 3]
    assert fresh.truncation == on_disk == cached.truncation


@pytest.mark.parametrize("normalization", ["sym", "no-symnorm"])
def test_recorded_dropped_mass_equals_brute_force_on_a_random_graph(tmp_path, normalization):
    g = nx.barabasi_albert_graph(300, 3, seed=1)
    g.add_edges_from((0, j) for j in range(150, 300))  # one hub above topk
    edges = np.array(list(g.edges())).T
    n, K = 300, 4
    s = _prepare_large(tmp_path, edges, n, f"structure.powers.k={K}", "structure.large.topk=16",
                       "structure.large.tau=1e-3", f"structure.powers.normalization={normalization}")
    rec, stored = _recorded(s.path)
    a = np.zeros((n, n))
    a[edges[0], edges[1]] = a[edges[1], edges[0]] = 1.0
    ai = a + np.eye(n)
    # Exact powers, densely, independently of the code under test.
    if normalization == "sym":
        a_hat = a_hat_of(edges, n)
        exact = [np.linalg.matrix_power(a_hat, k) for k in range(1, K + 1)]
    else:
        exact = []
        for k in range(1, K + 1):
            m = np.linalg.matrix_power(ai, k)
            d = m.sum(1) ** -0.5
            exact.append(d[:, None] * m * d[None, :])
    # Every real edge and self loop is in every stored power.
    for k in range(K):
        assert np.all(stored[k][ai != 0] > 0)
    np.testing.assert_allclose(stored[0], exact[0], rtol=1e-6)
    for k in range(K):
        share = 1.0 - stored[k].sum(1) / exact[k].sum(1)
        assert rec["mean"][k] == pytest.approx(share.mean(), rel=1e-4, abs=1e-6)
        assert rec["max"][k] == pytest.approx(share.max(), rel=1e-4, abs=1e-6)
    assert rec["max"][K - 1] > 0.05  # truncation bites (else the comparison would be vacuous)


# ------------------------------------------------------------ spectra of real disconnected graphs
import scipy.linalg  # noqa: E402

from xmask_cli.data.load import load_graphs  # noqa: E402
from xmask_cli.data.registry import get_dataset  # noqa: E402
from xmask_cli.prepare import prepare_dataset  # noqa: E402


def _dense_lap(edges: np.ndarray, n: int) -> np.ndarray:
    a = np.zeros((n, n))
    a[edges[0], edges[1]] = a[edges[1], edges[0]] = 1.0
    np.fill_diagonal(a, 0.0)
    deg = a.sum(1)
    d = np.where(deg > 0, 1.0 / np.sqrt(np.maximum(deg, 1e-300)), 0.0)
    return np.eye(n) - d[:, None] * a * d[None, :]


def _assert_lowest(lap: np.ndarray, vals: np.ndarray, vecs: np.ndarray, m: int, atol: float) -> None:
    """Stored = every zero pair + the m lowest non-zero ones (an eigenspace cut by the m-th left out),
    compared with dense eigh as projectors onto each eigenspace."""
    from threadpoolctl import threadpool_limits

    zeros = int((vals <= 1e-6).sum())
    # evx: MRRR (the default evr) returned zero vectors with 2e-4 residuals on Cora's 78-fold zero; and evx on
    # two OpenBLAS threads returned them with 5e-4 residuals (1e-15 on one thread): the reference runs on one.
    with threadpool_limits(1, user_api="blas"):
        w, v = scipy.linalg.eigh(lap, subset_by_index=[0, min(len(lap), zeros + m + 8) - 1], check_finite=False,
                                 driver="evx")
    # The reference itself must be exact before it judges the stored pairs.
    assert np.abs(lap @ v - v * w).max() < 1e-10 and np.abs(v.T @ v - np.eye(v.shape[1])).max() < 1e-10
    nz = w[w > 1e-6]
    cut = min(m, len(nz))
    while len(nz) > m and cut > 0 and nz[cut] - nz[cut - 1] <= 1e-6:
        cut -= 1
    assert (w <= 1e-6).sum() == zeros
    np.testing.assert_allclose(vals, np.concatenate([w[w <= 1e-6], nz[:cut]]), atol=1e-6)
    vecs = vecs.astype(np.float64)
    # Projectors compared on random probes R (P R = V (V^T R)): basis-free, and no n x n matrix.
    probe = np.random.default_rng(0).standard_normal((len(lap), 4))

    def proj(x: np.ndarray) -> np.ndarray:
        return x @ (x.T @ probe)

    hi = vals.max(initial=0.0) + 1e-6
    np.testing.assert_allclose(proj(vecs), proj(v[:, w <= hi]), atol=atol)  # the spanned space
    # Each non-zero eigenspace on its own (eigenvalues within 1e-6 of each other form one).
    starts = np.flatnonzero(np.diff(vals, prepend=-1.0) > 1e-6)
    for lo_i, hi_i in zip(starts, np.append(starts[1:], len(vals))):
        lo, hi = vals[lo_i], vals[hi_i - 1]
        if hi <= 1e-6:
            continue
        got, ref = vecs[:, lo_i:hi_i], v[:, (w >= lo - 1e-7) & (w <= hi + 1e-7)]
        assert got.shape == ref.shape
        np.testing.assert_allclose(proj(got), proj(ref), atol=atol)


def _node_spectrum(name: str, shared_data: Path, tmp_path: Path):
    """A node dataset's graph (edges, node count, networkx graph) and its cached spectrum."""
    cfg = resolve("node-level", [f"data.dataset={name}", "structure.spd.enabled=false", "structure.powers.k=1",
                                 "structure.partition.parts=0", "prepare.compute=all"])
    s = prepare_dataset(cfg, data_root=shared_data, cache_dir=tmp_path / "c", offline=True)
    graphs = load_graphs(get_dataset(name), data_root=shared_data, cache_dir=tmp_path / "c", offline=True)
    e, n = graphs.edge_index[0], int(graphs.num_nodes[0])
    g = nx.Graph(list(map(tuple, e.T.tolist())))
    g.add_nodes_from(range(n))
    with StructureCache(s.path) as c:
        vals, vecs = c.spectrum(0)
    return e, n, g, vals, vecs


def test_cora_spectrum_is_the_lowest_and_feeds_the_eigen_bias(tmp_path, shared_data):
    e, n, g, vals, vecs = _node_spectrum("cora", shared_data, tmp_path)
    # 78 components, none isolated: 78 zero pairs (ARPACK on the whole graph found 7), then 16 non-zero.
    assert nx.number_connected_components(g) == 78 == int((vals <= 1e-6).sum())
    assert int((vals > 1e-6).sum()) == 16
    _assert_lowest(_dense_lap(e, n), vals, vecs, 16, atol=2e-5)
    # The eigen bias Σ u u^T / λ over the non-zero pairs is there on the giant component.
    u, lam = vecs[:, vals > 1e-6].astype(np.float64), vals[vals > 1e-6]
    giant = np.array(sorted(max(nx.connected_components(g), key=len)))
    assert np.all(np.einsum("ik,k,ik->i", u[giant], 1 / lam, u[giant]) > 0)


def test_proteins_graphs_with_eight_components_store_every_zero(tmp_path, shared_data):
    # PROTEINS graphs 5 and 20 have 8 components and more than DENSE_MAX nodes (ARPACK stored 6 zeros of 8).
    graphs = load_graphs(get_dataset("PROTEINS"), data_root=shared_data, cache_dir=tmp_path / "c", offline=True)
    picked = [5, 20]
    edges = [graphs.edge_index[i] for i in picked]
    nn = np.asarray([graphs.num_nodes[i] for i in picked])
    cfg = resolve("graph-level", ["structure.spd.enabled=false", "structure.powers.k=1"]).structure
    s = prepare_graphs(dataset_key="proteins-two", level="graph", edges=edges, num_nodes=nn,
                       fingerprint=graphs_fingerprint(edges, nn), cfg=cfg, cache_dir=tmp_path / "c")
    with StructureCache(s.path) as c:
        for gi, (e, n) in enumerate(zip(edges, nn)):
            g = nx.Graph(list(map(tuple, e.T.tolist())))
            g.add_nodes_from(range(int(n)))
            comps = [k for k in nx.connected_components(g) if len(k) > 1]
            vals, vecs = c.spectrum(gi)
            assert n > 192 and len(comps) == 8 == int((vals <= 1e-6).sum())
            _assert_lowest(_dense_lap(e, int(n)), vals, vecs, cfg.spectrum.num_eigs, atol=2e-5)


def test_citeseer_spectrum_has_every_zero_and_sixteen_non_zero_pairs(tmp_path, shared_data):
    # 438 components, 48 of them isolated nodes (eigenvalue 1, never zero): 390 zero pairs.
    e, n, g, vals, vecs = _node_spectrum("citeseer", shared_data, tmp_path)
    g.remove_edges_from(nx.selfloop_edges(g))
    with_edges = sum(1 for k in nx.connected_components(g) if len(k) > 1)
    assert int((vals <= 1e-6).sum()) == with_edges and int((vals > 1e-6).sum()) == 16
    lap = nx.normalized_laplacian_matrix(g, nodelist=range(n)).astype(np.float64)  # equal to ours off isolated nodes
    x = vecs.astype(np.float64)
    np.testing.assert_allclose(lap @ x, x * vals[None, :], atol=2e-5)  # eigenpairs (float32 vectors)
    assert vals[with_edges] > 0 and np.abs(x[:, vals > 1e-6]).sum(0).min() > 0


# ------------------------------------------- the cache does not depend on the thread count
REPO = Path(__file__).resolve().parents[2]
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")


def _h5_contents(path: Path) -> tuple[dict, dict]:
    """Every dataset of a cache file (name -> array) and its root attributes but the creation time."""
    import h5py

    arrays: dict = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, obj: arrays.__setitem__(name, obj[()]) if isinstance(obj, h5py.Dataset) else None)
        attrs = {k: f.attrs[k] for k in f.attrs if k != "created"}
    return arrays, attrs


def test_cora_cache_is_bit_identical_at_one_and_two_threads(tmp_path):
    """`prepare cora` with every structure section (powers, SPD, spectrum with ARPACK on the giant component, METIS)
    in two processes, one with every thread variable at 1 and one at 2: the same bytes in every array."""
    import os
    import subprocess
    import sys

    files = []
    for threads in (1, 2):
        env = {**os.environ, "PYTHONPATH": str(REPO), "XMASK_OFFLINE": "1"}
        env.update({var: str(threads) for var in _THREAD_VARS})
        r = subprocess.run([sys.executable, "-m", "xmask_cli", "--format", "json", "prepare", "cora", "--set", "prepare.compute=all", "--cache-dir",
                            str(tmp_path / f"t{threads}")], env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        files += list((tmp_path / f"t{threads}" / "cora").glob("*.h5"))
    assert len(files) == 2 and files[0].name == files[1].name  # one key: threads are not a parameter
    (a, a_attrs), (b, b_attrs) = _h5_contents(files[0]), _h5_contents(files[1])
    assert sorted(a) == sorted(b) and {"spectrum/eigvecs", "spectrum/eigvals", "powers/values", "spd/dist", "nodes/part"} <= set(a)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), f"{name} differs between 1 and 2 threads"
    assert {k: str(v) for k, v in a_attrs.items()} == {k: str(v) for k, v in b_attrs.items()}


def test_the_fanout_cap_is_part_of_the_cache_key():
    """A file made under another cap (or before the cap existed: no ``fanout`` in its parameters) holds other
    values on hub graphs: it gets another key and never serves a request as a superset."""
    from xmask_cli.cache import cache_key
    from xmask_cli.prepare.subset import covers

    def params(*sets: str) -> dict:
        return structure_params(resolve("node-level", list(sets)).structure, "node")

    base, other = params(), params("structure.large.fanout=16")
    assert base["large"]["fanout"] == 128 and other["large"]["fanout"] == 16
    assert cache_key("fp", base) != cache_key("fp", other)
    old = json.loads(json.dumps(base))
    del old["large"]["fanout"]
    assert covers(base, base) and not covers(old, base) and not covers(other, base)
