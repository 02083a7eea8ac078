"""The public XLogSMaskAttention / XLogSMaskBlock on a user's Data equal the model's own layers."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Batch, Data

from tests.model.graphs import norm_powers
from xmask_cli.errors import UsageError
from xmask_cli.model.attention_path import full_graph_attention
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
