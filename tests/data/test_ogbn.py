"""OGB node sets offline, on a small synthetic copy in OGB's raw layout: what OGB's own loader reads
(x, y, the official split) is what xmask's model receives, and the metric is OGB's Evaluator."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.cli_helpers import one_error_line, run

N, D, C = 40, 6, 4


def _gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.writelines(",".join(str(v) for v in row) + "\n" for row in rows)


def write_ogbn_arxiv(root: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """``root/ogbn_arxiv`` with every file ogb 1.3.6's ``PygNodePropPredDataset('ogbn-arxiv')`` reads
    (no header rows, gzip CSV), as the official zip unpacks; returns the arrays written."""
    rng = np.random.default_rng(seed)
    y = np.arange(N) % C
    edges = np.asarray([(u, v) for u in range(N) for v in range(N)
                        if u != v and rng.random() < (0.15 if y[u] == y[v] else 0.02)], dtype=np.int64)
    x = np.round(rng.normal(size=(N, D)) + y[:, None], 4).astype(np.float32)
    year = 2000 + np.arange(N) // 4
    base = root / "ogbn_arxiv"
    _gz(base / "raw" / "edge.csv.gz", edges.tolist())  # directed citations, one row each
    _gz(base / "raw" / "node-feat.csv.gz", [[repr(float(v)) for v in row] for row in x])
    _gz(base / "raw" / "node-label.csv.gz", [[int(v)] for v in y])
    _gz(base / "raw" / "node_year.csv.gz", [[int(v)] for v in year])
    _gz(base / "raw" / "num-node-list.csv.gz", [[N]])
    _gz(base / "raw" / "num-edge-list.csv.gz", [[len(edges)]])
    split = {"train": np.arange(0, 24), "valid": np.arange(24, 32), "test": np.arange(32, 40)}  # by "year"
    for part, idx in split.items():
        _gz(base / "split" / "time" / f"{part}.csv.gz", [[int(i)] for i in idx])
    (base / "RELEASE_v1.txt").write_text("synthetic copy for tests\n")
    return {"x": x, "y": y, "edges": edges, **split}


@pytest.fixture
def arxiv_root(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    root = tmp_path / "data"
    return root, write_ogbn_arxiv(root)


def _ogb_reference(root: Path, tmp_path: Path):
    """OGB's own loader on a private copy (it writes processed/ beside raw/)."""
    from ogb.nodeproppred import PygNodePropPredDataset

    from xmask_cli.data.pyg import safe_torch_load

    copy = tmp_path / "ogb-ref"
    shutil.copytree(root, copy)
    with safe_torch_load():  # torch >= 2.6 loads weights only; OGB's processed file holds PyG data classes
        ds = PygNodePropPredDataset("ogbn-arxiv", root=str(copy))
        return ds[0], ds.get_idx_split(), ds.num_classes


def test_model_receives_what_ogb_reads(arxiv_root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from xmask_cli.config_resolve import resolve
    from xmask_cli.engine.runs.experiment import Experiment

    root, written = arxiv_root
    data, idx, num_classes = _ogb_reference(root, tmp_path)
    cfg = resolve("ogbn-arxiv")
    exp = Experiment.load(cfg, cache_dir=tmp_path / "cache", data_root=root, offline=True)
    task = exp.task(0, "cpu")
    # OGB's loader against the files as written (its reader is the reference, the files the ground truth).
    assert np.array_equal(data.x.numpy(), written["x"]) and data.y.view(-1).tolist() == written["y"].tolist()
    # xmask's model inputs against OGB's loader.
    assert torch.equal(task.x, data.x.float())
    assert torch.equal(task.y, data.y.view(-1).long())
    assert task.out_dim == num_classes == 40  # OGB's class count (master.csv), not the labels seen
    assert task.split.name == "ogb-official" and task.split.seed is None
    for mine, theirs in (("train", "train"), ("val", "valid"), ("test", "test")):
        assert getattr(task.split, mine).tolist() == idx[theirs].tolist() == written[theirs].tolist()
    # The structure is the symmetrised citation graph (arxiv stores each citation once).
    from xmask_cli.cache import StructureCache

    with StructureCache(exp.cache_path) as c:
        a1 = c.dense_powers(0)[0]
    a = np.zeros((N, N))
    e = data.edge_index.numpy()
    a[e[0], e[1]] = a[e[1], e[0]] = 1
    a += np.eye(N)
    d = a.sum(1) ** -0.5
    assert np.allclose(a1, d[:, None] * a * d[None, :], atol=1e-6)
    # The score is OGB's Evaluator on the part's nodes.
    from ogb.nodeproppred import Evaluator

    from xmask_cli.model.network import XMaskNet

    torch.manual_seed(0)
    model = XMaskNet(exp.model_config(task))
    logits, y = task.outputs(model, "val")
    want = Evaluator("ogbn-arxiv").eval({"y_true": y.view(-1, 1).numpy(),
                                         "y_pred": logits.argmax(-1).view(-1, 1).numpy()})["acc"]
    calls = []
    real = Evaluator.eval
    monkeypatch.setattr(Evaluator, "eval", lambda self, d: calls.append(self.name) or real(self, d))
    assert task.score(model, "val") == want and calls == ["ogbn-arxiv"]


def test_ogb_accuracy_equals_accuracy() -> None:
    """OGB's Evaluator and xmask's accuracy agree where a difference would show (random logits, ties)."""
    from xmask_cli.engine.scoring.metrics import accuracy, ogb_node_accuracy

    rng = np.random.default_rng(1)
    score = ogb_node_accuracy("ogbn-arxiv")
    for n in (1, 7, 500):
        logits = rng.normal(size=(n, 40)).round(1)
        y = rng.integers(0, 40, size=n)
        assert score(torch.from_numpy(logits), torch.from_numpy(y).view(-1, 1)) == accuracy(logits, y)
        assert score(logits.argmax(1), y) == pytest.approx(float((logits.argmax(1) == y).mean()))


def test_train_offline_from_the_copy(arxiv_root, tmp_path: Path) -> None:
    root, _ = arxiv_root
    r = run("--format", "json", "train", "--dataset", "ogbn-arxiv", "--data-root", str(root), "--offline",
            "--set", "model.hidden=8", "--set", "model.layers=1", "--set", "train.epochs=2", "--device", "cpu")
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["dataset"] == "ogbn-arxiv" and out["level"] == "node" and out["metric"] == "accuracy"
    config = json.loads((tmp_path / "runs" / "ogbn-arxiv-node" / "0" / "config.json").read_text())
    assert config["config"]["structure"]["powers"]["k"] == 2  # the ogbn-arxiv preset, picked by name
    assert config["split"]["name"] == "ogb-official" and config["split"]["val"] == list(range(24, 32))
    assert not (root / "ogbn_arxiv" / "processed").exists()  # the data root is never written


def test_offline_without_a_copy_names_the_files(tmp_path: Path) -> None:
    r = run("prepare", "ogbn-products", "--data-root", str(tmp_path / "empty"), "--offline")
    assert r.exit_code == 3
    line = one_error_line(r)
    assert "ogbn_products/raw/edge.csv.gz" in line and "offline" in line
