"""M3Dphormer on Cora through ExpertNodeTask: no label leakage, the masks, the loss, train/eval end to end."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from typer.testing import CliRunner

from xmask_cli.cache import StructureCache
from xmask_cli.cli import app
from xmask_cli.config_resolve import resolve
from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.runs.evaluate import evaluate_run
from xmask_cli.engine.runs.sweep import train_seeds
from xmask_cli.engine.scoring.splits import node_split
from xmask_cli.engine.tasks.node import NodeTask
from xmask_cli.engine.tasks.node_experts import ExpertNodeTask
from xmask_cli.model.experts import EXPERTS
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.prepare import prepare_dataset

#: The m3d-cora structure minus the slow sections the experts never read; K = heads = 2.
FAST = ["structure.spd.enabled=false", "structure.spectrum.enabled=false", "structure.powers.k=2"]
TINY = ["model.hidden=8", "model.heads=2", "train.epochs=2", "train.warmup_epochs=1"]

runner = CliRunner()


class _OneGraph:
    """The slice of a PyG dataset NodeTask reads, around a (modified) copy of Cora's one graph."""

    def __init__(self, data, num_classes: int):
        self._data, self.num_classes = data, num_classes

    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int):
        return self._data


@dataclasses.dataclass
class Cora:
    cache_dir: Path
    path: Path
    graphs: object
    split: object
    y: np.ndarray
    C: int

    def with_labels(self, y: np.ndarray):
        data = self.graphs.dataset[0].clone()
        data.y = torch.from_numpy(y).to(data.y.dtype)
        return dataclasses.replace(self.graphs, dataset=_OneGraph(data, self.C))

    def task(self, y: np.ndarray | None = None) -> NodeTask:
        graphs = self.graphs if y is None else self.with_labels(y)
        return ExpertNodeTask(self.path, graphs, self.split)


@pytest.fixture(scope="module")
def cora(tmp_path_factory: pytest.TempPathFactory) -> Cora:
    cache_dir = tmp_path_factory.mktemp("m3d_cache")
    summary = prepare_dataset(resolve("m3d-cora", FAST), cache_dir=cache_dir, offline=True)
    graphs = load_graphs(get_dataset("cora"), data_root=None, cache_dir=cache_dir, offline=True)
    split = node_split(graphs.spec.split, graphs.dataset[0], seed=0)
    y = graphs.dataset[0].y.numpy().copy()
    return Cora(cache_dir, Path(summary.path), graphs, split, y, int(graphs.dataset.num_classes))


@pytest.fixture(scope="module")
def task(cora: Cora) -> NodeTask:
    return cora.task()


def _model(task: NodeTask, seed: int = 0, **kw) -> XMaskNet:
    torch.manual_seed(seed)
    cfg = ModelConfig(in_dim=task.in_dim, out_dim=task.out_dim, task="node",
                      **{"hidden": 8, "heads": 2, "layers": 2, "dropout": 0.0, "experts": EXPERTS, **kw})
    return XMaskNet(cfg)


def _train_then_predict(task: NodeTask, steps: int = 2) -> torch.Tensor:
    model = _model(task, dropout=0.1)  # dropout: the RNG stream must not depend on the labels either
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.manual_seed(1)
    for epoch in range(steps):
        model.train()
        for batch in task.train_batches(epoch):
            loss, _ = task.loss(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return task.predict(model)


def _pair_keys(ei: torch.Tensor, n: int) -> np.ndarray:
    ei = ei.numpy().astype(np.int64)
    return np.sort(ei[0] * n + ei[1])


# ---------------------------------------------------------------- leakage
def test_no_label_outside_training_reaches_the_model(cora: Cora, task: NodeTask):
    split, y, C = cora.split, cora.y, cora.C
    train = np.sort(split.train)
    assert len(train) == 140 and len(split.val) == 500 and len(split.test) == 1000
    outside = np.setdiff1d(np.arange(len(y)), train)  # val, test and the unlabelled rest
    shuffled = y.copy()
    shuffled[outside] = (y[outside] + 1 + np.arange(len(outside)) % (C - 1)) % C
    assert (shuffled[outside] != y[outside]).all() and (shuffled[train] == y[train]).all()
    flipped = y.copy()
    flipped[train[0]] = (y[train[0]] + 1) % C

    base, other, changed = task, cora.task(shuffled), cora.task(flipped)
    m0, m1, m2 = (t.tokens.masks for t in (base, other, changed))
    n = m0.num_tokens
    assert torch.equal(base.tokens.x, other.tokens.x)
    assert torch.equal(m0.global_, m1.global_)
    for name in ("local", "cluster"):
        assert torch.equal(m0.pairs[name], m1.pairs[name])
    out0 = _train_then_predict(base)
    assert torch.equal(out0, _train_then_predict(other))
    # A training label is read: the class tokens' features, the global mask and the outputs move.
    assert not torch.equal(base.tokens.x, changed.tokens.x)
    assert not np.array_equal(_pair_keys(m0.global_, n), _pair_keys(m2.global_, n))
    assert not torch.equal(out0, _train_then_predict(changed))

    # Every pair from a class token to a real node: a training node of that class; and all of them.
    N, P = m0.num_nodes, m0.num_parts
    g = m0.global_.numpy()
    to_node = (g[0] >= N + P) & (g[1] < N)
    cls, node = g[0][to_node] - N - P, g[1][to_node]
    assert np.isin(node, train).all() and (y[node] == cls).all()
    assert sorted(zip(node.tolist(), cls.tolist())) == sorted(zip(train.tolist(), y[train].tolist()))
    # Real nodes reach only class tokens in the global mask (every one of them), nothing real.
    from_node = g[0] < N
    assert (g[1][from_node] >= N + P).all() and from_node.sum() == N * C


# ---------------------------------------------------------------- masks
def test_local_mask_is_the_support_of_a_hat_and_clusters_are_metis(cora: Cora, task: NodeTask):
    masks = task.tokens.masks
    N = task.num_nodes
    edges = cora.graphs.edge_index[0]
    a = sp.coo_matrix((np.ones(edges.shape[1]), (edges[0], edges[1])), shape=(N, N)).tocsr()
    a = ((a + a.T) > 0).astype(np.float64) + sp.eye(N)
    d = sp.diags(np.asarray(a.sum(1)).ravel() ** -0.5)
    a_hat = (d @ a @ d).tocsr()
    a_hat.sort_indices()
    row, col = a_hat.nonzero()
    given = masks.local[:, : masks.num_given_local]
    assert np.array_equal(_pair_keys(given, N), np.sort(row.astype(np.int64) * N + col))
    # Â^1 and Â^2 at the local pairs, for the X-LogSMask term of the local expert.
    gr, gc = given.numpy()
    values = task.tokens.values.numpy()
    assert values.shape == (given.size(1), 2)
    np.testing.assert_allclose(values[:, 0], np.asarray(a_hat[gr, gc]).ravel(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(values[:, 1], np.asarray((a_hat @ a_hat)[gr, gc]).ravel(), rtol=1e-4, atol=1e-6)
    # Every node has its self pair already: the rest of the local mask is the virtual tokens' self pairs.
    virtual = np.arange(N, masks.num_tokens)
    assert np.array_equal(masks.local[:, masks.num_given_local:].numpy(), np.stack([virtual, virtual]))

    part = StructureCache(cora.path).partition(0).astype(np.int64)
    P = masks.num_parts
    assert P == 32 == part.max() + 1 and np.array_equal(masks.part.numpy(), part)
    c = masks.cluster.numpy()
    real = (c[0] < N) | (c[1] < N)
    node = np.where(c[0] < N, c[0], c[1])[real]
    token = np.where(c[0] < N, c[1], c[0])[real]
    assert np.array_equal(token, N + part[node])
    assert np.bincount(node, minlength=N).tolist() == [2] * N  # to its token and back
    # Cluster tokens start as their part's mean features; class tokens as their training nodes' mean.
    x, tok = task.x.numpy().astype(np.float64), task.tokens.x.numpy()
    for p in (0, P - 1):
        np.testing.assert_allclose(tok[N + p], x[part == p].mean(0), atol=1e-6)
    train = np.sort(cora.split.train)
    for k in range(cora.C):
        np.testing.assert_allclose(tok[N + P + k], x[train[cora.y[train] == k]].mean(0), atol=1e-6)


def test_local_mask_keeps_every_real_edge_of_a_truncated_large_graph(cora: Cora, tmp_path: Path):
    # Cora prepared as a large graph (truncation on, topk 128): node degrees reach 168, and the
    # local expert must still see every real edge and self loop (the support of Â, kept whole).
    cfg = resolve("m3d-cora", FAST + ["structure.large.min_nodes=1000", "structure.large.topk=128"])
    summary = prepare_dataset(cfg, cache_dir=cora.cache_dir, offline=True)
    with StructureCache(summary.path) as c:
        assert bool(c.file["graphs/large"][0])
    task = ExpertNodeTask(summary.path, cora.graphs, cora.split)
    N = task.num_nodes
    edges = cora.graphs.edge_index[0]
    a = sp.coo_matrix((np.ones(edges.shape[1]), (edges[0], edges[1])), shape=(N, N)).tocsr()
    a = ((a + a.T) > 0).astype(np.float64)
    deg = np.asarray(a.sum(1)).ravel()
    assert deg.max() + 1 > 128  # some node has more real edges than the row budget
    a = (a + sp.eye(N)).tocsr()
    row, col = a.nonzero()
    masks = task.tokens.masks
    given = masks.local[:, : masks.num_given_local]
    assert np.array_equal(_pair_keys(given, N), np.sort(row.astype(np.int64) * N + col))
    # Â^2 is truncated there, but never on a real edge: positive at every local pair.
    assert (task.tokens.values[:, 1] > 0).all()
    assert summary.truncation["powers"]["max"][1] > 0


# ---------------------------------------------------------------- loss
def test_loss_counts_the_class_tokens(cora: Cora, task: NodeTask):
    model = _model(task).eval()
    (batch,) = list(task.train_batches(0))
    loss, count = task.loss(model, batch)
    assert count == 140
    with torch.no_grad():
        logits = task.batcher.forward(model, batch).double().numpy()
    masks = task.tokens.masks
    N, P, C = masks.num_nodes, masks.num_parts, masks.num_classes
    train = np.flatnonzero(np.isin(np.arange(N), cora.split.train))
    rows = np.concatenate([train, N + P + np.arange(C)])
    labels = np.concatenate([cora.y[train], np.arange(C)])
    z = logits[rows]
    logp = z - z.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    want = -logp[np.arange(len(rows)), labels].mean()
    assert loss.item() == pytest.approx(want, rel=1e-5)
    only_nodes = -logp[np.arange(len(train)), labels[: len(train)]].mean()
    assert abs(only_nodes - want) > 1e-6
    # predict: the real nodes' logits, nothing virtual.
    torch.testing.assert_close(task.predict(model).double(), torch.from_numpy(logits[:N]), atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------- end to end
def test_train_seeds_and_eval_reproduce(cora: Cora, tmp_path: Path):
    cfg = resolve("m3d-cora", FAST + TINY)
    assert list(cfg.model.experts) == list(EXPERTS) and cfg.structure.partition.parts == 32
    result = train_seeds(cfg, [0], device="cpu", cache_dir=cora.cache_dir, run_root=tmp_path / "runs", offline=True)
    (run,) = result["runs"]
    folder = Path(run["run_dir"])
    assert (folder / "summary.json").is_file() and (folder / "best.pt").is_file()
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["metrics"] == run["metrics"] and result["level"] == "node"
    saved = json.loads((folder / "config.json").read_text())
    assert saved["model"]["experts"] == list(EXPERTS) and saved["model"]["hidden"] == 8
    ev = evaluate_run(folder, cache_dir=cora.cache_dir, offline=True)
    assert ev["metrics"] == ev["recorded"] == {p: run["metrics"][p] for p in ("val", "test")}
    r = runner.invoke(app, ["--format", "json", "eval", str(folder), "--split", "all", "--device", "cpu",
                            "--cache-dir", str(cora.cache_dir)])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    for part in ("train", "val", "test"):
        assert out["metrics"][part] == run["metrics"][part]


def test_cluster_expert_without_parts_is_exit_2(tmp_path: Path):
    r = runner.invoke(app, ["train", "--preset", "m3d-cora", "--set", "model.experts=[cluster]",
                            "--set", "structure.partition.parts=0", "--device", "cpu",
                            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache")])
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "structure.partition.parts" in lines[0], r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    assert not (tmp_path / "runs").exists()
