"""GraphGPS layers (``model.arch: gps``): the local GINE sub-layer against numpy on a hand-worked graph, the
padded and packed layouts against each other (outputs and gradients), the edge encoders, GINConv on edges
without attributes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.model.graphs import PATH_TRIANGLE, TWO_PARTS, adjacency, padded
from xmask_cli.errors import ConfigError
from xmask_cli.model.batches import DenseBatch
from xmask_cli.model.gps import EdgeEncoder, GpsBlock, LocalEdges, LocalMessage, carries_attributes, padded_edges
from xmask_cli.model.network import ModelConfig, XMaskNet


def edge_extras(graphs: list[np.ndarray], columns: int = 3, seed: int = 0,
                vocab: tuple[int, ...] = (5, 6, 2)) -> dict[str, torch.Tensor]:
    """``edge_attr [B, N, N, C]`` (random codes below ``vocab``, the same both ways) and ``edge_mask`` of
    0/1 adjacencies, as the stream pads the cache's edge section."""
    rng = np.random.default_rng(seed)
    n = max(len(a) for a in graphs)
    attr = np.zeros((len(graphs), n, n, columns), dtype=np.int64)
    joined = np.zeros((len(graphs), n, n), dtype=bool)
    for b, a in enumerate(graphs):
        for i, j in zip(*np.nonzero(np.triu(a, 1))):
            attr[b, i, j] = attr[b, j, i] = [rng.integers(0, v) for v in vocab[:columns]]
            joined[b, i, j] = joined[b, j, i] = True
    return {"edge_attr": torch.from_numpy(attr), "edge_mask": torch.from_numpy(joined)}


def test_the_local_sublayer_is_gine_on_a_hand_worked_graph() -> None:
    """GINE on a 4-node graph: ``MLP(x_i + Σ_{j ~ i} ReLU(x_j + enc(e_ij)))`` with the layer's own weights,
    summed in numpy over each node's real neighbours."""
    torch.manual_seed(0)
    a = adjacency(4, [(0, 1), (1, 2), (1, 3)])  # a star on node 1
    extras = edge_extras([a], columns=2, vocab=(3, 4))
    edges = padded_edges(extras)
    layer = LocalMessage(5, 6, EdgeEncoder("index", (3, 4), 5)).double()
    x = torch.randn(4, 5, dtype=torch.float64)
    with torch.no_grad():
        out = layer(x, edges).numpy()
        table = layer.edges.inner.weight.numpy()  # type: ignore[union-attr]
        lin1, lin2 = layer.conv.nn[0], layer.conv.nn[2]
        w1, b1, w2, b2 = (t.numpy() for t in (lin1.weight, lin1.bias, lin2.weight, lin2.bias))
    xs, attr = x.numpy(), extras["edge_attr"][0].numpy()
    expected = np.zeros((4, 6))
    for i in range(4):
        agg = xs[i].copy()  # (1 + eps) x_i, eps = 0
        for j in np.nonzero(a[i])[0]:
            enc = table[attr[i, j, 0]] + table[3 + attr[i, j, 1]]  # the second column's rows start at 3
            agg += np.maximum(xs[j] + enc, 0.0)
        expected[i] = np.maximum(agg @ w1.T + b1, 0.0) @ w2.T + b2
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-12)
    assert len(edges.index[0]) == 6  # three undirected edges, each way


def test_edges_without_attributes_take_ginconv() -> None:
    from torch_geometric.nn import GINConv

    assert not carries_attributes("index", (1,)) and not carries_attributes("index", ())
    assert carries_attributes("index", (1, 3)) and carries_attributes("linear", (1,))
    cfg = ModelConfig(in_dim=5, out_dim=2, hidden=8, heads=2, layers=1, task="graph", arch="gps",
                      edge_encoding="index", edge_dims=(1,))
    block = XMaskNet(cfg).blocks[0]
    assert isinstance(block, GpsBlock) and isinstance(block.local.conv, GINConv) and block.local.edges is None
    x = torch.randn(4, 8, dtype=torch.float64)  # the block's input: the encoder's width
    a = adjacency(4, [(0, 1), (1, 2), (1, 3)])
    local = block.local.double()
    with torch.no_grad():
        out = local(x, padded_edges(edge_extras([a], columns=1, vocab=(1,)))).numpy()
        mlp = local.conv.nn
        expected = mlp(x + torch.from_numpy(a) @ x).numpy()  # GIN: MLP(x_i + Σ_j x_j)
    np.testing.assert_allclose(out, expected, rtol=1e-10)


def test_linear_edge_attributes_are_mapped() -> None:
    enc = EdgeEncoder("linear", (4,), 3)
    attr = torch.eye(4)[[0, 2]]
    assert isinstance(enc.inner, torch.nn.Linear)
    np.testing.assert_allclose(enc(attr).detach().numpy(), enc.inner(attr).detach().numpy())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_edge_attributes_follow_the_model_dtype(dtype) -> None:
    enc = EdgeEncoder("linear", (4,), 3).to(dtype)
    attr = torch.tensor([[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1]], dtype=torch.float32)  # as the cache stores them
    assert isinstance(enc.inner, torch.nn.Linear)
    w, b = enc.inner.weight.detach().double().numpy(), enc.inner.bias.detach().double().numpy()
    out = enc(attr)
    assert out.dtype == dtype
    np.testing.assert_allclose(out.detach().double().numpy(), attr.double().numpy() @ w.T + b, rtol=1e-6)


def test_bond_encoder_beside_the_atom_encoder_and_its_vocabulary() -> None:
    from ogb.graphproppred.mol_encoder import BondEncoder

    cfg = ModelConfig(in_dim=9, out_dim=1, hidden=8, heads=2, layers=2, task="graph", arch="gps", encoder="atom",
                      edge_encoding="index", edge_dims=(5, 6, 2))
    net = XMaskNet(cfg)
    encoders = [b.local.edges for b in net.blocks]  # type: ignore[attr-defined]
    assert all(isinstance(e.inner, BondEncoder) for e in encoders)
    assert encoders[0] is not encoders[1]  # one per layer
    with pytest.raises(ValueError, match="bond encoder"):
        EdgeEncoder("index", (5, 7, 2), 8, bond=True)


def _pair(layout_kw: dict, **kw) -> tuple[XMaskNet, XMaskNet]:
    torch.manual_seed(0)
    cfg = ModelConfig(in_dim=5, out_dim=3, hidden=8, heads=2, head_powers=(1, 2), layers=2, task="graph", arch="gps",
                      edge_encoding="index", edge_dims=(5, 6, 2), **{**layout_kw, **kw})
    packed = XMaskNet(cfg).double()
    padded_model = XMaskNet(ModelConfig(**{**cfg.to_dict(), "graph_layout": "padded"})).double()
    padded_model.load_state_dict(packed.state_dict())
    return packed, padded_model


@pytest.mark.parametrize("norm", ["post", "pre", "none"])
def test_padded_and_packed_agree_in_outputs_and_gradients(norm: str) -> None:
    """Graphs of 6, 8, 4 and 3 nodes in one batch (packing moves every row of the later graphs): the same
    outputs and the same gradients for every parameter, the edge encoders' included."""
    packed_model, padded_model = _pair({}, norm=norm, dropout=0.0, readout="mean")
    graphs = [PATH_TRIANGLE, TWO_PARTS, PATH_TRIANGLE[:4, :4], adjacency(3, [(0, 1), (1, 2)])]
    powers, mask = padded(graphs, 2)
    extras = edge_extras(graphs)
    x = torch.randn(*mask.shape, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
    outs, grads = [], []
    for model in (packed_model, padded_model):
        out = model(DenseBatch(x, powers, mask, extras=extras))
        (out * torch.arange(1.0, 4.0, dtype=torch.float64)).sum().backward()
        outs.append(out.detach().numpy())
        grads.append({k: p.grad.numpy().copy() for k, p in model.named_parameters() if p.grad is not None})
    assert packed_model.packs() and not padded_model.packs()
    assert float(np.std(outs[1])) > 1e-3
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-9, atol=1e-10)
    assert grads[0].keys() == grads[1].keys() and any("local.edges" in k for k in grads[0])
    for k in grads[0]:
        np.testing.assert_allclose(grads[0][k], grads[1][k], rtol=1e-8, atol=1e-10, err_msg=k)


def test_padded_and_packed_draw_the_same_dropout() -> None:
    """In training, with dropout on every sub-layer, the two layouts draw the same masks (same seed)."""
    packed_model, padded_model = _pair({}, dropout=0.3)
    graphs = [TWO_PARTS, PATH_TRIANGLE, adjacency(3, [(0, 1), (1, 2)])]
    powers, mask = padded(graphs, 2)
    extras = edge_extras(graphs, seed=3)
    x = torch.randn(*mask.shape, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    outs = []
    for model in (packed_model, padded_model):
        model.train()
        torch.manual_seed(7)
        outs.append(model(DenseBatch(x, powers, mask, extras=extras)).detach().numpy())
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-9, atol=1e-10)


def test_the_local_sublayer_sees_only_real_edges() -> None:
    """Changing an edge's attributes moves only its own graph's output; a graph's output does not depend on
    what else shares its batch."""
    packed_model, _ = _pair({}, dropout=0.0)
    packed_model.eval()
    graphs = [PATH_TRIANGLE, TWO_PARTS]
    powers, mask = padded(graphs, 2)
    extras = edge_extras(graphs)
    x = torch.randn(*mask.shape, 5, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        both = packed_model(DenseBatch(x, powers, mask, extras=extras))
        moved = {k: v.clone() for k, v in extras.items()}
        moved["edge_attr"][1, 0, 1] = moved["edge_attr"][1, 1, 0] = torch.tensor([4, 5, 1])
        after = packed_model(DenseBatch(x, powers, mask, extras=moved))
        alone_p, alone_m = padded(graphs[:1], 2)
        n = alone_m.size(1)
        alone_x = {k: v[:1, :n, :n] for k, v in extras.items()}
        alone = packed_model(DenseBatch(x[:1, :n], alone_p, alone_m, extras=alone_x))
    np.testing.assert_allclose(after[0].numpy(), both[0].numpy(), rtol=1e-12)
    assert not np.allclose(after[1].numpy(), both[1].numpy())
    np.testing.assert_allclose(alone[0].numpy(), both[0].numpy(), rtol=1e-9, atol=1e-12)


def test_packed_edges_move_with_the_rows() -> None:
    """:meth:`LocalEdges.packed` maps each padded row to its packed position."""
    from xmask_cli.model.packing import pack_graphs

    graphs = [PATH_TRIANGLE[:3, :3], TWO_PARTS]
    _, mask = padded(graphs, 1)
    packed = pack_graphs(mask)
    edges = padded_edges(edge_extras(graphs))
    moved = edges.packed(packed)
    rows = packed.rows.numpy()
    np.testing.assert_array_equal(rows[moved.index.numpy()], edges.index.numpy())


def test_a_batch_without_edges_and_the_sparse_path_are_refused() -> None:
    model, _ = _pair({})
    powers, mask = padded([PATH_TRIANGLE], 2)
    x = torch.randn(*mask.shape, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="edge_attr"):
        model(DenseBatch(x, powers, mask))
    with pytest.raises(ValueError, match="gps block"):
        model.blocks[0](x[0], None, edge_index=torch.zeros(2, 0, dtype=torch.long))
    assert isinstance(padded_edges(edge_extras([PATH_TRIANGLE])), LocalEdges)


@pytest.mark.parametrize("task", ["node", "link", "image"])
def test_gps_is_refused_beyond_the_graph_level(task: str) -> None:
    with pytest.raises(ConfigError, match="model.arch=gps .* graph level|image datasets take model.arch=vit"):
        ModelConfig(in_dim=5, out_dim=2, hidden=8, heads=2, task=task, arch="gps")
