"""explain.graph_view: the drawn attention is the recorded map's query row, the drawn edges and hop colours are
the dataset's graph (networkx), the layout is deterministic, and the CLI writes the figure."""
from __future__ import annotations

from pathlib import Path

import h5py
import networkx as nx
import numpy as np
import pytest

from xmask_cli.config_resolve import resolve
from xmask_cli.errors import UsageError
from xmask_cli.explain import ExplainRequest, explain_run
from xmask_cli.explain import run as run_module
from xmask_cli.explain.graph_view import graph_layout
from xmask_cli.structure.spd import BEYOND


def _captured(monkeypatch) -> list:
    """Every GraphView explain_run hands to the figure, kept as drawn."""
    seen = []
    real = run_module.plot_graph_view

    def spy(view, labels, title, d_max):
        seen.append((view, d_max))
        return real(view, labels, title, d_max)

    monkeypatch.setattr(run_module, "plot_graph_view", spy)
    return seen


def _mutag_graph(mutag: dict, g: int) -> nx.Graph:
    from xmask_cli.engine.runs.experiment import Experiment

    exp = Experiment.load(resolve("graph-level", ["model.hidden=16", "model.layers=2", "model.heads=2"]),
                          cache_dir=mutag["root"] / "cache")
    data = exp.graphs.dataset[g]
    out = nx.Graph()
    out.add_nodes_from(range(int(data.num_nodes)))
    out.add_edges_from(data.edge_index.t().tolist())
    return out


def test_graph_view_draws_the_recorded_row_on_the_datasets_graph(mutag, monkeypatch, tmp_path):
    seen = _captured(monkeypatch)
    result = explain_run(mutag["run"], ExplainRequest(graphs=[5], view="graph", query=3, layer=0), out_dir=tmp_path / "g",
                         cache_dir=mutag["root"] / "cache")
    (view, d_max), = seen
    assert result["files"]["figures"] == {}  # --view graph: no matrix grid
    png = result["files"]["graph_figures"]["graph_5"]
    assert open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert result["targets"][0]["graph_view"] == {"query": 3, "layer": 0, "figure": png}
    g = _mutag_graph(mutag, 5)
    ids = view.node_ids
    assert ids[view.query] == 3 and len(ids) == g.number_of_nodes()
    with h5py.File(result["files"]["maps"]) as f:
        np.testing.assert_array_equal(f["graph_5/node_ids"][()], ids)
        for h in range(view.weights.shape[0]):
            row = f[f"graph_5/layer_0/head_{h}/attention"][()][view.query]
            np.testing.assert_array_equal(view.weights[h], row.astype(np.float64))
        np.testing.assert_array_equal(f["graph_5/graph/hops"][()], view.hops)
        assert f["graph_5/graph"].attrs["query"] == 3
    # Edges: the dataset's own graph among the drawn nodes; hops: networkx's shortest paths from the query.
    drawn = {frozenset((int(ids[u]), int(ids[v]))) for u, v in view.edges.T}
    assert drawn == {frozenset(e) for e in g.edges() if e[0] != e[1]}
    sp = nx.single_source_shortest_path_length(g, 3)
    want = [sp[int(i)] if sp.get(int(i), d_max) < d_max else BEYOND for i in ids]
    np.testing.assert_array_equal(view.hops, want)
    # The layout is a function of the drawn graph only.
    np.testing.assert_array_equal(graph_layout(view), graph_layout(view))
    assert np.isfinite(graph_layout(view)).all()


def test_default_figure_set_has_both_views_and_the_default_query_is_node_0(mutag):
    result = mutag["result"]  # explain_run with no --view: all figures
    assert set(result["files"]["figures"]) == set(result["files"]["graph_figures"]) == {"graph_0", "graph_5"}
    for t in result["targets"]:
        assert t["graph_view"]["query"] == 0 and t["graph_view"]["layer"] == 1  # the last of two layers


def test_a_cropped_graph_is_centred_on_the_query(mutag, monkeypatch, tmp_path):
    seen = _captured(monkeypatch)
    result = explain_run(mutag["run"], ExplainRequest(graphs=[0], view="graph", query=9, max_nodes=6), out_dir=tmp_path / "c",
                         cache_dir=mutag["root"] / "cache")
    (view, _), = seen
    g = _mutag_graph(mutag, 0)
    sp = nx.single_source_shortest_path_length(g, 9)
    ids = [int(i) for i in result["targets"][0]["node_ids"]]
    assert ids[0] == 9 and len(ids) == 6
    assert max(sp[i] for i in ids) <= min(sp[i] for i in g.nodes if i not in ids)  # the 6 closest to node 9
    np.testing.assert_array_equal(view.hops, [sp[i] for i in ids])


def test_refusals(mutag, tmp_path):
    kw = {"out_dir": tmp_path / "bad", "cache_dir": mutag["root"] / "cache"}
    with pytest.raises(UsageError, match="--layer 2"):
        explain_run(mutag["run"], ExplainRequest(graphs=[0], layer=2), **kw)
    with pytest.raises(UsageError, match="--query 500"):
        explain_run(mutag["run"], ExplainRequest(graphs=[0], query=500), **kw)
    with pytest.raises(UsageError, match="--view"):
        explain_run(mutag["run"], ExplainRequest(graphs=[0], view="pie"), **kw)


def test_cli_view_graph(mutag, tmp_path):
    from tests.cli_helpers import run

    r = run("explain", str(mutag["run"]), "--graph", "3", "--view", "graph", "--out", str(tmp_path / "m"),
            "--cache-dir", str(mutag["root"] / "cache"), "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    assert (tmp_path / "m" / "graph_3_q0_l1_graph.png").is_file() and not (tmp_path / "m" / "graph_3.png").exists()
    assert "graph view:" in r.stdout and "attention mass by hop distance" in r.stdout  # the hop table stays


def test_views_of_one_graph_from_other_queries_and_layers_do_not_overwrite(mutag, tmp_path):
    """Each (query, layer) view of one target is its own file; the JSON names the file drawn."""
    kw = {"out_dir": tmp_path / "m", "cache_dir": mutag["root"] / "cache"}
    drawn = []
    for query, layer in [(None, None), (7, 0), (7, 1)]:
        result = explain_run(mutag["run"], ExplainRequest(graphs=[3], view="graph", query=query, layer=layer), **kw)
        view = result["targets"][0]["graph_view"]
        expect = (0 if query is None else query, 1 if layer is None else layer)
        assert (view["query"], view["layer"]) == expect
        assert Path(view["figure"]).name == f"graph_3_q{expect[0]}_l{expect[1]}_graph.png"
        drawn.append(view["figure"])
    assert len(set(drawn)) == 3 and all(Path(f).is_file() for f in drawn)
