"""Graphs with 0 nodes or 0 edges (a filtered dataset, an edge list with isolated nodes): a defined
output and finite gradients on every graph-level path, never NaN.

Defined output: a graph with no nodes pools to the zero vector (sum, mean and
max alike, as PyG's scatter gives an empty segment), so its logits are the
head applied to 0; a graph with nodes but no edges has ``Â = I`` (self loops
only), so each node attends to itself alone.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from xmask_cli.config_resolve import resolve
from xmask_cli.data.load import graphs_fingerprint
from xmask_cli.engine.batching.stream import GraphLevelStream
from xmask_cli.model.network import ModelConfig, XMaskNet
from xmask_cli.prepare import prepare_graphs

#: A 2-node edge, an empty graph, 3 isolated nodes, a 3-node path.
EDGES = [np.array([[0, 1], [1, 0]]), np.zeros((2, 0), np.int64), np.zeros((2, 0), np.int64),
         np.array([[0, 1, 1, 2], [1, 0, 2, 1]])]
NODES = np.array([2, 0, 3, 3])


@pytest.fixture(scope="module")
def cached(tmp_path_factory: pytest.TempPathFactory) -> str:
    cfg = resolve("graph-level").structure
    s = prepare_graphs(dataset_key="empty", level="graph", edges=EDGES, num_nodes=NODES,
                       fingerprint=graphs_fingerprint(EDGES, NODES), cfg=cfg, cache_dir=tmp_path_factory.mktemp("c"))
    return s.path


def _batch(path: str, feats: list[torch.Tensor], idx: list[int]):
    labels = torch.tensor([0, 1, 0, 1])
    stream = GraphLevelStream(path, feats, labels, np.asarray(idx), len(idx), shuffle=False, seed=0,
                              load_in_memory=True)
    (batch,) = list(stream.epoch(0))
    return batch


def _order(batch) -> list[int]:
    # Position of each batch row in terms of graph sizes (the stream sorts by size; sizes identify graphs here).
    return batch.mask.sum(1).tolist()


def test_structure_of_an_edgeless_graph_is_the_identity(cached):
    feats = [torch.randn(int(n), 5) for n in NODES]
    b = _batch(cached, feats, [2])
    assert b.powers.shape[-1] == 3
    for k in range(b.powers.size(1)):  # Â = D^-1/2 (0 + I) D^-1/2 = I, so every power is I
        assert torch.allclose(b.powers[0, k], torch.eye(3), atol=1e-6)


@pytest.mark.parametrize("readout", ["sum", "mean", "max"])
def test_defined_outputs_and_finite_gradients(cached, readout):
    torch.manual_seed(0)
    feats = [torch.randn(int(n), 5) for n in NODES]
    model = XMaskNet(ModelConfig(in_dim=5, out_dim=2, hidden=16, heads=2, layers=2, readout=readout,
                                 readout_scale=0.5, dropout=0.0))
    model.eval()
    batch = _batch(cached, feats, [0, 1, 2, 3])
    out = model(batch.inputs())
    assert torch.isfinite(out).all()
    rows = {n: i for i, n in enumerate(_order(batch))}  # sizes 2, 0 and 3 (twice): keep the unique ones
    with torch.no_grad():
        empty_logits = model.head(torch.zeros(1, 16))
    torch.testing.assert_close(out[rows[0]], empty_logits[0])
    # Each graph in the padded batch gives what it gives alone (padding and empty neighbours change nothing).
    for g in (0, 1, 2, 3):  # graph 1 alone: a batch of one empty graph
        alone = model(_batch(cached, feats, [g]).inputs())
        match = [i for i in range(4) if torch.allclose(out[i], alone[0], atol=1e-5)]
        assert match, f"graph {g}: batched output differs from its output alone"
    # Gradients: finite, in training mode too.
    model.train()
    loss = torch.nn.functional.cross_entropy(model(batch.inputs()), batch.y.long())
    loss.backward()
    assert torch.isfinite(loss)
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name


def test_edgeless_graph_attends_to_itself_only(cached):
    """With Â = I each node's attention output is its own value: a 1-layer model's node states on the
    3 isolated nodes equal the same model run on each node as a 1-node graph."""
    torch.manual_seed(1)
    x = torch.randn(3, 5)
    model = XMaskNet(ModelConfig(in_dim=5, out_dim=2, hidden=8, heads=2, layers=1, dropout=0.0)).eval()
    eye = torch.eye(3).expand(1, 4, 3, 3)
    h = model.encode_dense(x[None], eye, torch.ones(1, 3, dtype=torch.bool))
    for i in range(3):
        single = model.encode_dense(x[None, i:i + 1], torch.ones(1, 4, 1, 1), torch.ones(1, 1, dtype=torch.bool))
        torch.testing.assert_close(h[0, i], single[0, 0], atol=1e-5, rtol=1e-5)


def test_sparse_path_with_an_empty_graph(cached):
    """Sparse forward over the same four graphs (graph 1 has no nodes, so no entry in ``batch``)."""
    torch.manual_seed(2)
    model = XMaskNet(ModelConfig(in_dim=5, out_dim=2, hidden=16, heads=2, layers=2, dropout=0.0)).eval()
    x = torch.randn(8, 5)
    batch = torch.tensor([0, 0, 2, 2, 2, 3, 3, 3])
    # Each graph's own pairs with its Â^1, Â^2 (graph 2 is edgeless: self pairs only, value 1).
    a = torch.tensor([[0.5, 0.5], [0.5, 0.5]])
    pairs, vals = [], []
    for off, n, mat in ((0, 2, a), (2, 3, torch.eye(3)), (5, 3, None)):
        if mat is None:  # path 0-1-2 with self loops, sym-normalised
            A = torch.tensor([[1., 1, 0], [1, 1, 1], [0, 1, 1]])
            d = A.sum(1) ** -0.5
            mat = d[:, None] * A * d[None, :]
        m1, m2 = mat, mat @ mat
        for i in range(n):
            for j in range(n):
                if m2[i, j] > 0:
                    pairs.append((off + i, off + j))
                    vals.append((float(m1[i, j]), float(m2[i, j])))
    ei = torch.tensor(pairs).t()
    values = torch.tensor(vals)
    out = model.forward_sparse(x, ei, values, batch=batch, num_graphs=4)
    assert out.shape == (4, 2) and torch.isfinite(out).all()
    with torch.no_grad():
        torch.testing.assert_close(out[1], model.head(torch.zeros(1, 16))[0])
    model.train()
    model.forward_sparse(x, ei, values, batch=batch, num_graphs=4).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), name
