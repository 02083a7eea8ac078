"""Planning blocks of graphs and the parameters that key a cache."""
from __future__ import annotations

import numpy as np
import pytest

from xmask_cli.config_resolve import resolve
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


# --------------------------------------------- worker processes die with prepare
REPO = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``, from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def dd_staged(tmp_path_factory, shared_data) -> Path:
    """DD's PyG files processed once: each test's prepare then starts its workers within seconds."""
    from xmask_cli.data.load import load_graphs
    from xmask_cli.data.registry import get_dataset

    cache = tmp_path_factory.mktemp("dd")
    load_graphs(get_dataset("DD"), data_root=shared_data, cache_dir=cache, offline=True)
    return cache / "_pyg"


def _start_prepare(tmp_path: Path, shared_data: Path, staged: Path):
    """`xmask -q prepare DD --workers 2` in its own process group, once its two side processes run
    (the pool worker and multiprocessing's resource tracker)."""
    import os
    import shutil
    import subprocess
    import sys
    import time

    shutil.copytree(staged, tmp_path / "c" / "_pyg", symlinks=True)

    # PYTHONFAULTHANDLER: should the process die of a signal, its Python stacks are in the failure message.
    env = {**os.environ, "PYTHONPATH": str(REPO), "XMASK_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    # Ctrl-C's default disposition, as at a terminal: a shell's background job (CI runners, nohup)
    # starts with SIGINT ignored, which a child inherits and Python then never turns into KeyboardInterrupt.
    code = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); from xmask_cli.cli import main; main()"
    proc = subprocess.Popen([sys.executable, "-c", code, "-q", "prepare", "DD", "--workers", "2", "--data-root",
                             str(shared_data), "--cache-dir", str(tmp_path / "c")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    deadline = time.monotonic() + 90
    kids: list[int] = []
    while time.monotonic() < deadline and proc.poll() is None:
        kids = _children(proc.pid)
        if len(kids) >= 2:
            break
        time.sleep(0.2)
    if len(kids) < 2:
        proc.kill()
        pytest.fail(f"prepare never started its worker processes: {proc.communicate(timeout=30)}")
    time.sleep(0.5)  # let the worker reach its task
    return proc, kids


def _gone_within(pids: list[int], seconds: float) -> list[int]:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


def test_kill_9_of_prepare_takes_its_workers_along(tmp_path, shared_data, dd_staged):
    import os
    import signal

    proc, kids = _start_prepare(tmp_path, shared_data, dd_staged)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        left = _gone_within(kids, 20)
        assert not left, f"still running after the parent's kill -9: {left}"
    finally:
        for p in kids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def test_ctrl_c_of_prepare_is_one_line_exit_130_and_no_worker_left(tmp_path, shared_data, dd_staged):
    import os
    import signal

    proc, kids = _start_prepare(tmp_path, shared_data, dd_staged)
    try:
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        out, err = proc.communicate(timeout=60)
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert proc.returncode == 130, err
        assert len(lines) == 1 and lines[0].startswith("error: interrupted") and "prepare" in lines[0], err
        assert "Traceback" not in err + out
        assert not _gone_within(kids, 20)
        assert not list((tmp_path / "c").rglob("*.h5"))  # nothing under a real name
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in kids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def _nap(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


def test_stopping_the_pool_leaves_no_worker_and_no_pool_thread_behind():
    """After an interrupt the pool is wound down before the error is reported: a pool thread left
    running races interpreter exit (concurrent.futures' atexit hook then wrote a 15-line trace after
    the one error line under load)."""
    import multiprocessing as mp
    import threading
    from concurrent.futures import ProcessPoolExecutor

    from xmask_cli.prepare import _stop_workers

    before = set(threading.enumerate())
    pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))
    fut = pool.submit(_nap, 60.0)
    procs = []
    for _ in range(600):  # wait until the worker runs the task
        procs = list(pool._processes.values())
        if procs and fut.running():
            break
        threading.Event().wait(0.05)
    _stop_workers(pool)
    assert all(not p.is_alive() for p in procs)
    assert set(threading.enumerate()) - before == set()  # the manager thread is gone too


@pytest.fixture
def sigint_default():
    """Python's own Ctrl-C handler for the test, whatever the runner started with (a shell's background
    job starts with SIGINT ignored)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_is_deferred_to_a_safe_point_and_a_second_one_raises_at_once(sigint_default):
    """Inside ``deferred_interrupt`` a Ctrl-C only sets a flag (so it never lands inside numba, LLVM or
    HDF5 code); ``check()`` raises it; a second Ctrl-C raises at once; the default handler comes back."""
    import os
    import signal

    from xmask_cli.prepare.blocks import deferred_interrupt

    ran_on = False
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt() as check:
            check()  # nothing pending: no-op
            os.kill(os.getpid(), signal.SIGINT)
            ran_on = sum(range(1000)) > 0  # Python ran its handler by now, and went on
            check()
    assert ran_on
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):  # the second one raises here, not at a check
                pass
            pytest.fail("the second Ctrl-C did not raise")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_ctrl_c_after_the_last_safe_point_is_raised_on_the_way_out(sigint_default):
    """A Ctrl-C that lands after the block's last ``check()`` must not be dropped when the block ends."""
    import os
    import signal

    from xmask_cli.prepare.blocks import deferred_interrupt

    after = False
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt() as check:
            check()
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # Python runs the handler: a flag, no exception here
        after = True
    assert not after
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with deferred_interrupt() as check:  # and a block without one ends quietly
        check()


def test_a_job_started_with_ctrl_c_ignored_keeps_ignoring_it(sigint_default):
    import os
    import signal

    from xmask_cli.prepare.blocks import deferred_interrupt

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with deferred_interrupt() as check:
            os.kill(os.getpid(), signal.SIGINT)
            check()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_during_a_block_lets_it_finish_then_stops_before_the_next(tmp_path, monkeypatch, workers, sigint_default):
    """The interrupt arrives inside the main process's block computation (where numba runs): that
    block completes, no further block starts, KeyboardInterrupt reaches the caller, nothing is cached."""
    import os
    import signal

    from xmask_cli.prepare import blocks

    calls: list[tuple[int, bool]] = []
    real = blocks.compute_block

    def compute_block(edges, *args):
        first = not calls
        calls.append((len(edges), False))
        if first:
            os.kill(os.getpid(), signal.SIGINT)
        out = real(edges, *args)
        calls[-1] = (calls[-1][0], True)  # reached only if the interrupt did not land inside
        return out

    # This process's computation only: a side worker imports the module afresh.
    monkeypatch.setattr(blocks, "compute_block", compute_block)
    real_plan = blocks.plan_blocks
    monkeypatch.setattr(blocks, "plan_blocks", lambda nn, large_min: real_plan(nn, large_min, block_nodes=60))  # 3 blocks
    rng = np.random.default_rng(0)
    edges = [np.stack([rng.integers(0, 30, 60), rng.integers(0, 30, 60)]) for _ in range(6)]
    nn = np.full(6, 30)
    cfg = resolve("graph-level", []).structure
    with pytest.raises(KeyboardInterrupt):
        prepare_graphs(dataset_key="toy", level="graph", edges=edges, num_nodes=nn, cfg=cfg, workers=workers,
                       fingerprint=graphs_fingerprint(edges, nn), cache_dir=tmp_path / "c")
    assert calls == [(calls[0][0], True)]  # one block (in this process), run to its end; none after it
    assert not list((tmp_path / "c").rglob("*.h5")) and not list((tmp_path / "c").rglob("*.tmp-*"))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# ------------------------------------------- the cache does not depend on the thread count
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
