"""benchmarks/peers_tuned.py: Luo et al.'s tuned classic GNNs. The network against a numpy forward pass, the
sparse GCN path against the edge-list one, the authors' graph preprocessing, and a tiny run."""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from tests.benchmarks import load_script


@pytest.fixture(scope="module")
def tuned():
    return load_script("peers_tuned")


@pytest.fixture(scope="module")
def tf():
    return load_script("peers_transformers")


def _graph(n: int = 40, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A directed random graph with a few self-loops and duplicate-free edges, and random features."""
    g = torch.Generator().manual_seed(seed)
    ei = torch.unique(torch.randint(0, n, (2, 4 * n), generator=g), dim=1)
    return ei, torch.rand(n, 6, generator=g)


def _hp(**kw) -> dict:
    return {"hidden": 8, "layers": 2, "dropout": 0.0, "lr": 1e-2, "weight_decay": 0.0, "norm": "layer",
            "residual": False, "heads": 1, **kw}


def test_tuned_edges_are_undirected_with_one_self_loop_each(tuned):
    ei, _ = _graph()
    out = tuned.tuned_edges(ei, 40)
    pairs = set(map(tuple, out.t().tolist()))
    assert len(pairs) == out.size(1)  # no duplicates
    assert all((b, a) in pairs for a, b in pairs)
    loops = [a for a, b in pairs if a == b]
    assert sorted(loops) == list(range(40))
    assert {(a, b) for a, b in pairs if a != b} == ({(a, b) for a, b in ei.t().tolist() if a != b}
                                                    | {(b, a) for a, b in ei.t().tolist() if a != b})


def _numpy_forward(model, x: np.ndarray, a_hat: np.ndarray, residual: bool) -> np.ndarray:
    """conv -> (+ skip) -> LayerNorm -> ReLU per layer, then the head, in eval mode, with numpy."""
    h = x
    for i, conv in enumerate(model.convs):
        w, b = conv.lin.weight.detach().numpy(), conv.bias.detach().numpy()
        z = a_hat @ (h @ w.T) + b
        if residual:
            z = z + h @ model.skips[i].weight.detach().numpy().T + model.skips[i].bias.detach().numpy()
        ln = model.norms[i]
        mu, var = z.mean(1, keepdims=True), z.var(1, keepdims=True)
        z = (z - mu) / np.sqrt(var + ln.eps) * ln.weight.detach().numpy() + ln.bias.detach().numpy()
        h = np.maximum(z, 0.0)
    return h @ model.head.weight.detach().numpy().T + model.head.bias.detach().numpy()


@pytest.mark.parametrize("residual", [False, True])
def test_gcn_tuned_matches_a_numpy_forward_on_both_graph_forms(tuned, residual):
    """The CSR adjacency the peer trains on and the authors' edge list give the same network output, and both
    equal D^-1/2 (A + I) D^-1/2 propagation with the layer stack computed in numpy."""
    ei, x = _graph()
    n = x.size(0)
    torch.manual_seed(0)
    model = tuned.tuned_model("GCN-tuned", 6, 3, _hp(residual=residual)).eval()
    with torch.no_grad():
        sparse = model(x, tuned.gcn_adjacency(ei, n))
        edges = model(x, tuned.tuned_edges(ei, n))
    und = tuned.tuned_edges(ei, n)
    a = np.zeros((n, n))
    a[und[1].numpy(), und[0].numpy()] = 1.0  # one self-loop per node already in
    d = a.sum(1) ** -0.5
    expect = _numpy_forward(model, x.double().numpy(), d[:, None] * a * d[None, :], residual)
    np.testing.assert_allclose(sparse.numpy(), expect, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(edges.numpy(), expect, rtol=1e-4, atol=1e-5)


def _train_val_logits(model, x, adj, y, epochs: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per epoch of full-batch Adam training with dropout (its masks drawn from seed 1): the first layer's
    weight gradient and the eval-mode logits, as ``run_node_peer`` trains and validates."""
    torch.manual_seed(1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=5e-5)
    grads, logits = [], []
    for _ in range(epochs):
        model.train()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x, adj)[: len(y) // 2], y[: len(y) // 2]).backward()
        grads.append(model.convs[0].lin.weight.grad.clone())
        opt.step()
        model.eval()
        with torch.no_grad():
            logits.append(model(x, adj))
    return grads, logits


def test_one_graph_gcn_trains_exactly_as_pygs_gcnconv(tuned):
    """The one-graph GCN (normalisation kept, the adjacency as its own transpose in backward) against PyG's
    GCNConv normalising at every call with autograd's transpose: in float64, over 6 epochs of training with
    dropout on 3 layers, the same gradients and validation logits."""
    ei, x = _graph(n=60, seed=3)
    x = x.double()
    y = torch.arange(60) % 3
    adj = tuned.gcn_adjacency(ei, 60).to(torch.float64)
    hp = _hp(layers=3, dropout=0.5)
    plain = tuned.tuned_model("GCN-tuned", 6, 3, hp).double()
    fast = tuned.tuned_model("GCN-tuned", 6, 3, hp, one_graph=True).double()
    fast.load_state_dict(plain.state_dict())
    (g0, l0), (g1, l1) = _train_val_logits(plain, x, adj, y, 6), _train_val_logits(fast, x, adj, y, 6)
    assert not torch.equal(l0[0], l0[-1])  # it trained
    for a, b in zip(g0 + l0, g1 + l1):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_one_graph_gcn_normalises_once_and_refuses_a_directed_adjacency(tuned, monkeypatch):
    import torch_geometric.nn.conv.gcn_conv as gcn_conv
    from torch_geometric.utils import to_torch_csr_tensor

    calls = []
    norm = gcn_conv.gcn_norm
    monkeypatch.setattr(gcn_conv, "gcn_norm", lambda *a, **k: calls.append(1) or norm(*a, **k))
    ei, x = _graph()
    model = tuned.tuned_model("GCN-tuned", 6, 3, _hp(layers=3), one_graph=True)
    adj = tuned.gcn_adjacency(ei, 40)
    for _ in range(3):
        model(x, adj).sum().backward()
    assert len(calls) == 3  # once per layer, not per call
    directed = to_torch_csr_tensor(torch.tensor([[0, 1, 2], [1, 2, 0]]), size=(40, 40))
    with pytest.raises(ValueError, match="not symmetric"):
        tuned.tuned_model("GCN-tuned", 6, 3, _hp(), one_graph=True)(x, directed)


def test_gat_tuned_layers_follow_the_published_shape(tuned):
    """GAT-tuned: GATConv without bias or its own self-loops, ``heads`` heads of hidden // heads, LayerNorm."""
    from torch_geometric.nn import GATConv

    model = tuned.tuned_model("GAT-tuned", 6, 3, _hp(heads=2))
    assert all(isinstance(c, GATConv) and c.bias is None and not c.add_self_loops and c.heads == 2
               and c.out_channels == 4 for c in model.convs)
    assert all(isinstance(m, torch.nn.LayerNorm) for m in model.norms) and model.skips is None
    ei, x = _graph()
    assert model(x, tuned.tuned_edges(ei, 40)).shape == (40, 3)


def test_settings_are_the_published_ones_and_other_sets_are_refused(tuned):
    gcn, gat = tuned.tuned_hp("Computers", "GCN-tuned"), tuned.tuned_hp("Computers", "GAT-tuned")
    assert (gcn["hidden"], gcn["layers"], gcn["dropout"], gcn["lr"], gcn["weight_decay"]) == (512, 3, 0.5, 1e-3, 5e-5)
    assert (gat["hidden"], gat["layers"], gat["dropout"]) == (64, 2, 0.5) and gcn["norm"] == gat["norm"] == "layer"
    with pytest.raises(ValueError, match="Computers"):
        tuned.tuned_hp("Cora", "GCN-tuned")


@pytest.mark.parametrize("kind", ["GCN-tuned", "GAT-tuned"])
def test_tuned_peer_runs_under_xmasks_selection(tuned, tf, kind, monkeypatch):
    """A tiny graph named Computers (small settings patched in): a run of the peer through run_node_peer
    scores every part and counts the authors' width in its parameters."""
    from torch_geometric.data import Data

    ei, x = _graph(n=30)
    y = torch.arange(30) % 3
    masks = [torch.arange(30) % 3 == i for i in range(3)]
    data = Data(x=x, edge_index=ei, y=y, num_nodes=30, train_mask=masks[0], val_mask=masks[1], test_mask=masks[2])
    graphs = types.SimpleNamespace(spec=types.SimpleNamespace(name="Computers", split="public", metric="accuracy"),
                                   dataset=[data])
    monkeypatch.setitem(tf.tuned_setup.__globals__["TUNED_HP"]["Computers"], kind, _hp())  # the module tf reads
    res = tf.run_node_peer(graphs, kind, 0, epochs=5, patience=10)
    assert res["epochs_run"] == 5 and all(0.0 <= res["metrics"][p] <= 1.0 for p in ("train", "val", "test"))
    first = 6 * 8 + 8 if kind == "GCN-tuned" else 6 * 8 + 2 * 8  # GAT: two attention vectors, no bias
    assert res["params"] == first + 2 * 8 + (8 * 8 + 8 if kind == "GCN-tuned" else 8 * 8 + 2 * 8) + 2 * 8 + 8 * 3 + 3
