"""XMaskNet against hand computations: readouts, padding, permutation, dense vs sparse, overfitting."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tests.model.graphs import PATH_TRIANGLE, TWO_PARTS, adjacency, disjoint_union, norm_powers, padded, union_pairs
from xmask_cli.engine.batching.stream import GraphBatch
from xmask_cli.model.batches import DenseBatch, SparseBatch
from xmask_cli.model.logsmask import DenseStructure, XLogSMaskBias
from xmask_cli.model.network import ModelConfig, XMaskNet

F_IN, HIDDEN, HEADS, OUT = 5, 16, 2, 3
READOUTS = ["sum", "mean", "max"]
TIGHT = dict(rtol=1e-10, atol=1e-12)


def _net(seed=0, **kw):
    cfg = dict(in_dim=F_IN, out_dim=OUT, hidden=HIDDEN, heads=HEADS, layers=2)
    cfg.update(kw)
    torch.manual_seed(seed)
    net = XMaskNet(ModelConfig(**cfg)).double().eval()
    # Non-trivial LayerNorm affine so a skipped or swapped norm shows.
    with torch.no_grad():
        for block in net.blocks:
            for ln in (block.norm1, block.norm2):
                ln.weight.uniform_(0.5, 1.5)
                ln.bias.uniform_(-0.5, 0.5)
    return net


def _x(shape, seed=1):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _pair_batch(seed=1):
    """PATH_TRIANGLE (6 nodes, padded to 8) and TWO_PARTS (8 nodes), padded rows zero."""
    powers, mask = padded([PATH_TRIANGLE, TWO_PARTS], HEADS)
    x = _x((2, 8, F_IN), seed)
    x[~mask] = 0.0
    return x, powers, mask


# ---------------------------------------------------------------- config


def test_config_defaults_and_validation():
    cfg = ModelConfig(in_dim=3, out_dim=2)
    assert (cfg.hidden, cfg.heads, cfg.layers, cfg.ffn_mult) == (64, 4, 2, 2)
    assert cfg.head_powers == (1, 2, 3, 4) and cfg.max_power == 4
    assert cfg.norm == "post" and cfg.mask_scale == "paper" and cfg.readout == "sum" and cfg.task == "graph"
    assert hash(cfg) == hash(ModelConfig(in_dim=3, out_dim=2, head_powers=[1, 2, 3, 4]))
    with pytest.raises(Exception):  # noqa: B017  (FrozenInstanceError or AttributeError: either says frozen)
        cfg.hidden = 8  # frozen
    for bad in (dict(hidden=10, heads=4), dict(norm="sandwich"), dict(mask_scale="x"), dict(readout="median"),
                dict(task="pairs"), dict(encoder="gin"), dict(head_powers=[1, 2]), dict(head_powers=[-1, 1, 2, 3]), dict(head_powers=[0, 0, 0, 0]), dict(eps=0.0),
                dict(layers=0)):
        with pytest.raises(ValueError):
            ModelConfig(in_dim=3, out_dim=2, **bad)


def test_shapes_and_shared_parameter_free_bias():
    net = _net(task="graph")
    x, powers, mask = _pair_batch()
    assert net.forward_dense(x, powers, mask).shape == (2, OUT)
    assert _net(task="node").forward_dense(x, powers, mask).shape == (2, 8, OUT)
    assert isinstance(net.bias, XLogSMaskBias) and len(list(net.bias.parameters())) == 0
    assert len(net.blocks) == 2
    assert _net(use_bias=False).bias is None


# ------------------------------------------------- independent composition


@pytest.mark.parametrize("readout", READOUTS)
@torch.no_grad()
def test_graph_forward_matches_manual_composition(readout):
    """Encoder -> blocks (bias built by hand) -> per-graph loop readout -> MLP by hand."""
    net = _net(readout=readout)
    x, powers, mask = _pair_batch()
    bias = XLogSMaskBias(HEADS)(DenseStructure(powers, mask))
    h = x @ net.encoder.weight.T + net.encoder.bias
    for block in net.blocks:
        h = block(h, bias, mask)
    pooled = []
    for b, n in enumerate(mask.sum(1).tolist()):
        real = h[b, :n]
        pooled.append({"sum": real.sum(0), "mean": real.mean(0), "max": real.max(0).values}[readout])
    pooled = torch.stack(pooled)
    lin1, lin2 = net.head[0], net.head[3]
    want = F.relu(pooled @ lin1.weight.T + lin1.bias) @ lin2.weight.T + lin2.bias
    torch.testing.assert_close(net.forward_dense(x, powers, mask), want, **TIGHT)


@pytest.mark.parametrize("readout", READOUTS)
@torch.no_grad()
def test_readout_dense_reads_real_rows_only(readout):
    """Called on its own (no upstream zeroing): junk in padded rows of ``h`` must not enter."""
    net = _net(readout=readout)
    _, _, mask = _pair_batch()
    h = _x((2, 8, HIDDEN), seed=7)
    h[0, 6:] = 1e6
    want = torch.stack([getattr(h[b, :n], readout)(0) if readout != "max" else h[b, :n].max(0).values
                        for b, n in enumerate(mask.sum(1).tolist())])
    torch.testing.assert_close(net.readout_dense(h, mask), want, **TIGHT)
    # Sparse readout, same rows via a batch vector.
    real = torch.cat([h[0, :6], h[1]])
    batch = torch.cat([torch.zeros(6), torch.ones(8)]).long()
    torch.testing.assert_close(net.readout_sparse(real, batch), want, **TIGHT)


# --------------------------------------------------------------- padding


@pytest.mark.parametrize("readout", READOUTS)
@torch.no_grad()
def test_graph_output_padding_invariance(readout):
    net = _net(readout=readout)
    x, powers, mask = _pair_batch()
    p_alone, m_alone = padded([PATH_TRIANGLE], HEADS)
    alone = net.forward_dense(x[:1, :6], p_alone, m_alone)
    batched = net.forward_dense(x, powers, mask)
    torch.testing.assert_close(batched[:1], alone, **TIGHT)


@torch.no_grad()
def test_node_output_padding_invariance():
    net = _net(task="node")
    x, powers, mask = _pair_batch()
    p_alone, m_alone = padded([PATH_TRIANGLE], HEADS)
    alone = net.forward_dense(x[:1, :6], p_alone, m_alone)
    batched = net.forward_dense(x, powers, mask)
    torch.testing.assert_close(batched[:1, :6], alone, **TIGHT)
    assert (batched[0, 6:] == 0).all()


@pytest.mark.parametrize("task,readout", [("graph", r) for r in READOUTS] + [("node", "sum")])
@pytest.mark.parametrize("junk", [1e6, -1e6, float("nan"), float("inf")])
@torch.no_grad()
def test_junk_in_padded_rows_changes_nothing(task, readout, junk):
    net = _net(task=task, readout=readout)
    x, powers, mask = _pair_batch()
    clean = net.forward_dense(x, powers, mask)
    x[0, 6:] = junk
    dirty = net.forward_dense(x, powers, mask)
    torch.testing.assert_close(dirty, clean, rtol=0, atol=0)
    assert torch.isfinite(dirty).all()


def test_padded_inputs_get_no_gradient():
    net = _net(dropout=0.1, attn_dropout=0.1).train()
    x, powers, mask = _pair_batch()
    x.requires_grad_()
    net.forward_dense(x, powers, mask).square().sum().backward()
    assert (x.grad[0, 6:] == 0).all() and torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


# ---------------------------------------------------------- permutations

# Also moves padded slots to the front/middle: the mask need not be trailing.
PERM = torch.tensor([5, 2, 7, 0, 3, 6, 1, 4])


def _permuted(x, powers, mask):
    return x[:, PERM], powers[:, :, PERM][:, :, :, PERM], mask[:, PERM]


@pytest.mark.parametrize("readout", READOUTS)
@pytest.mark.parametrize("norm", ["post", "pre"])
@torch.no_grad()
def test_graph_output_permutation_invariance(readout, norm):
    net = _net(readout=readout, norm=norm)
    x, powers, mask = _pair_batch()
    torch.testing.assert_close(net.forward_dense(*_permuted(x, powers, mask)), net.forward_dense(x, powers, mask),
                               **TIGHT)


@pytest.mark.parametrize("norm", ["post", "pre"])
@torch.no_grad()
def test_node_output_permutation_equivariance(norm):
    net = _net(task="node", norm=norm)
    x, powers, mask = _pair_batch()
    out = net.forward_dense(x, powers, mask)
    torch.testing.assert_close(net.forward_dense(*_permuted(x, powers, mask)), out[:, PERM], **TIGHT)

    # Sparse path: relabel nodes; pair i->j becomes inv[i]->inv[j].
    inv = torch.empty_like(PERM)
    inv[PERM] = torch.arange(8)
    edge_index, values = union_pairs(norm_powers(TWO_PARTS, HEADS))
    out = net.forward_sparse(x[1], edge_index, values)
    torch.testing.assert_close(net.forward_sparse(x[1, PERM], inv[edge_index], values), out[PERM], **TIGHT)


# ---------------------------------------------------------- dense vs sparse

# Dense attends over every real pair; pairs outside the union support of Â^1..Â^K
# get log(1e-30) ≈ -69. With mask_scale='none' that is added unscaled, so their
# weight is ~e^-69 relative (below float64 resolution): 1e-10 is a safe bound after
# two blocks and the head. (With 'paper' it is divided by sqrt(d_h) and leaks ~e^-20.)
DS_TOL = dict(rtol=0, atol=1e-10)


@pytest.mark.parametrize("norm", ["post", "pre"])
@torch.no_grad()
def test_dense_and_sparse_agree_node_task(norm):
    net = _net(task="node", mask_scale="none", norm=norm)
    x, powers, mask = _pair_batch()
    dense = net.forward_dense(x[:1, :6], powers[:1, :, :6, :6], mask[:1, :6])[0]
    edge_index, values = union_pairs(norm_powers(PATH_TRIANGLE, HEADS))
    assert edge_index.size(1) < 36  # the support really is sparse, else the test says nothing
    sparse = net.forward_sparse(x[0, :6], edge_index, values)
    torch.testing.assert_close(sparse, dense, **DS_TOL)


@pytest.mark.parametrize("readout", READOUTS)
@torch.no_grad()
def test_dense_and_sparse_agree_graph_task_with_batch_vector(readout):
    net = _net(task="graph", readout=readout, mask_scale="none")
    x, powers, mask = _pair_batch()
    dense = net.forward_dense(x, powers, mask)
    edge_index, values = disjoint_union([PATH_TRIANGLE, TWO_PARTS], HEADS)
    batch = torch.cat([torch.zeros(6), torch.ones(8)]).long()
    sparse = net.forward_sparse(torch.cat([x[0, :6], x[1]]), edge_index, values, batch=batch)
    assert sparse.shape == (2, OUT)
    torch.testing.assert_close(sparse, dense, **DS_TOL)
    # No batch vector: the union read out as one graph.
    one = net.forward_sparse(x[1], *union_pairs(norm_powers(TWO_PARTS, HEADS)))
    torch.testing.assert_close(one, dense[1:], **DS_TOL)


# ------------------------------------------------------------- ablation


@pytest.mark.parametrize("task", ["graph", "node"])
@torch.no_grad()
def test_use_bias_false_ignores_structure(task):
    x, powers, mask = _pair_batch()
    other = torch.rand(powers.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    plain = _net(task=task, use_bias=False)
    ref = plain.forward_dense(x, powers, mask)
    torch.testing.assert_close(plain.forward_dense(x, other, mask), ref, **TIGHT)
    torch.testing.assert_close(plain.forward_dense(x, None, mask), ref, **TIGHT)
    # Same weights with the bias on: structure must matter (else the above proves nothing).
    biased = _net(task=task, use_bias=True)
    assert (biased.forward_dense(x, powers, mask) - biased.forward_dense(x, other, mask)).abs().max() > 1e-4
    with pytest.raises(ValueError):
        biased.forward_dense(x, None, mask)


# ------------------------------------------------------------- wrappers


@torch.no_grad()
def test_forward_takes_typed_batches():
    net = _net(graph_layout="padded")  # forward(batch) is then forward_dense itself
    x, powers, mask = _pair_batch()
    gb = GraphBatch(x=x, mask=mask, powers=powers, y=torch.zeros(2), index=torch.arange(2))
    want = net.forward_dense(x, powers, mask)
    torch.testing.assert_close(net(gb.inputs()), want, rtol=0, atol=0)
    torch.testing.assert_close(net(DenseBatch(x=x, powers=powers, mask=mask)), want, rtol=0, atol=0)
    # The packed layout (the default) runs other kernels on the same batch: the same numbers to rounding.
    packed = _net(graph_layout="packed")
    torch.testing.assert_close(packed(gb.inputs()), want, **TIGHT)
    edge_index, values = disjoint_union([PATH_TRIANGLE, TWO_PARTS], HEADS)
    batch = torch.cat([torch.zeros(6), torch.ones(8)]).long()
    sparse = net(SparseBatch(x=torch.cat([x[0, :6], x[1]]), edge_index=edge_index, values=values, batch=batch))
    assert sparse.shape == (2, OUT)
    torch.testing.assert_close(sparse, net.forward_sparse(torch.cat([x[0, :6], x[1]]), edge_index, values, batch),
                               rtol=0, atol=0)
    # A mapping names no path: refused, not probed.
    with pytest.raises(TypeError, match="DenseBatch"):
        net({"x": x, "powers": powers, "mask": mask})


def test_float32_batch_runs():
    # GraphBatch carries float32 powers; the bias widens internally and must come back float32.
    torch.manual_seed(0)
    net = XMaskNet(ModelConfig(in_dim=F_IN, out_dim=OUT, hidden=HIDDEN, heads=HEADS)).eval()
    x, powers, mask = _pair_batch()
    out = net.forward_dense(x.float(), powers.float(), mask)
    assert out.dtype == torch.float32 and torch.isfinite(out).all()


# -------------------------------------------------------------- overfit


def _random_graphs(count, rng):
    graphs = []
    for _ in range(count):
        n = int(rng.integers(4, 9))
        edges = [(i, j) for i in range(n) for j in range(i + 1, n) if rng.random() < 0.4]
        graphs.append(adjacency(n, edges))
    return graphs


def test_tiny_overfit():
    # Speed is measured by benchmarks, never asserted here: a busy CI machine must not fail this.
    rng = np.random.default_rng(0)
    graphs = _random_graphs(8, rng)
    powers, mask = padded(graphs, HEADS)
    powers = powers.float()
    x = torch.from_numpy(rng.standard_normal((8, powers.size(-1), F_IN))).float()
    y = torch.from_numpy(rng.integers(0, 2, 8)).long()
    torch.manual_seed(0)
    net = XMaskNet(ModelConfig(in_dim=F_IN, out_dim=2, hidden=32, heads=HEADS, readout="mean"))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    net.train()
    for _ in range(150):
        opt.zero_grad()
        F.cross_entropy(net.forward_dense(x, powers, mask), y).backward()
        opt.step()
    net.eval()
    with torch.no_grad():
        acc = (net.forward_dense(x, powers, mask).argmax(-1) == y).float().mean().item()
    assert acc == 1.0


def test_pair_head_is_symmetric_and_reads_both_ends():
    torch.manual_seed(0)
    model = XMaskNet(ModelConfig(in_dim=3, out_dim=2, hidden=8, heads=2, task="edge")).eval()
    h = torch.randn(5, 8)
    pairs = torch.tensor([[0, 1, 3], [2, 4, 3]])
    out = model.score_pairs(h, pairs)
    assert out.shape == (3, 2)
    torch.testing.assert_close(out, model.score_pairs(h, pairs.flip(0)))
    # By hand: the head MLP applied to [h_u * h_v, h_u + h_v].
    hu, hv = h[pairs[0]], h[pairs[1]]
    torch.testing.assert_close(out, model.head(torch.cat([hu * hv, hu + hv], -1)))
    with pytest.raises(ValueError, match="score_pairs"):
        model.forward_sparse(torch.randn(5, 3), torch.tensor([[0], [1]]), torch.ones(1, 2))


def test_atom_encoder_embeds_integer_features_per_node():
    from ogb.graphproppred.mol_encoder import AtomEncoder

    torch.manual_seed(0)
    model = XMaskNet(ModelConfig(in_dim=9, out_dim=2, hidden=8, heads=2, encoder="atom"))
    x = torch.randint(0, 2, (2, 4, 9))
    emb = model.encoder(x.float())
    assert emb.shape == (2, 4, 8)
    assert isinstance(model.encoder.atom, AtomEncoder)
    # The same as OGB's encoder on the flattened nodes (sum of one embedding per feature column).
    torch.testing.assert_close(emb.view(-1, 8), model.encoder.atom(x.view(-1, 9)))


def test_atom_encoder_adds_a_linear_map_of_the_structural_columns():
    """model.node_struct with OGB atoms: the last struct_dim columns are floats mapped linearly, added to the atom sum."""
    torch.manual_seed(0)
    model = XMaskNet(ModelConfig(in_dim=9 + 3, struct_dim=3, out_dim=2, hidden=8, heads=2, encoder="atom"))
    atoms = torch.randint(0, 2, (2, 4, 9))
    struct = torch.rand(2, 4, 3)
    emb = model.encoder(torch.cat([atoms.float(), struct], -1))
    lin = model.encoder.struct
    expect = model.encoder.atom(atoms.view(-1, 9)).view(2, 4, 8) + struct @ lin.weight.T + lin.bias
    torch.testing.assert_close(emb, expect)
    # The structural columns are read as floats, not truncated to atom ids.
    emb2 = model.encoder(torch.cat([atoms.float(), struct * 0.5], -1))
    assert not torch.allclose(emb, emb2)
    with pytest.raises(ValueError, match="struct_dim"):
        ModelConfig(in_dim=3, struct_dim=3, out_dim=2)


def test_dense_mask_is_built_once_and_memoised_safely():
    """Repeated forwards on the same powers reuse the mask; a changed input never reads a stale one."""
    torch.manual_seed(0)
    n, k = 6, 4
    model = XMaskNet(ModelConfig(in_dim=3, out_dim=2, hidden=8, heads=4, layers=2, task="node", dropout=0.0)).eval()
    x = torch.randn(1, n, 3)
    a = torch.rand(n, n)
    powers = torch.stack([torch.linalg.matrix_power(a, p) for p in range(1, k + 1)]).unsqueeze(0)
    calls = []
    original = model.bias.forward
    model.bias.forward = lambda batch: (calls.append(1), original(batch))[1]  # count bias builds
    out1 = model.forward_dense(x, powers)
    out2 = model.forward_dense(x, powers)
    assert len(calls) == 1 and torch.equal(out1, out2)  # one build for both forwards, and all layers
    powers.mul_(0.5)  # in place: the version changes, the mask must be rebuilt
    out3 = model.forward_dense(x, powers)
    assert len(calls) == 2
    fresh = XMaskNet(model.cfg).eval()
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(out3, fresh.forward_dense(x, powers))
    mask = torch.tensor([[True] * (n - 1) + [False]])
    model.forward_dense(x, powers, mask)  # another padding: rebuilt
    assert len(calls) == 3
