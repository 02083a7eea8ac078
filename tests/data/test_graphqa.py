"""Generated GraphQA tasks: every label against networkx, determinism, fixed splits, CLI."""
from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from xmask_cli.cli import app
from xmask_cli.data.graphqa import EDGE_CAP, PATH_CAP, TASKS, TRIANGLE_CAP, GraphQADataset, generate
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.splits import graph_split
from xmask_cli.errors import UsageError


def _nx(d) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(int(d.num_nodes)))
    g.add_edges_from(d.edge_index.t().tolist())
    return g


def _expected(task: str, d, min_nodes: int = 5) -> int:
    g, (a, b) = _nx(d), d.query.tolist()
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
        if task in ("edge_existence", "shortest_path", "connectivity"):
            assert d.x[a, 1] == 1 and d.x[b, 2] == 1 and marks == [1.0, 1.0]
        elif task == "node_degree":
            assert d.x[a, 1] == 1 and marks == [1.0, 0.0]
        else:
            assert marks == [0.0, 0.0]


def test_binary_pair_tasks_are_roughly_balanced():
    for task in ("edge_existence", "connectivity"):
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
