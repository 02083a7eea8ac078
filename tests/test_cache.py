"""The HDF5 cache: round trip, atomic writes, verify, ls, clear."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import networkx as nx
import numpy as np
import pytest

from tests.model.graphs import a_hat_of
from xmask_cli import cache as K
from xmask_cli.config import StructureConfig, resolve
from xmask_cli.data.load import graphs_fingerprint
from xmask_cli.errors import CacheError
from xmask_cli.prepare import prepare_graphs


def random_graphs(seed: int = 0, count: int = 12) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    edges, nodes = [], []
    for i in range(count):
        n = int(rng.integers(1, 30))
        g = nx.gnp_random_graph(n, 0.15, seed=int(rng.integers(1 << 30)))
        e = np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2).T
        if i == 3 and n > 2:  # a self loop and a duplicate edge must not matter
            e = np.concatenate([e, [[0, 0], [1, 1]]], axis=1) if e.size else e
        edges.append(e)
        nodes.append(n)
    return edges, np.array(nodes)


def _prepare(tmp_path: Path, edges, nodes, cfg: StructureConfig | None = None, level: str = "graph", **kw):
    return prepare_graphs(dataset_key="toy", level=level, edges=edges, num_nodes=nodes,
                          fingerprint=graphs_fingerprint(edges, nodes), cfg=cfg or resolve("graph-level").structure,
                          cache_dir=tmp_path / "cache", **kw)



def test_round_trip_equals_independent_computation(tmp_path):
    edges, nodes = random_graphs()
    s = _prepare(tmp_path, edges, nodes)
    with K.StructureCache(s.path) as c:
        assert c.num_graphs == len(nodes)
        for g, (e, n) in enumerate(zip(edges, nodes)):
            ahat = a_hat_of(e, int(n))
            dense = c.dense_powers(g)
            for k in range(4):
                np.testing.assert_allclose(dense[k], np.linalg.matrix_power(ahat, k + 1), rtol=1e-5, atol=1e-7)
            G = nx.Graph()
            G.add_nodes_from(range(n))
            G.add_edges_from((int(u), int(v)) for u, v in e.T if u != v)
            spd = c.dense_spd(g)
            for i in range(n):
                lengths = nx.single_source_shortest_path_length(G, i)
                for j in range(n):
                    if j not in lengths:
                        assert spd[i, j] == -2
                    elif lengths[j] <= 8:
                        assert spd[i, j] == lengths[j]
                    else:
                        assert spd[i, j] == -1
            lam, vec = c.spectrum(g)
            a = nx.to_numpy_array(G, nodelist=range(n))
            deg = a.sum(1)
            inv = np.where(deg > 0, 1 / np.sqrt(np.maximum(deg, 1e-300)), 0)
            lap = np.eye(n) - inv[:, None] * a * inv[None, :]  # isolated node: L_ii = 1
            np.testing.assert_allclose(lam, np.linalg.eigvalsh(lap)[: lam.shape[0]], atol=1e-6)
            assert lam.shape[0] == n  # all these graphs are below full_max_nodes
            np.testing.assert_allclose(vec @ np.diag(lam) @ vec.T, lap, atol=1e-5)


def test_memory_load_matches_lazy_reads(tmp_path):
    edges, nodes = random_graphs(1, 5)
    s = _prepare(tmp_path, edges, nodes)
    lazy = K.StructureCache(s.path)
    mem = K.StructureCache(s.path).load_in_memory()
    for g in range(5):
        for a, b in zip(lazy.powers(g), mem.powers(g)):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(lazy.dense_spd(g), mem.dense_spd(g))


def test_public_reads_match_the_stored_pairs(tmp_path):
    edges, nodes = random_graphs(2, 6)
    s = _prepare(tmp_path, edges, nodes)
    with h5py.File(s.path, "r") as f:
        stored_nodes = f["graphs/num_nodes"][()]
    for c in (K.StructureCache(s.path), K.StructureCache(s.path).load_in_memory()):
        np.testing.assert_array_equal(c.read_array("graphs/num_nodes"), stored_nodes)
        np.testing.assert_array_equal(c.read_array("graphs/num_nodes", slice(1, 3)), stored_nodes[1:3])
        for g in range(6):
            # Independent count: the nonzeros of the dense powers' union support.
            assert c.num_pairs("powers", g) == int(np.count_nonzero(c.dense_powers(g).any(axis=0)))
        with pytest.raises(CacheError, match="no 'nope/x'"):
            c.read_array("nope/x")


def test_node_slice_and_spd_reads_match_the_file(tmp_path):
    """node_slice and read_array on the SPD group (what explain reads): graph g's rows, straight from h5py."""
    edges, nodes = random_graphs(2, 6)
    s = _prepare(tmp_path, edges, nodes)
    starts = np.concatenate([[0], np.cumsum(nodes)])
    with K.StructureCache(s.path) as c, h5py.File(s.path, "r") as f:
        mem = K.StructureCache(s.path).load_in_memory()
        for g in range(len(nodes)):
            assert c.node_slice(g) == slice(int(starts[g]), int(starts[g + 1])) == mem.node_slice(g)
        np.testing.assert_array_equal(c.read_array("spd/dist"), f["spd/dist"][()])
        np.testing.assert_array_equal(c.read_array("spd/col", slice(3, 9)), f["spd/col"][3:9])
        np.testing.assert_array_equal(mem.read_array("graphs/num_nodes"), nodes)
        with pytest.raises(CacheError, match="has no 'magnetic/eigvals'"):
            c.read_array("magnetic/eigvals")


def test_same_key_does_no_work_and_force_recomputes(tmp_path):
    edges, nodes = random_graphs(2, 4)
    first = _prepare(tmp_path, edges, nodes)
    mtime = os.stat(first.path).st_mtime_ns
    second = _prepare(tmp_path, edges, nodes)
    assert second.cached and second.path == first.path and os.stat(first.path).st_mtime_ns == mtime
    third = _prepare(tmp_path, edges, nodes, force=True)
    assert not third.cached and third.path == first.path
    other = _prepare(tmp_path, edges, nodes, cfg=resolve("graph-level", ["structure.powers.k=2"]).structure)
    assert other.path != first.path
    # eps is read by the model, not by prepare: it must not change the key.
    same = _prepare(tmp_path, edges, nodes, cfg=resolve("graph-level", ["structure.powers.eps=1e-10"]).structure)
    assert same.cached and same.path == first.path


def test_workers_give_identical_files(tmp_path):
    edges, nodes = random_graphs(3, 40)
    one = _prepare(tmp_path / "a", edges, nodes, workers=1)
    two = _prepare(tmp_path / "b", edges, nodes, workers=2)
    with h5py.File(one.path) as f, h5py.File(two.path) as h:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in names:
            np.testing.assert_array_equal(f[n][()], h[n][()], err_msg=n)


def test_large_graph_is_truncated_and_records_the_rule(tmp_path):
    g = nx.barabasi_albert_graph(300, 4, seed=0)
    e = np.array(list(g.edges())).T
    cfg = resolve("node-level", ["structure.large.min_nodes=100", "structure.large.topk=10",
                                 "structure.large.spd_radius=2", "structure.partition.parts=4"]).structure
    s = _prepare(tmp_path, [e], np.array([300]), cfg=cfg, level="node")
    with K.StructureCache(s.path) as c:
        assert bool(c.file["graphs/large"][0])
        rule = c.file["powers"].attrs["truncation"]
        assert '"topk": 10' in rule
        row, col, vals = c.powers(0)
        deg = np.array([g.degree(i) for i in range(300)])
        for k in range(vals.shape[1]):
            per_row = np.bincount(row[vals[:, k] != 0], minlength=300)
            # At most topk per row, except that every real edge and the self loop are always kept.
            assert np.all(per_row <= np.maximum(10, deg + 1))
            assert np.any(per_row > 10) and np.any(per_row < np.bincount(row, minlength=300))
        _, _, dist = c.spd(0)
        assert dist.max() == 2
        part = c.partition(0)
        assert part.shape == (300,) and set(np.unique(part)) == {0, 1, 2, 3}


def test_kill_during_write_leaves_nothing_under_the_real_name(tmp_path):
    script = textwrap.dedent(f"""
        import sys, time
        import numpy as np
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from tests.test_cache import random_graphs, _prepare
        from pathlib import Path
        edges, nodes = random_graphs(4, 2000)
        def tick(done, total):
            print("writing", flush=True)
            time.sleep(60)
        _prepare(Path({str(tmp_path)!r}), edges, nodes, progress=tick)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    folder = tmp_path / "cache" / "toy"
    assert not list(folder.glob("*.h5")), "a half-written file is visible under the real name"
    assert list(folder.glob(".*.h5.tmp-*")), "the temporary file should be the only leftover"
    assert K.cache_files(tmp_path / "cache") == []
    removed = K.clear(tmp_path / "cache")
    assert any(".tmp-" in p.name for p in removed)


@pytest.fixture
def good_file(tmp_path) -> Path:
    edges, nodes = random_graphs(5, 20)
    return Path(_prepare(tmp_path, edges, nodes).path)


def test_verify_passes_a_sound_file(good_file):
    assert K.verify(good_file) == []


def test_truncated_file_is_reported_and_prepare_rebuilds(good_file, tmp_path):
    size = good_file.stat().st_size
    with open(good_file, "r+b") as fh:
        fh.truncate(size // 2)
    problems = K.verify(good_file)
    assert problems and "cannot open" in problems[0]
    with pytest.raises(CacheError):
        K.StructureCache(good_file).file
    edges, nodes = random_graphs(5, 20)
    logs: list[str] = []
    again = _prepare(tmp_path, edges, nodes, log=logs.append)
    assert not again.cached and Path(again.path) == good_file
    assert logs and "unusable" in logs[0]
    assert K.verify(good_file) == []


def test_corrupted_chunk_is_reported(good_file):
    with h5py.File(good_file, "r") as f:
        info = f["spd/dist"].id.get_chunk_info(0)
    with open(good_file, "r+b") as fh:
        fh.seek(info.byte_offset + info.size // 2)
        fh.write(b"\xff\x00\xff\x00")
    problems = K.verify(good_file)
    assert any("spd/dist" in p for p in problems)


def test_older_format_is_reported_and_rebuilt(good_file, tmp_path):
    with h5py.File(good_file, "r+") as f:
        f.attrs["format_version"] = K.FORMAT_VERSION - 1
    assert any("format version" in p for p in K.verify(good_file))
    with pytest.raises(CacheError, match="format version"):
        K.StructureCache(good_file).file
    edges, nodes = random_graphs(5, 20)
    assert not _prepare(tmp_path, edges, nodes).cached
    assert K.verify(good_file) == []


def test_renamed_file_fails_the_key_check(good_file):
    other = good_file.with_name("0" * 20 + ".h5")
    shutil.copy(good_file, other)
    assert any("does not match" in p for p in K.verify(other))


def test_ls_and_clear(tmp_path):
    edges, nodes = random_graphs(6, 3)
    s = _prepare(tmp_path, edges, nodes)
    rows = [K.info(p) for p in K.cache_files(tmp_path / "cache")]
    assert [r.key for r in rows] == [s.key] and rows[0].num_graphs == 3 and rows[0].size_bytes > 0
    assert rows[0].params["powers"]["k"] == 4
    assert K.cache_files(tmp_path / "cache", "other") == []
    removed = K.clear(tmp_path / "cache", "toy")
    assert [p.name for p in removed] == [Path(s.path).name]
    assert K.cache_files(tmp_path / "cache") == []


def test_optional_structure_round_trip(tmp_path):
    """RRWP, the magnetic Laplacian and no-symnorm powers, through prepare and the reader."""
    edges, nodes = random_graphs(7, 6)
    cfg = resolve("graph-level", ["structure.rrwp.enabled=true", "structure.rrwp.steps=5",
                                  "structure.magnetic.enabled=true", "structure.powers.normalization=no-symnorm",
                                  "structure.powers.k=3"]).structure
    s = _prepare(tmp_path, edges, nodes, cfg=cfg)
    with K.StructureCache(s.path) as c:
        for g, (e, n) in enumerate(zip(edges, nodes)):
            n = int(n)
            a = np.zeros((n, n))
            for u, v in e.T:
                if u != v:
                    a[u, v] = a[v, u] = 1
            b = a + np.eye(n)
            row, col, vals = c.powers(g)
            dense = np.zeros((3, n, n))
            dense[:, row, col] = vals.T
            for k in range(3):
                m = np.linalg.matrix_power(b, k + 1)
                d = m.sum(1)
                np.testing.assert_allclose(dense[k], m / np.sqrt(np.outer(d, d)), rtol=1e-5, atol=1e-7)
            deg = a.sum(1)
            p = np.where(deg[:, None] > 0, a / np.maximum(deg[:, None], 1), 0)
            row, col, vals = c.rrwp(g)
            dense = np.zeros((6, n, n))
            dense[:, row, col] = vals.T
            for k in range(6):
                np.testing.assert_allclose(dense[k], np.linalg.matrix_power(p, k), rtol=1e-5, atol=1e-7)
            lam, vec = c.magnetic(g)
            assert np.iscomplexobj(vec)
            # The edge lists name each edge once (u -> v): the magnetic Laplacian sees that direction.
            ad = np.zeros((n, n))
            for u, v in e.T:
                if u != v:
                    ad[u, v] = 1
            a_s = (ad + ad.T) / 2
            ds = a_s.sum(1)
            inv = np.where(ds > 0, 1 / np.sqrt(np.maximum(ds, 1e-300)), 0)
            lap = np.eye(n) - inv[:, None] * a_s * inv[None, :] * np.exp(1j * 2 * np.pi * 0.25 * (ad - ad.T))
            np.testing.assert_allclose(lam, np.linalg.eigvalsh(lap), atol=1e-6)
            np.testing.assert_allclose((vec * lam) @ vec.conj().T, lap, atol=1e-5)


# ------------------------------------------------------------ clear safety (issue 14, item 1)
def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_clear_deletes_only_files_it_can_prove_are_its_own(tmp_path):
    edges, nodes = random_graphs(6, 3)
    own = Path(_prepare(tmp_path, edges, nodes).path)
    folder = own.parent
    user_h5 = folder / "userdata.h5"
    with h5py.File(user_h5, "w") as f:
        f["x"] = np.arange(3)
    key_named = folder / "0123456789abcdef0123.h5"  # named like a key, but records no key / format
    with h5py.File(key_named, "w") as f:
        f.attrs["key"] = "something else"
    foreign_key = folder / "aaaaaaaaaaaaaaaaaaaa.h5"  # an xmask file of another folder, renamed
    shutil.copy(own, foreign_key)
    notes = folder / "notes.txt"
    notes.write_text("mine")
    stale = folder / f".{own.name}.tmp-{_dead_pid()}"
    stale.write_bytes(b"half")
    live = folder / f".{own.name}.tmp-{os.getpid()}"  # a writer still running: keep
    live.write_bytes(b"busy")
    kept: list[Path] = []
    removed = K.clear(tmp_path / "cache", kept=kept)
    assert sorted(removed) == sorted([own, stale])
    for p in (user_h5, key_named, foreign_key, notes, live):
        assert p.exists() and p in kept, p
    assert not own.exists() and not stale.exists()


def test_clear_never_touches_a_folder_that_is_not_a_cache(tmp_path):
    user = tmp_path / "home"
    (user / "project").mkdir(parents=True)
    (user / "empty").mkdir()
    with h5py.File(user / "project" / "results.h5", "w") as f:
        f["y"] = np.ones(2)
    assert K.clear(user) == []
    assert (user / "project" / "results.h5").is_file() and (user / "empty").is_dir()


@pytest.mark.parametrize("arg", ["..", "../other", "/abs/path", "toy/../..", "_pyg"])
def test_clear_refuses_a_path_outside_the_cache_dir(tmp_path, arg):
    from xmask_cli.errors import UsageError

    edges, nodes = random_graphs(6, 3)
    own = Path(_prepare(tmp_path, edges, nodes).path)
    with pytest.raises(UsageError):
        K.clear(tmp_path / "cache", arg)
    assert own.is_file()
    # A path that is one of the cache's dataset folders is fine.
    assert K.clear(tmp_path / "cache", str(tmp_path / "cache" / "toy")) == [own]
