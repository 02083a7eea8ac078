import math

import numpy as np
import pytest
import torch

from tests.model.graphs import EPS, PATH_TRIANGLE, TWO_PARTS, disjoint_union, norm_powers, padded, union_pairs
from xmask_cli.model.attention.structural import StructuralAttention
from xmask_cli.model.logsmask import DenseStructure, SparseStructure, XLogSMaskBias

DIM, HEADS = 16, 2  # d_h = 8


@pytest.fixture(autouse=True)
def _no_grad():
    # Comparisons only; numpy conversion needs tensors without grad.
    with torch.no_grad():
        yield


def _layer(mask_scale="paper", seed=0):
    torch.manual_seed(seed)
    return StructuralAttention(DIM, HEADS, mask_scale=mask_scale).double().eval()


def _x(n, seed=1, batch=None):
    g = torch.Generator().manual_seed(seed)
    shape = (n, DIM) if batch is None else (batch, n, DIM)
    return torch.randn(shape, generator=g, dtype=torch.float64)


def _np(linear):
    return linear.weight.detach().numpy(), linear.bias.detach().numpy()


@pytest.mark.parametrize("outside", ["hard", "eps"])
@pytest.mark.parametrize("mask_scale", ["paper", "none"])
def test_dense_matches_numpy_formula(mask_scale, outside):
    """softmax((q·k + M) / sqrt(d_h)) per head, Â^k by numpy matrix_power.

    ``M = log(Â^k + eps)`` inside the support; outside it ``-inf`` ('hard') or ``log(eps)`` ('eps').
    """
    layer = _layer(mask_scale)
    a = PATH_TRIANGLE
    n = len(a)
    x = _x(n)
    powers, mask = padded([a], HEADS)
    bias = XLogSMaskBias(HEADS, outside_support=outside)(DenseStructure(powers, mask))
    out, terms = layer.forward_dense(x[None], bias, mask, return_terms=True)

    xn = x.numpy()
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = map(_np, (layer.q, layer.k, layer.v, layer.out))
    q = (xn @ wq.T + bq).reshape(n, HEADS, 8)
    k = (xn @ wk.T + bk).reshape(n, HEADS, 8)
    v = (xn @ wv.T + bv).reshape(n, HEADS, 8)
    a_k = norm_powers(a, HEADS)
    heads = []
    for h in range(HEADS):
        m = np.log(a_k[h] + EPS)  # head h (0-based) reads Â^(h+1)
        if outside == "hard":
            assert (a_k[h] == 0).any()  # the graph has pairs outside the support, so the two settings differ
            m = np.where(a_k[h] > 0, m, -np.inf)
        qk = q[:, h] @ k[:, h].T
        logits = (qk + m) / math.sqrt(8) if mask_scale == "paper" else qk / math.sqrt(8) + m
        w = np.exp(logits - logits.max(1, keepdims=True))
        w /= w.sum(1, keepdims=True)
        np.testing.assert_allclose(terms["attention"][0, h].numpy(), w, rtol=1e-10, atol=1e-13)
        heads.append(w @ v[:, h])
    want = np.concatenate(heads, 1) @ wo.T + bo
    np.testing.assert_allclose(out[0].detach().numpy(), want, rtol=1e-10, atol=1e-12)


def test_mask_scale_modes_differ():
    """The two conventions must give different attention (else the switch does nothing)."""
    powers, mask = padded([PATH_TRIANGLE], HEADS)
    bias = XLogSMaskBias(HEADS)(DenseStructure(powers, mask))
    x = _x(len(PATH_TRIANGLE))[None]
    a = _layer("paper").forward_dense(x, bias, mask, return_terms=True)[1]["attention"]
    b = _layer("none").forward_dense(x, bias, mask, return_terms=True)[1]["attention"]
    assert (a - b).abs().max() > 1e-3


@pytest.mark.parametrize("mask_scale", ["paper", "none"])
def test_dense_and_sparse_agree_on_union_support(mask_scale):
    """Under 'hard' a pair outside a head's support weighs exactly 0 on both paths: same numbers.

    (Before the switch the dense path gave such pairs log(eps)/sqrt(d_h) and the sparse path
    dropped them; now both drop them, so the tolerance is float64 round-off.)
    """
    layer = _layer(mask_scale)
    graphs = [PATH_TRIANGLE, TWO_PARTS]
    k = HEADS
    powers, mask = padded(graphs, k)
    x = _x(8, batch=2)
    x[0, 6:] = 1e3  # padding rows hold garbage that must not leak
    dense_bias = XLogSMaskBias(HEADS)(DenseStructure(powers, mask))
    out_d, t_d = layer.forward_dense(x, dense_bias, mask, return_terms=True)

    edge_index, values = disjoint_union(graphs, k)
    xs = torch.cat([x[0, :6], x[1]])
    sparse_bias = XLogSMaskBias(HEADS)(SparseStructure(edge_index, values))
    out_s, t_s = layer.forward_sparse(xs, edge_index, sparse_bias, return_terms=True)

    atol = 1e-12
    np.testing.assert_allclose(out_s[:6].detach(), out_d[0, :6].detach(), rtol=0, atol=atol)
    np.testing.assert_allclose(out_s[6:].detach(), out_d[1].detach(), rtol=0, atol=atol)
    # Same weights on the support pairs of graph 0.
    row, col = edge_index[:, edge_index[0] < 6]
    np.testing.assert_allclose(t_s["attention"][: row.numel()], t_d["attention"][0, :, row, col].T, rtol=0, atol=atol)
    # Outside the union support the dense weights are exactly 0 (no log(eps) leak).
    support = torch.zeros(6, 6, dtype=torch.bool)
    support[row, col] = True
    assert not support.all()
    assert t_d["attention"][0, :, :6, :6][:, ~support].abs().max() == 0
    # Head 1 reads Â^1: inside the union support but outside Â^1 its weight is 0 on both paths.
    only_k2 = (values[:, 0] == 0) & (edge_index[0] < 6)
    assert only_k2.any()
    assert t_s["attention"][only_k2, 0].abs().max() == 0


def _relabel(perm):
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(len(perm))
    return inv


def test_dense_permutation_equivariance():
    layer = _layer()
    powers, mask = padded([TWO_PARTS], HEADS)
    x = _x(8)[None]
    perm = torch.tensor([5, 2, 7, 0, 3, 6, 1, 4])  # new position p holds old node perm[p]
    bias = XLogSMaskBias(HEADS)
    out = layer.forward_dense(x, bias(DenseStructure(powers, mask)), mask)
    p_powers = powers[:, :, perm][:, :, :, perm]
    out_p = layer.forward_dense(x[:, perm], bias(DenseStructure(p_powers, mask)), mask)
    torch.testing.assert_close(out_p, out[:, perm], rtol=1e-12, atol=1e-12)
    # And the output is not trivially invariant (a real check of ordering).
    assert (out_p - out).abs().max() > 1e-3


def test_sparse_permutation_equivariance():
    layer = _layer()
    edge_index, values = union_pairs(norm_powers(TWO_PARTS, HEADS))
    x = _x(8)
    perm = torch.tensor([5, 2, 7, 0, 3, 6, 1, 4])
    bias = XLogSMaskBias(HEADS)(SparseStructure(edge_index, values))
    out = layer.forward_sparse(x, edge_index, bias)
    out_p = layer.forward_sparse(x[perm], _relabel(perm)[edge_index], bias)
    torch.testing.assert_close(out_p, out[perm], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mask_scale", ["paper", "none"])
def test_padding_invariance(mask_scale):
    layer = _layer(mask_scale)
    bias = XLogSMaskBias(HEADS)
    x_alone = _x(6)[None]
    powers, mask = padded([PATH_TRIANGLE], HEADS)
    alone = layer.forward_dense(x_alone, bias(DenseStructure(powers, mask)), mask)

    powers, mask = padded([TWO_PARTS, PATH_TRIANGLE], HEADS)
    x = _x(8, seed=3, batch=2)
    x[1, :6] = x_alone[0]
    x[1, 6:] = -1e3
    out, terms = layer.forward_dense(x, bias(DenseStructure(powers, mask)), mask, return_terms=True)
    torch.testing.assert_close(out[1, :6], alone[0], rtol=1e-12, atol=1e-12)
    assert (terms["attention"][1, :, :, 6:] == 0).all()


def _reference_mha(layer, x, key_padding_mask=None):
    mha = torch.nn.MultiheadAttention(DIM, HEADS, batch_first=True).double().eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([layer.q.weight, layer.k.weight, layer.v.weight]))
        mha.in_proj_bias.copy_(torch.cat([layer.q.bias, layer.k.bias, layer.v.bias]))
        mha.out_proj.weight.copy_(layer.out.weight)
        mha.out_proj.bias.copy_(layer.out.bias)
    return mha(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)[0]


@pytest.mark.parametrize("mask_scale", ["paper", "none"])
def test_no_bias_is_plain_multihead_attention(mask_scale):
    layer = _layer(mask_scale)
    x = _x(8, batch=2)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[0, 5:] = False
    want = _reference_mha(layer, x, key_padding_mask=~mask)
    got = layer.forward_dense(x, None, mask)
    torch.testing.assert_close(got[mask], want[mask], rtol=1e-12, atol=1e-12)
    # Sparse over all pairs of graph 1 is full attention too.
    ii, jj = torch.meshgrid(torch.arange(8), torch.arange(8), indexing="ij")
    full = torch.stack([ii.flatten(), jj.flatten()])
    torch.testing.assert_close(layer.forward_sparse(x[1], full), want[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mask_scale", ["paper", "none"])
def test_dense_terms(mask_scale):
    layer = _layer(mask_scale)
    powers, mask = padded([PATH_TRIANGLE, TWO_PARTS], HEADS)
    x = _x(8, batch=2)
    bias = XLogSMaskBias(HEADS)(DenseStructure(powers, mask))
    out, t = layer.forward_dense(x, bias, mask, return_terms=True)
    q = layer.q(x).view(2, 8, HEADS, 8).transpose(1, 2)
    k = layer.k(x).view(2, 8, HEADS, 8).transpose(1, 2)
    v = layer.v(x).view(2, 8, HEADS, 8).transpose(1, 2)
    torch.testing.assert_close(t["energy"], q @ k.transpose(-1, -2) / math.sqrt(8))
    scale = math.sqrt(8) if mask_scale == "paper" else 1.0
    torch.testing.assert_close(t["structural"], bias / scale)
    real = mask[:, None, None, :].expand_as(t["logits"])
    torch.testing.assert_close(t["logits"][real], (t["energy"] + t["structural"])[real])
    assert torch.isneginf(t["logits"][~real]).all()
    torch.testing.assert_close(t["logits"].softmax(-1), t["attention"], rtol=1e-12, atol=1e-14)
    # attention @ V reproduces the SDPA aggregation, and projecting it gives the output.
    torch.testing.assert_close(t["attention"] @ v, t["aggregate"], rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(layer.out(t["aggregate"].transpose(1, 2).reshape(2, 8, DIM)), out)


def test_sparse_terms():
    layer = _layer()
    edge_index, values = union_pairs(norm_powers(TWO_PARTS, HEADS))
    x = _x(8)
    bias = XLogSMaskBias(HEADS)(SparseStructure(edge_index, values))
    out, t = layer.forward_sparse(x, edge_index, bias, return_terms=True)
    row, col = edge_index
    q = layer.q(x).view(8, HEADS, 8)
    k = layer.k(x).view(8, HEADS, 8)
    v = layer.v(x).view(8, HEADS, 8)
    torch.testing.assert_close(t["energy"], (q[row] * k[col]).sum(-1) / math.sqrt(8))
    torch.testing.assert_close(t["structural"], bias / math.sqrt(8))
    torch.testing.assert_close(t["logits"], t["energy"] + t["structural"])
    agg = torch.zeros(8, HEADS, 8, dtype=torch.float64)
    for i in range(8):  # per-query softmax and weighted sum, one query at a time
        sel = row == i
        w = t["logits"][sel].softmax(0)
        torch.testing.assert_close(t["attention"][sel], w, rtol=1e-12, atol=1e-14)
        agg[i] = (w[:, :, None] * v[col[sel]]).sum(0)
    torch.testing.assert_close(t["aggregate"], agg, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(layer.out(agg.reshape(8, DIM)), out)


def test_attention_dropout_only_in_training():
    torch.manual_seed(0)
    layer = StructuralAttention(DIM, HEADS, attn_dropout=0.5).double()
    x = _x(8, batch=1)
    layer.eval()
    ref = layer.forward_dense(x)
    torch.testing.assert_close(layer.forward_dense(x), ref)
    layer.train()
    assert (layer.forward_dense(x) - ref).abs().max() > 1e-6


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError):
        StructuralAttention(10, 3)
    with pytest.raises(ValueError):
        StructuralAttention(8, 2, mask_scale="sqrt")


def test_rows_without_a_finite_pair_give_zero_not_nan():
    """A sparse row whose pairs are all -inf (or absent), and a padded graph with no real node: no NaN anywhere."""
    from xmask_cli.model.attention.ops import segment_softmax

    torch.set_grad_enabled(True)
    try:
        logits = torch.tensor([[0.5], [float("-inf")], [float("-inf")], [1.0]], requires_grad=True)
        index = torch.tensor([0, 1, 1, 2])  # row 1: all -inf; row 3: no pairs
        w = segment_softmax(logits, index, num_nodes=4)
        assert torch.equal(w.detach(), torch.tensor([[1.0], [0.0], [0.0], [1.0]]))
        w.sum().backward()
        assert torch.isfinite(logits.grad).all()

        layer = StructuralAttention(DIM, HEADS).double()
        x = _x(5, batch=2).requires_grad_(True)
        mask = torch.zeros(2, 5, dtype=torch.bool)
        mask[0, :3] = True  # graph 1 has no real node
        out = layer.forward_dense(x, None, mask)
        out.sum().backward()
        assert torch.isfinite(out).all() and torch.isfinite(x.grad).all()
        # The real graph's rows do not see its padded keys (nor graph 1's garbage).
        x2 = x.detach().clone()
        x2[0, 3:] = 1e3
        torch.testing.assert_close(layer.forward_dense(x2, None, mask)[0, :3], out[0, :3].detach())
    finally:
        torch.set_grad_enabled(False)
