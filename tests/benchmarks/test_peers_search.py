"""benchmarks/peers_gnn.py and peers_folds.py under a search: the node and link peers score only the parts
asked for, so ``tune_study.py``'s searches never read test, and Amazon sets get xmask's seeded split."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.benchmarks import load_script
from xmask_cli.engine.scoring import splits


@pytest.fixture(scope="module")
def common():
    return load_script("peers_common")


@pytest.fixture(scope="module")
def gnn():
    return load_script("peers_gnn")


@pytest.fixture(scope="module")
def folds():
    return load_script("peers_folds")


@pytest.fixture(scope="module")
def cora(common, shared_data, tmp_path_factory):
    return common.load("Cora", shared_data, tmp_path_factory.mktemp("cache"))


def _far(a: np.ndarray) -> np.ndarray:
    """Node ids no graph has: any read of these pairs or indices raises IndexError."""
    return np.full_like(np.asarray(a), 10**9)


def test_link_peer_searching_on_val_never_reads_test(gnn, cora, monkeypatch):
    hp = {"hidden": 32, "dropout": 0.1, "lr": 0.01, "weight_decay": 1e-4, "decoder": "dot"}
    clean = gnn.run_link(cora, "dot", 0, epochs=3, patience=3, hp=hp, parts=("val",))
    assert set(clean["metrics"]) == {"val"}
    real = splits.edge_split
    monkeypatch.setattr(splits, "edge_split", lambda *a, **k: dataclasses.replace(
        s := real(*a, **k), test_pos=_far(s.test_pos), test_neg=_far(s.test_neg)))
    poisoned = gnn.run_link(cora, "dot", 0, epochs=3, patience=3, hp=hp, parts=("val",))
    assert poisoned["metrics"]["val"] == clean["metrics"]["val"]
    with pytest.raises(IndexError):  # the poison is live: reading test would have raised
        gnn.run_link(cora, "dot", 0, epochs=1, patience=1, hp=hp, parts=("val", "test"))


def test_node_peer_searching_on_val_never_reads_test(gnn, cora, monkeypatch):
    hp = {"hidden": 16, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4}
    clean = gnn.run_node(cora, "GCN", 0, epochs=3, patience=3, hp=hp, parts=("train", "val"))
    assert set(clean["metrics"]) == {"train", "val"}
    real = splits.node_split
    monkeypatch.setattr(splits, "node_split", lambda *a, **k: dataclasses.replace(s := real(*a, **k),
                                                                                   test=_far(s.test)))
    poisoned = gnn.run_node(cora, "GCN", 0, epochs=3, patience=3, hp=hp, parts=("train", "val"))
    assert poisoned["metrics"] == clean["metrics"]
    with pytest.raises(IndexError):
        gnn.run_node(cora, "GCN", 0, epochs=1, patience=1, hp=hp)


def test_amazon_peer_split_is_xmask_seeded_split(common, gnn, shared_data, tmp_path, monkeypatch):
    graphs = common.load("Computers", shared_data, tmp_path)
    seen = []
    real = splits.node_split
    monkeypatch.setattr(splits, "node_split", lambda *a, **k: seen.append((a[0], k.get("seed"))) or real(*a, **k))
    hp = {"hidden": 8, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4}
    runs = [gnn.run_node(graphs, "GCN", s, epochs=1, patience=1, hp=hp, parts=("train", "val")) for s in (0, 1)]
    assert seen == [("random-60-20-20", 0), ("random-60-20-20", 1)]
    n = int(graphs.dataset[0].num_nodes)
    for r in runs:  # 60/20/20 of every node, as xmask's run with that seed splits them
        assert r["split"]["train"] + r["split"]["val"] + r["split"]["test"] == n
        assert abs(r["split"]["val"] - 0.2 * n) <= 1


@pytest.mark.parametrize("model", ["GIN", "baseline"])
def test_fold_peers_train_on_xmasks_folds(common, folds, model, tmp_path):
    """The fold-protocol peers read the same outer fold and inner holdout as ``xmask train --folds``."""
    from xmask_cli.engine.scoring.folds import outer_folds
    from xmask_cli.engine.tasks.graph import graph_labels

    graphs = common.load("MUTAG", tmp_path / "no-root", tmp_path / "cache")  # bundled
    data_list = common.graph_data_list(graphs, "degree")
    assert data_list[0].x.size(1) == 7 + 5  # MUTAG's atom types and graph-level's one-hot degree (as xmask)
    labels = graph_labels(graphs)
    res = folds.run_graph_fold(data_list, labels, model, seed=0, folds=3, fold=1, epochs=2, patience=5)
    fold = outer_folds(labels, 3, 0)[1]
    assert res["split"] == {"name": "fold-1-of-3", "seed": 0, "train": len(fold.train), "val": len(fold.val),
                            "test": len(fold.test)}
    assert res["epochs_run"] == 2 and 0 <= res["metrics"]["test"] <= 1
