"""explain.targets: graph targets above --max-nodes and node/edge targets are cropped to the closest nodes."""
from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from xmask_cli.config_resolve import resolve
from xmask_cli.engine.sweep import train_seeds
from xmask_cli.explain import ExplainRequest, explain_run


def test_large_graph_target_is_cropped(mutag):
    root = mutag["root"]
    result = explain_run(mutag["run"], ExplainRequest(graphs=[0], max_nodes=5), out_dir=root / "small",
                         cache_dir=root / "cache")
    t = result["targets"][0]
    assert t["cropped"] and t["num_nodes"] == 5 and t["node_ids"][0] == 0 and t["cropped_from"] > 5
    with h5py.File(result["files"]["maps"]) as f:
        assert f["graph_0/layer_1/head_1/attention"].shape == (5, 5)
        assert f["graph_0/layer_1/head_1/attention"].attrs["cropped_from"] == t["cropped_from"]
        with h5py.File(mutag["result"]["files"]["maps"]) as g:
            full = g["graph_0/layer_1/head_1/attention"][()]
        ids = np.array(t["node_ids"])
        np.testing.assert_array_equal(f["graph_0/layer_1/head_1/attention"][()], full[np.ix_(ids, ids)])
    # The hop summary reads every row of the graph, cropped or not.
    whole = next(x for x in mutag["result"]["targets"] if x["name"] == "graph_0")
    for layer, heads in whole["hop_summary"].items():
        for head, entry in heads.items():
            assert t["hop_summary"][layer][head]["mass"] == pytest.approx(entry["mass"], abs=1e-12)


def test_node_target_on_cora_is_cropped(tmp_path):
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import shortest_path

    cfg = resolve("node-level", ["model.hidden=8", "model.heads=2", "structure.powers.k=2", "structure.spd.enabled=true",
                           "train.epochs=1", "structure.spectrum.enabled=false", "structure.partition.parts=0"])
    train_seeds(cfg, [0], device="cpu", cache_dir=tmp_path / "cache", run_root=tmp_path / "runs")
    run = tmp_path / "runs" / "cora-node" / "0"
    result = explain_run(run, ExplainRequest(nodes=[0], edges=["3,9"], max_nodes=32), out_dir=tmp_path / "out",
                         cache_dir=tmp_path / "cache")
    node, edge = result["targets"]
    assert node["cropped"] and node["cropped_from"] == 2708 and len(node["node_ids"]) == 32
    assert node["node_ids"][0] == 0 and edge["cropped_from"] == 2708 and {3, 9} <= set(edge["node_ids"])
    # Independent BFS on Cora's edges: the crop is closest first.
    from xmask_cli.engine.experiment import Experiment

    exp = Experiment.load(cfg, cache_dir=tmp_path / "cache")
    ei = exp.graphs.dataset[0].edge_index.numpy()
    adj = csr_matrix((np.ones(ei.shape[1]), (ei[0], ei[1])), shape=(2708, 2708))
    d = shortest_path(adj, unweighted=True, directed=False, indices=[0])[0]
    got = d[node["node_ids"]]
    assert np.all(np.diff(got) >= 0) and set(np.flatnonzero(d <= 1)) <= set(node["node_ids"])
    with h5py.File(result["files"]["maps"]) as f:
        assert f["node_0"].attrs["cropped_from"] == 2708 and f["node_0/node_ids"].shape == (32,)
        att = f["node_0/layer_0/head_0/attention"][()]
        assert att.shape == (32, 32) and np.all(att.sum(1) <= 1 + 1e-5)
        assert "cropped to 32 of 2708" in f["node_0"].attrs["target"]
    for layer in result["hop_summary"].values():
        for head in layer.values():
            assert sum(head["mass"].values()) == pytest.approx(1.0, abs=1e-9)
    assert Path(result["files"]["figures"]["node_0"]).is_file()
    # The graph view of a node: the node is the query; its drawn edges are Cora's among the crop, hop colours
    # the BFS distances above.
    assert Path(result["files"]["graph_figures"]["node_0"]).is_file()
    assert node["graph_view"]["query"] == 0 and edge["graph_view"]["query"] == 3
    with h5py.File(result["files"]["maps"]) as f:
        ids = f["node_0/node_ids"][()]
        np.testing.assert_array_equal(f["node_0/graph/hops"][()], d[ids])
        e = f["node_0/graph/edges"][()]
    sub = adj[ids][:, ids]
    sub = ((sub + sub.T) > 0).toarray()
    np.fill_diagonal(sub, False)
    assert {(int(u), int(v)) for u, v in e.T} == {(int(u), int(v)) for u, v in zip(*np.nonzero(np.triu(sub)))}
