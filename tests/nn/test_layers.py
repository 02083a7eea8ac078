"""The public XLogSMaskAttention / XLogSMaskBlock on a user's Data equal the model's own layers."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data

from tests.model.graphs import norm_powers
from xmask_cli.errors import UsageError
from xmask_cli.model.attention.path import full_graph_attention
from xmask_cli.model.logsmask import DenseStructure
from xmask_cli.model.model_config import ModelConfig
from xmask_cli.model.network import XMaskNet
from xmask_cli.nn import XLogSMaskAttention, XLogSMaskBlock
from xmask_cli.transforms import AddLogSMask

HIDDEN, HEADS, FEATURES = 16, 4, 5


def _graph(n: int, m: int, seed: int) -> Data:
    """A random graph with features (a user's ``Data``), its X-LogSMask pairs added."""
    g = torch.Generator().manual_seed(seed)
    edges = torch.randint(0, n, (2, m), generator=g)
    return AddLogSMask(k=HEADS)(Data(x=torch.randn(n, FEATURES, generator=g), edge_index=edges, num_nodes=n))


def _dense_powers(data: Data) -> torch.Tensor:
    """``[K, n, n]`` Â^1..Â^K of ``data`` by brute force (numpy), independent of the transform."""
    n = data.num_nodes
    a = np.zeros((n, n))
    for u, v in data.edge_index.T.tolist():
        if u != v:
            a[u, v] = a[v, u] = 1.0
    return torch.from_numpy(norm_powers(a, HEADS)).float()


@pytest.fixture(scope="module")
def model() -> XMaskNet:
    """A one-layer node model whose q·k spread over several units (weights scaled up, as after training)."""
    torch.manual_seed(0)
    net = XMaskNet(ModelConfig(in_dim=FEATURES, out_dim=3, hidden=HIDDEN, heads=HEADS, layers=1, dropout=0.0,
                               head_powers=[1, 2, 0, 4], task="node")).eval()
    with torch.no_grad():
        for lin in (net.blocks[0].attn.q, net.blocks[0].attn.k):
            lin.weight.mul_(3.0)
    return net


@pytest.mark.parametrize("attention", ["dense", "sparse", "auto"])
@torch.no_grad()
def test_block_equals_the_models_layer(model, attention):
    data = _graph(40, 70, seed=1)
    want = model.encode_dense(data.x[None], _dense_powers(data)[None])[0]  # the whole model, dense path
    block = XLogSMaskBlock(HIDDEN, HIDDEN, HEADS, [1, 2, 0, 4], attention=attention).eval()
    block.layer.load_state_dict(model.blocks[0].state_dict())
    got = block(model.encoder(data.x), data.logsmask_index, data.logsmask_values)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (want - model.encoder(data.x)).abs().max() > 0.1  # the block does change its input


@pytest.mark.parametrize("attention", ["dense", "sparse"])
@torch.no_grad()
def test_attention_equals_the_models_attention(model, attention):
    data = _graph(30, 40, seed=2)
    h = model.encoder(data.x)
    powers = _dense_powers(data)[None]
    mask = torch.ones(1, data.num_nodes, dtype=torch.bool)
    inner = model.blocks[0].attn
    want = inner(h[None], model.bias(DenseStructure(powers=powers, mask=mask)), mask)[0]
    attn = XLogSMaskAttention(HIDDEN, HIDDEN, HEADS, [1, 2, 0, 4], attention=attention).eval()
    attn.layer.load_state_dict(inner.state_dict())
    torch.testing.assert_close(attn(h, data.logsmask_index, data.logsmask_values), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("head_powers", [(1,), (1, 0)])  # (1, 0): a plain head spans its own graph only
@pytest.mark.parametrize("attention", ["dense", "sparse"])
@torch.no_grad()
def test_a_batch_equals_its_graphs_one_by_one(attention, head_powers):
    graphs = [_graph(9, 12, seed=3), _graph(4, 3, seed=4), _graph(13, 20, seed=5)]
    batch = Batch.from_data_list(graphs)
    torch.manual_seed(0)
    block = XLogSMaskBlock(FEATURES + 3, FEATURES + 3, len(head_powers), head_powers=list(head_powers), attention=attention).eval()
    x = torch.nn.functional.pad(batch.x, (0, 3))
    got = block(x, batch.logsmask_index, batch.logsmask_values, batch.batch)
    want = torch.cat([block(torch.nn.functional.pad(g.x, (0, 3)), g.logsmask_index, g.logsmask_values) for g in graphs])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_auto_takes_the_path_a_full_graph_run_takes():
    attn = XLogSMaskAttention(8, 8, 2, dense_max_nodes=100)
    for n, pairs, device in [(50, 2000, "cpu"), (50, 100, "cpu"), (150, 20000, "cpu"), (50, 100, "cuda")]:
        assert attn.path(n, pairs, device) == full_graph_attention("auto", n, pairs, device, 100)
    # The literal dense formula (log(eps) outside the support) has no sparse path, as in the CLI.
    eps = XLogSMaskAttention(8, 8, 2, outside_support="eps", attention="sparse")
    data = _graph(6, 6, seed=6)
    with pytest.raises(UsageError, match="^attention: .*outside_support=eps"):
        eps(torch.randn(6, 8), data.logsmask_index, data.logsmask_values)
    with pytest.raises(UsageError, match="^attention: expected one of 'auto', 'dense', 'sparse'; got 'fast'"):
        XLogSMaskAttention(8, 8, 2, attention="fast")


def _brute_attention(attn: XLogSMaskAttention, x: torch.Tensor, powers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(alpha [H, n, n], out [n, out_channels])`` of a public attention by float64 numpy, from its weights.

    Head h: logits ``(q_i·k_j + log Â^{k_h}_ij) / sqrt(d_h)`` on the support of ``Â^{k_h}`` (``-inf``
    elsewhere; eps 1e-30 is below float64's resolution next to ``Â`` entries), over every node for a
    plain head; combine ``concat`` joins the heads, ``mean`` averages them.
    """
    inner = attn.layer
    w = {name: (getattr(inner, name).weight.detach().double().numpy(), getattr(inner, name).bias.detach().double().numpy())
         for name in ("q", "k", "v")}
    xs = x.detach().double().numpy()
    q, k, v = ((xs @ w[m][0].T + w[m][1]).reshape(len(xs), attn.heads, -1) for m in ("q", "k", "v"))
    d = q.shape[-1]
    alphas, outs = [], []
    for h, power in enumerate(attn.head_powers):
        logits = q[:, h] @ k[:, h].T
        if power:
            a = powers[power - 1]
            with np.errstate(divide="ignore"):
                logits = np.where(a > 0, logits + np.log(np.where(a > 0, a, 1.0)), -np.inf)
        logits = logits / np.sqrt(d)
        e = np.exp(logits - logits.max(1, keepdims=True))
        alpha = e / e.sum(1, keepdims=True)
        alphas.append(alpha)
        outs.append(alpha @ v[:, h])
    out = np.mean(outs, 0) if attn.layer.combine == "mean" else np.concatenate(outs, 1)
    return np.stack(alphas), out


@pytest.mark.parametrize("attention", ["dense", "sparse"])
@torch.no_grad()
def test_attention_weights_are_returned_as_gatconv_returns_them(attention):
    data = _graph(12, 18, seed=7)
    torch.manual_seed(3)
    attn = XLogSMaskAttention(FEATURES, 6, heads=3, head_powers=[1, 0, 3], combine="concat",
                              attention=attention).eval()
    for p in attn.parameters():
        p.mul_(3.0)  # weights as after training: q·k spread over several units
    out, (pairs, alpha) = attn(data.x, data.logsmask_index, data.logsmask_values, return_attention_weights=True)
    assert pairs is not None and torch.equal(pairs, data.logsmask_index) and alpha.shape == (pairs.size(1), 3)
    want_alpha, want_out = _brute_attention(attn, data.x, _dense_powers(data).double().numpy())
    # Head h of pair (i, j) is head h's weight of key j for query i (heads from 0).
    np.testing.assert_allclose(alpha.numpy(), want_alpha[:, pairs[0], pairs[1]].T, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.numpy(), want_out, rtol=1e-4, atol=1e-5)
    # Heads with a mask put all their weight on the pairs; the plain head 1 also on nodes beyond them.
    sums = torch.zeros(12, 3).index_add_(0, pairs[0], alpha)
    torch.testing.assert_close(sums[:, [0, 2]], torch.ones(12, 2))
    assert (sums[:, 1] < 1 - 1e-3).any()
    # The same output without (on the sparse path another kernel: equal to rounding).
    torch.testing.assert_close(attn(data.x, data.logsmask_index, data.logsmask_values), out, rtol=1e-5, atol=1e-6)


class _UsersNet(torch.nn.Module):
    """A user's two-layer node classifier on X-LogSMask attention, called as PyG's explainers call a model."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = XLogSMaskAttention(FEATURES, 8, heads=2, head_powers=[1, 2], combine="concat")
        self.out = XLogSMaskAttention(8, 3, heads=2, head_powers=[2, 1], combine="mean")

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, logsmask_values: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.elu(self.hidden(x, edge_index, logsmask_values))
        return self.out(h, edge_index, logsmask_values)


def test_pygs_attention_explainer_reads_the_attention_weights():
    from torch_geometric.explain import Explainer
    from torch_geometric.explain.algorithm import AttentionExplainer

    data = _graph(14, 16, seed=8)
    torch.manual_seed(4)
    net = _UsersNet().eval()
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(3.0)
    explainer = Explainer(net, AttentionExplainer(reduce="max"), explanation_type="model", edge_mask_type="object",
                          model_config={"mode": "multiclass_classification", "task_level": "node",
                                        "return_type": "raw"})
    node = 3
    explanation = explainer(data.x, data.logsmask_index, logsmask_values=data.logsmask_values, index=node)
    # Independently: each layer's weights by numpy, the max over heads and layers, then only the pairs of
    # the two-hop ball around the node (two attention layers), as AttentionExplainer keeps for a node.
    powers = _dense_powers(data).double().numpy()
    pairs = data.logsmask_index
    a1, h = _brute_attention(net.hidden, data.x, powers)
    h = torch.nn.functional.elu(torch.from_numpy(h)).float()
    a2, _ = _brute_attention(net.out, h, powers)
    per_pair = np.maximum(a1.max(0), a2.max(0))[pairs[0], pairs[1]]
    ball = {node}
    for _ in range(2):
        ball |= {int(j) for i, j in pairs.T.tolist() if i in ball}
    inside = np.array([i in ball and j in ball for i, j in pairs.T.tolist()])
    want = np.where(inside, per_pair, 0.0)
    assert 0 < inside.sum() < len(inside)  # the ball is a real part of the graph
    np.testing.assert_allclose(explanation.edge_mask.numpy(), want, rtol=1e-4, atol=1e-6)
    # No hook left behind: a later forward computes no weights.
    assert not net.hidden._message_forward_hooks


@pytest.mark.parametrize("attention", ["dense", "sparse"])
@torch.no_grad()
def test_a_batchs_attention_weights_are_its_graphs_weights(attention):
    graphs = [_graph(9, 12, seed=3), _graph(4, 3, seed=4), _graph(13, 20, seed=5)]
    batch = Batch.from_data_list(graphs)
    torch.manual_seed(5)
    block = XLogSMaskBlock(FEATURES, FEATURES, 1, [2], attention=attention).eval()
    _, (pairs, alpha) = block(batch.x, batch.logsmask_index, batch.logsmask_values, batch.batch,
                              return_attention_weights=True)
    assert torch.equal(pairs, batch.logsmask_index)
    want = torch.cat([block(g.x, g.logsmask_index, g.logsmask_values, return_attention_weights=True)[1][1]
                      for g in graphs])
    torch.testing.assert_close(alpha, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.zeros(batch.num_nodes, 1).index_add_(0, pairs[0], alpha),
                               torch.ones(batch.num_nodes, 1))
