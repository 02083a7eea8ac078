"""benchmarks/peers.py under a search: the node and link peers score only the parts asked for, so
``tune_study.py``'s searches never read test, and Amazon sets get xmask's seeded split."""
from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from tests.benchmarks import load_script
from xmask_cli.engine import splits


@pytest.fixture(scope="module")
def peers():
    yield load_script("peers", "peers_under_test")
    sys.modules.pop("peers_under_test", None)


@pytest.fixture(scope="module")
def cora(peers, shared_data, tmp_path_factory):
    return peers._load("Cora", shared_data, tmp_path_factory.mktemp("cache"))


def _far(a: np.ndarray) -> np.ndarray:
    """Node ids no graph has: any read of these pairs or indices raises IndexError."""
    return np.full_like(np.asarray(a), 10**9)


def test_link_peer_searching_on_val_never_reads_test(peers, cora, monkeypatch):
    hp = {"hidden": 32, "dropout": 0.1, "lr": 0.01, "weight_decay": 1e-4, "decoder": "dot"}
    clean = peers.run_link(cora, "dot", 0, epochs=3, patience=3, hp=hp, parts=("val",))
    assert set(clean["metrics"]) == {"val"}
    real = splits.edge_split
    monkeypatch.setattr(splits, "edge_split", lambda *a, **k: dataclasses.replace(
        s := real(*a, **k), test_pos=_far(s.test_pos), test_neg=_far(s.test_neg)))
    poisoned = peers.run_link(cora, "dot", 0, epochs=3, patience=3, hp=hp, parts=("val",))
    assert poisoned["metrics"]["val"] == clean["metrics"]["val"]
    with pytest.raises(IndexError):  # the poison is live: reading test would have raised
        peers.run_link(cora, "dot", 0, epochs=1, patience=1, hp=hp, parts=("val", "test"))


def test_node_peer_searching_on_val_never_reads_test(peers, cora, monkeypatch):
    hp = {"hidden": 16, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4}
    clean = peers.run_node(cora, "GCN", 0, epochs=3, patience=3, hp=hp, parts=("train", "val"))
    assert set(clean["metrics"]) == {"train", "val"}
    real = splits.node_split
    monkeypatch.setattr(splits, "node_split", lambda *a, **k: dataclasses.replace(s := real(*a, **k),
                                                                                   test=_far(s.test)))
    poisoned = peers.run_node(cora, "GCN", 0, epochs=3, patience=3, hp=hp, parts=("train", "val"))
    assert poisoned["metrics"] == clean["metrics"]
    with pytest.raises(IndexError):
        peers.run_node(cora, "GCN", 0, epochs=1, patience=1, hp=hp)


def test_amazon_peer_split_is_xmask_seeded_split(peers, shared_data, tmp_path, monkeypatch):
    graphs = peers._load("Computers", shared_data, tmp_path)
    seen = []
    real = splits.node_split
    monkeypatch.setattr(splits, "node_split", lambda *a, **k: seen.append((a[0], k.get("seed"))) or real(*a, **k))
    hp = {"hidden": 8, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4}
    runs = [peers.run_node(graphs, "GCN", s, epochs=1, patience=1, hp=hp, parts=("train", "val")) for s in (0, 1)]
    assert seen == [("random-60-20-20", 0), ("random-60-20-20", 1)]
    n = int(graphs.dataset[0].num_nodes)
    for r in runs:  # 60/20/20 of every node, as xmask's run with that seed splits them
        assert r["split"]["train"] + r["split"]["val"] + r["split"]["test"] == n
        assert abs(r["split"]["val"] - 0.2 * n) <= 1


@pytest.mark.parametrize("model", ["GIN", "baseline"])
def test_fold_peers_train_on_xmasks_folds(peers, model, tmp_path):
    """The fold-protocol peers read the same outer fold and inner holdout as ``xmask train --folds``."""
    from xmask_cli.engine.folds import outer_folds
    from xmask_cli.engine.tasks.graph import graph_labels

    graphs = peers._load("MUTAG", tmp_path / "no-root", tmp_path / "cache")  # bundled
    data_list = peers.graph_data_list(graphs, "degree")
    assert data_list[0].x.size(1) == 7 + 5  # MUTAG's atom types and graph-level's one-hot degree (as xmask)
    labels = graph_labels(graphs)
    res = peers.run_graph_fold(data_list, labels, model, seed=0, folds=3, fold=1, epochs=2, patience=5)
    fold = outer_folds(labels, 3, 0)[1]
    assert res["split"] == {"name": "fold-1-of-3", "seed": 0, "train": len(fold.train), "val": len(fold.val),
                            "test": len(fold.test)}
    assert res["epochs_run"] == 2 and 0 <= res["metrics"]["test"] <= 1
