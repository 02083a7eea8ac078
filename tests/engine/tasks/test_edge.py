"""Edge regression: structure and features from training rows only, and it learns a known signal."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.engine.pair_graphs import FULL, POWERS_ONLY, adjacency, check_no_leak, random_graph
from xmask_cli.data.edgefile import EdgeData, load_edge_file
from xmask_cli.engine.batching.features import one_hot_degree
from xmask_cli.engine.batching.pair_structure import prepare_pair_structure
from xmask_cli.engine.scoring.metrics import mae
from xmask_cli.engine.tasks.edge import EdgeTask, edge_regression_split, train_edge_index
from xmask_cli.engine.training.loop import TrainConfig, train_task
from xmask_cli.model.model_config import ModelConfig


def _edge_data(n: int, seed: int) -> EdgeData:
    ei = random_graph(n, 0.1, seed)
    ei = ei[:, ei[0] < ei[1]]
    targets = np.random.default_rng(seed).normal(size=(ei.shape[1], 2)).astype(np.float32)
    return EdgeData(edge_index=ei, targets=targets, num_nodes=n, x=None, target_names=("a", "b"))


def test_edge_structure_and_features_see_training_rows_only(tmp_path: Path) -> None:
    n = 40
    data = _edge_data(n, seed=2)
    rows = edge_regression_split(data.num_edges, seed=0, fractions=(0.7, 0.1, 0.2))
    train_ei = train_edge_index(data, rows)
    path = prepare_pair_structure("toy", train_ei, n, FULL, tmp_path, level="edge")
    held_out = data.edge_index[:, np.concatenate([rows.val, rows.test])]
    full = np.concatenate([data.edge_index, data.edge_index[::-1]], axis=1)
    check_no_leak(path, train_ei, full, held_out, n)

    task = EdgeTask(path, None, data, rows, dataset="toy")
    deg = adjacency(train_ei, n).sum(1).astype(np.int64)
    assert torch.equal(task.x.argmax(1), torch.from_numpy(deg))  # degree of the TRAINING graph
    assert task.in_dim == deg.max() + 1 and task.out_dim == 2 and task.model_task == "edge"
    assert not torch.equal(one_hot_degree(full, n).argmax(1), torch.from_numpy(deg))
    d = task.describe()
    assert json.loads(json.dumps(d)) == d
    assert d["split"]["name"] == "edge-rows-70-10-20" and d["split"]["fractions"] == [0.7, 0.1, 0.2]
    assert task.split_sizes() == dict(zip(("train", "val", "test"), rows.sizes()))

    full_path = prepare_pair_structure("toy-full", full, n, FULL, tmp_path, level="edge")
    with pytest.raises(ValueError, match="not prepared from this split's training edges"):
        EdgeTask(full_path, None, data, rows, dataset="toy")


def test_edge_regression_learns_a_known_signal(tmp_path: Path) -> None:
    n = 80
    rng = np.random.default_rng(5)
    ei = random_graph(n, 0.08, seed=5)
    ei = ei[:, ei[0] < ei[1]]
    x = rng.normal(size=(n, 4)).astype(np.float32)
    w = np.array([1.0, -2.0, 0.5, 1.5])
    s = x @ w
    y = np.stack([s[ei[0]] + s[ei[1]], 3.0 * (s[ei[0]] + s[ei[1]]) + 10.0], axis=1)
    lines = ["src,dst,sum,scaled"] + [f"{u},{v},{a:.6f},{b:.6f}" for (u, v), (a, b) in zip(ei.T, y)]
    (tmp_path / "edges.csv").write_text("\n".join(lines) + "\n")
    np.save(tmp_path / "x.npy", x)
    data = load_edge_file(tmp_path / "edges.csv", tmp_path / "x.npy")

    rows = edge_regression_split(data.num_edges, seed=0)
    path = prepare_pair_structure("synthetic", train_edge_index(data, rows), data.num_nodes, POWERS_ONLY, tmp_path,
                                  level="edge")
    task = EdgeTask(path, torch.from_numpy(data.x), data, rows, dataset="synthetic", metric="mae")
    model_cfg = ModelConfig(in_dim=4, out_dim=2, task="edge", hidden=32, heads=2, layers=1, dropout=0.0,
                            head_powers=(1, 2))
    summary = train_task(task, model_cfg, TrainConfig(epochs=80, lr=1e-2, warmup_epochs=1, patience=80, seed=0),
                            tmp_path / "run")

    baseline = mae(np.broadcast_to(data.targets[rows.train].mean(0), (len(rows.test), 2)), data.targets[rows.test])
    assert summary["metrics"]["test"] < 0.4 * baseline, (summary["metrics"], baseline)
    d = task.describe()
    assert d["edge"]["sha256"] == data.sha256 and d["edge"]["features_file"] == str(tmp_path / "x.npy")
    assert d["split"]["name"] == "edge-rows-80-10-10" and d["split"]["seed"] == 0
