"""Generated GraphQA tasks: every label against networkx, determinism, fixed splits, CLI; directed tasks
end to end through the loader and prepare (magnetic eigenpairs see direction, the symmetrised structure does not)."""
from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from xmask_cli.cache import StructureCache
from xmask_cli.cli import app
from xmask_cli.config_resolve import resolve
from xmask_cli.data.graphqa import DIRECTED, EDGE_CAP, PATH_CAP, TASKS, TRIANGLE_CAP, GraphQADataset, generate
from xmask_cli.data.load import graphs_fingerprint, load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.scoring.splits import graph_split
from xmask_cli.errors import UsageError
from xmask_cli.prepare import prepare_graphs

DIRECTED_TASKS = ("reachability", "directed_cycle_check")


def _nx(d, directed: bool = False) -> nx.Graph:
    g = nx.DiGraph() if directed else nx.Graph()
    g.add_nodes_from(range(int(d.num_nodes)))
    g.add_edges_from(d.edge_index.t().tolist())
    return g


def _expected(task: str, d, min_nodes: int = 5) -> int:
    g, (a, b) = _nx(d, directed=task in DIRECTED_TASKS), d.query.tolist()
    if task == "reachability":
        return int(nx.has_path(g, a, b))
    if task == "directed_cycle_check":
        return int(not nx.is_directed_acyclic_graph(g))
    if task == "node_count":
        return g.number_of_nodes() - min_nodes
    if task == "edge_count":
        return min(g.number_of_edges(), EDGE_CAP)
    if task == "node_degree":
        return g.degree[a]
    if task == "edge_existence":
        return int(g.has_edge(a, b))
    if task == "shortest_path":
        return min(nx.shortest_path_length(g, a, b), PATH_CAP) if nx.has_path(g, a, b) else 0
    if task == "connectivity":
        return int(nx.has_path(g, a, b))
    if task == "cycle_check":
        return int(len(nx.cycle_basis(g)) > 0)
    return min(sum(nx.triangles(g).values()) // 3, TRIANGLE_CAP)


@pytest.mark.parametrize("task", TASKS)
def test_labels_match_networkx(task):
    graphs = generate(task, num_graphs=60, seed=3)
    for d in graphs:
        assert int(d.y) == _expected(task, d), task
        assert not bool((d.edge_index[0] == d.edge_index[1]).any())  # no self loops
        # Query nodes are marked for the questions that have them, and only for those.
        a, b = d.query.tolist()
        marks = d.x[:, 1:].sum(0).tolist()
        if task in ("edge_existence", "shortest_path", "connectivity", "reachability"):
            assert d.x[a, 1] == 1 and d.x[b, 2] == 1 and marks == [1.0, 1.0]
        elif task == "node_degree":
            assert d.x[a, 1] == 1 and marks == [1.0, 0.0]
        else:
            assert marks == [0.0, 0.0]


def test_binary_pair_tasks_are_roughly_balanced():
    for task in ("edge_existence", "connectivity", "reachability", "directed_cycle_check"):
        y = torch.cat([d.y for d in generate(task, num_graphs=400, seed=0)]).float()
        assert 0.3 < float(y.mean()) < 0.7, task


def test_deterministic_and_seeded():
    a, b = generate("triangle_count", 30, seed=1), generate("triangle_count", 30, seed=1)
    c = generate("triangle_count", 30, seed=2)
    assert all(torch.equal(x.edge_index, y.edge_index) and torch.equal(x.y, y.y) for x, y in zip(a, b))
    assert any(x.num_nodes != y.num_nodes or not torch.equal(x.edge_index, y.edge_index) for x, y in zip(a, c))


def test_registry_split_and_errors():
    spec = get_dataset("GraphQA:cycle-check")
    assert (spec.name, spec.levels, spec.key) == ("graphqa:cycle_check", ("graph",), "graphqa-cycle_check")
    ds = GraphQADataset("cycle_check", num_graphs=50)
    s0, s1 = graph_split(spec.split, ds, seed=0), graph_split(spec.split, ds, seed=7)
    assert np.array_equal(s0.test, s1.test) and s0.sizes() == (40, 5, 5)  # fixed whatever the run seed
    with pytest.raises(UsageError, match="cycle_check"):
        get_dataset("graphqa:cycle_chek")
    with pytest.raises(ValueError):
        generate("nope")


def test_train_from_the_cli(tmp_path):
    r = CliRunner().invoke(app, ["--format", "json", "train", "--dataset", "graphqa:connectivity", "--set",
                                 "train.epochs=2", "--set", "model.hidden=16", "--set", "model.layers=1",
                                 "--device", "cpu", "--runs-dir", str(tmp_path / "runs"),
                                 "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["dataset"] == "graphqa:connectivity" and out["runs"][0]["split"]["test"] == 100
    assert (tmp_path / "runs" / "graphqa-connectivity-graph" / "0" / "summary.json").is_file()


def test_directed_set_is_the_directed_tasks():
    assert set(DIRECTED) == set(DIRECTED_TASKS) and set(DIRECTED) <= set(TASKS)
    assert GraphQADataset("reachability", num_graphs=5).directed
    assert not GraphQADataset("connectivity", num_graphs=5).directed


@pytest.mark.parametrize("task", TASKS)
def test_edges_stored_once_per_direction(task):
    for d in generate(task, num_graphs=60, seed=4):
        pairs = [tuple(e) for e in d.edge_index.t().tolist()]
        assert len(set(pairs)) == len(pairs)  # no duplicate column
        both = sum((v, u) in set(pairs) for u, v in pairs)
        if task in DIRECTED_TASKS:
            assert both == 0  # u -> v only: no reverse edge was added
        else:
            assert both == len(pairs)  # undirected: both directions


def test_reachability_no_pairs_are_mostly_reversed():
    """Most "no" queries have b -> a: only the direction of the edges tells them from "yes" ones."""
    graphs = generate("reachability", num_graphs=400, seed=1)
    no = [d for d in graphs if int(d.y) == 0]
    reversed_ = sum(nx.has_path(_nx(d, directed=True), *d.query.tolist()[::-1]) for d in no)
    assert reversed_ / len(no) > 0.5
    for d in graphs:  # the generator draws DAGs
        assert nx.is_directed_acyclic_graph(_nx(d, directed=True))


def test_cyclic_graphs_are_one_flip_from_a_dag():
    """Every cycle passes through the one flipped edge, so the undirected view of a "yes" graph is a DAG's."""
    graphs = generate("directed_cycle_check", num_graphs=200, seed=2)
    for d in graphs:
        g = _nx(d, directed=True)
        if int(d.y):
            # Flipping the cycle's reversed edge back must give a DAG with the same undirected graph.
            cycle = nx.find_cycle(g)
            assert any(nx.is_directed_acyclic_graph(nx.DiGraph([(v, u) if (u, v) == e[:2] else (u, v)
                                                                 for u, v in g.edges]))
                       for e in cycle)


@pytest.mark.parametrize("task", DIRECTED_TASKS)
def test_directed_deterministic_and_seeded(task):
    a, b, c = generate(task, 30, seed=1), generate(task, 30, seed=1), generate(task, 30, seed=2)
    assert all(torch.equal(x.edge_index, y.edge_index) and torch.equal(x.y, y.y) and torch.equal(x.query, y.query)
               for x, y in zip(a, b))
    assert any(x.num_nodes != y.num_nodes or not torch.equal(x.edge_index, y.edge_index) for x, y in zip(a, c))


def test_loader_keeps_directed_edges(tmp_path):
    """load_graphs hands prepare the edges exactly as generated: nothing symmetrises them on the way."""
    gs = load_graphs(get_dataset("graphqa:reachability"), data_root=None, cache_dir=tmp_path)
    ref = generate("reachability")  # the loader's defaults: 1000 graphs, seed 0
    assert gs.num_graphs == len(ref)
    for e, n, d in zip(gs.edge_index, gs.num_nodes, ref):
        assert n == d.num_nodes and np.array_equal(e, d.edge_index.numpy())


def _magnetic_laplacian(edge_index: np.ndarray, n: int, q: float) -> np.ndarray:
    """Dense normalized magnetic Laplacian, straight from its definition."""
    a = np.zeros((n, n))
    a[edge_index[0], edge_index[1]] = 1.0
    a_s = (a + a.T) / 2
    deg = a_s.sum(1)
    d = np.where(deg > 0, 1 / np.sqrt(np.where(deg > 0, deg, 1)), 0.0)
    return np.eye(n) - (d[:, None] * a_s * d[None, :]) * np.exp(1j * 2 * np.pi * q * (a - a.T))


def test_magnetic_eigenpairs_see_direction_and_nothing_else_does(tmp_path):
    cfg = resolve(None, ["structure.magnetic.enabled=true"]).structure
    graphs = [d for d in generate("reachability", num_graphs=6, seed=0, min_nodes=4, max_nodes=7)
              if d.edge_index.shape[1] > 0]
    assert len(graphs) >= 3
    fwd = [d.edge_index.numpy() for d in graphs]
    rev = [e[::-1].copy() for e in fwd]
    nn = np.asarray([d.num_nodes for d in graphs], dtype=np.int64)
    caches = {}
    for name, edges in (("fwd", fwd), ("rev", rev)):
        s = prepare_graphs(dataset_key=f"graphqa-{name}", level="graph", edges=edges, num_nodes=nn,
                           fingerprint=graphs_fingerprint(edges, nn), cfg=cfg, cache_dir=tmp_path)
        caches[name] = StructureCache(s.path)
    assert caches["fwd"].fingerprint != caches["rev"].fingerprint
    for g, (e, n) in enumerate(zip(fwd, nn)):
        f, r = caches["fwd"], caches["rev"]
        # Symmetrised structure: identical for a graph and its reverse.
        np.testing.assert_array_equal(f.dense_powers(g), r.dense_powers(g))
        np.testing.assert_array_equal(f.dense_spd(g), r.dense_spd(g))
        np.testing.assert_allclose(f.spectrum(g)[0], r.spectrum(g)[0], atol=1e-6)
        # Magnetic: the eigenpairs reproduce each graph's own (independently built) Laplacian...
        recon = {}
        for name, c, edges in (("fwd", f, e), ("rev", r, e[::-1])):
            vals, vecs = c.magnetic(g)
            assert vecs.shape == (n, n)  # tiny graphs keep every eigenpair
            recon[name] = (vecs * vals) @ vecs.conj().T
            np.testing.assert_allclose(recon[name], _magnetic_laplacian(edges, int(n), cfg.magnetic.q), atol=1e-4)
        # ...so they differ between a graph and its reverse (L_rev = conj(L): same eigenvalues, conjugate vectors).
        np.testing.assert_allclose(f.magnetic(g)[0], r.magnetic(g)[0], atol=1e-5)
        assert np.abs(recon["fwd"] - recon["rev"]).max() > 0.1
        assert not np.allclose(f.magnetic(g)[1], r.magnetic(g)[1], atol=1e-3)
    for c in caches.values():
        c.close()
