"""Dual-mode attention: dense, sparse and mixed regions give forward_sparse's numbers."""
import math

import numpy as np
import pytest
import torch

from tests.model.semantics import LOGIT_STD, cora_union_pairs, scale_qk
from xmask_cli.model.attention.dualmode import auto_threshold, dual_attention, plan_regions, region_summary
from xmask_cli.model.attention.structural import StructuralAttention

DIM, HEADS = 16, 2  # d_h = 8
N = 40
EMPTY = 7  # a query with no pairs


def _graph(seed=0, n=N, p=0.12):
    """Random pairs (no duplicates) with a dense block among nodes 0..11 and no pairs for EMPTY."""
    rng = np.random.default_rng(seed)
    a = rng.random((n, n)) < p
    a[:12, :12] |= rng.random((12, 12)) < 0.9  # a dense corner, so some regions go dense
    a[EMPTY, :] = False
    row, col = np.nonzero(a)
    perm = rng.permutation(len(row))  # pair order must not matter
    return torch.from_numpy(np.stack([row[perm], col[perm]])).long()


def _layer(mask_scale="paper", seed=0, **kw):
    torch.manual_seed(seed)
    return StructuralAttention(DIM, HEADS, mask_scale=mask_scale, **kw).eval()


def _reference(layer, x, edge_index, bias):
    """Per-query numpy loop in float64: softmax over the query's keys, zero if it has none."""
    w = {n: (getattr(layer, n).weight.detach().double().numpy(), getattr(layer, n).bias.detach().double().numpy())
         for n in ("q", "k", "v", "out")}
    xn = x.detach().double().numpy()
    d_h = DIM // HEADS
    proj = {n: (xn @ w[n][0].T + w[n][1]).reshape(len(xn), HEADS, d_h) for n in ("q", "k", "v")}
    row, col = edge_index.numpy()
    b = np.zeros((len(row), HEADS)) if bias is None else bias.detach().double().numpy()
    agg = np.zeros((len(xn), HEADS, d_h))
    for i in range(len(xn)):
        sel = np.nonzero(row == i)[0]
        if not len(sel):
            continue
        for h in range(HEADS):
            qk = proj["k"][col[sel], h] @ proj["q"][i, h]
            if layer.mask_scale == "paper":
                logits = (qk + b[sel, h]) / math.sqrt(d_h)
            else:
                logits = qk / math.sqrt(d_h) + b[sel, h]
            p = np.exp(logits - logits.max())
            p /= p.sum()
            agg[i, h] = p @ proj["v"][col[sel], h]
    return agg.reshape(len(xn), DIM) @ w["out"][0].T + w["out"][1]


def _mixed_regions(edge_index, n=N, threshold=0.3):
    groups = torch.from_numpy(np.random.default_rng(3).integers(0, 4, n))
    groups[:12] = 0  # the dense corner in one group
    regions = plan_regions(edge_index, n, groups, max_region_queries=12, threshold=threshold)
    s = region_summary(regions)
    assert 0 < s["dense_regions"] < s["regions"], s  # really mixed
    return regions


@pytest.mark.parametrize("mask_scale", ["paper", "none"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_modes_match_sparse_and_numpy(mask_scale, with_bias):
    ei = _graph()
    layer = _layer(mask_scale)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(N, DIM, generator=g)
    bias = torch.randn(ei.size(1), HEADS, generator=g) * 3 if with_bias else None
    ref = _reference(layer, x, ei, bias)
    with torch.no_grad():
        sparse = dual_attention(layer, x, ei, bias, mode="sparse")
        dense = dual_attention(layer, x, ei, bias, mode="dense")
        mixed = dual_attention(layer, x, ei, bias, regions=_mixed_regions(ei))
        all_sparse = dual_attention(layer, x, ei, bias, regions=plan_regions(ei, N, None, 9, threshold=2.0))
        all_dense = dual_attention(layer, x, ei, bias, regions=plan_regions(ei, N, None, 9, threshold=0.0))
        planned = dual_attention(layer, x, ei, bias, mode="dual", max_region_queries=10)
    torch.testing.assert_close(sparse, layer.forward_sparse(x, ei, bias), atol=0, rtol=0)
    for out in (sparse, dense, mixed, all_sparse, all_dense, planned):
        np.testing.assert_allclose(out.double().numpy(), ref, atol=1e-5, rtol=0)
        torch.testing.assert_close(out, sparse, atol=1e-5, rtol=0)
    # The query without pairs gives zero before the output projection.
    torch.testing.assert_close(mixed[EMPTY], layer.out.bias.detach(), atol=1e-6, rtol=0)


def test_gradients_match_sparse():
    ei = _graph(seed=4)
    layer = _layer()
    g = torch.Generator().manual_seed(2)
    x0 = torch.randn(N, DIM, generator=g)
    b0 = torch.randn(ei.size(1), HEADS, generator=g)
    target = torch.randn(N, DIM, generator=g)
    regions = _mixed_regions(ei)

    def grads(mode, regions=None):
        layer.zero_grad()
        x, b = x0.clone().requires_grad_(), b0.clone().requires_grad_()
        out = dual_attention(layer, x, ei, b, regions=regions, mode=mode)
        ((out - target) ** 2).sum().backward()
        return [x.grad, b.grad] + [p.grad.clone() for p in layer.parameters()]

    ref = grads("sparse")
    for other in (grads("dual", regions), grads("dense")):
        for a, b in zip(other, ref):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_training_dropout_semantics():
    ei = _graph(seed=5)
    x = torch.randn(N, DIM)
    regions = _mixed_regions(ei)
    # No dropout: training changes nothing.
    layer = _layer().train()
    torch.testing.assert_close(dual_attention(layer, x, ei, None, regions=regions),
                               layer.forward_sparse(x, ei), atol=1e-5, rtol=0)
    # attn_dropout=1 drops every weight on both paths: zero before the projection.
    layer = _layer(attn_dropout=1.0).train()
    out = dual_attention(layer, x, ei, None, regions=regions)
    torch.testing.assert_close(out, layer.out.bias.detach().expand_as(out), atol=1e-6, rtol=0)


@pytest.mark.parametrize("use_groups", [False, True])
@pytest.mark.parametrize("max_q", [1, 5, 64])
@pytest.mark.parametrize("threshold", [0.0, 0.2, 0.5, 1.01])
def test_plan_regions_partition_and_rule(use_groups, max_q, threshold):
    ei = _graph(seed=6)
    row, col = ei.numpy()
    groups = torch.from_numpy(np.random.default_rng(0).integers(0, 5, N)) if use_groups else None
    regions = plan_regions(ei, N, groups, max_q, threshold)
    seen_q, seen_pairs = [], []
    for r in regions:
        qs = r.queries.tolist()
        assert 1 <= len(qs) <= max_q
        if use_groups:
            assert len(set(groups[r.queries].tolist())) == 1
        else:
            assert qs == list(range(qs[0], qs[0] + len(qs)))  # contiguous chunk
        seen_q += qs
        pairs = r.pairs.numpy()
        assert set(pairs.tolist()) == set(np.nonzero(np.isin(row, qs))[0].tolist())
        seen_pairs += pairs.tolist()
        keys = sorted({int(c) for c in col[pairs]})
        assert r.keys.tolist() == keys
        np.testing.assert_array_equal(r.queries.numpy()[r.rows.numpy()], row[pairs])
        np.testing.assert_array_equal(r.keys.numpy()[r.cols.numpy()], col[pairs])
        density = len(pairs) / (len(qs) * len(keys)) if len(pairs) else 0.0
        assert r.density == pytest.approx(density)
        assert r.dense == (len(pairs) > 0 and density >= threshold)
    assert sorted(seen_q) == list(range(N))
    assert sorted(seen_pairs) == list(range(ei.size(1)))


def test_auto_threshold_and_duplicates():
    assert auto_threshold(8) == pytest.approx(3 / 48)
    assert auto_threshold(16) == pytest.approx(3 / 96)
    assert auto_threshold(16, pair_floats=34) == pytest.approx(3 / 34)
    ei = _graph()
    with pytest.raises(ValueError):
        plan_regions(ei, N, None, 8, "auto")
    auto = plan_regions(ei, N, None, 8, "auto", head_dim=8)
    fixed = plan_regions(ei, N, None, 8, 3 / 18)
    assert [r.dense for r in auto] == [r.dense for r in fixed]
    # A duplicated pair cannot sit in a dense mask: that region stays sparse, numbers still match.
    dup = torch.cat([ei, ei[:, :1]], 1)
    regions = plan_regions(dup, N, None, N, 0.0)
    assert not regions[0].dense
    layer = _layer()
    x = torch.randn(N, DIM)
    with torch.no_grad():
        torch.testing.assert_close(dual_attention(layer, x, dup, None, regions=regions),
                                   layer.forward_sparse(x, dup), atol=1e-6, rtol=0)
        with pytest.raises(ValueError):
            dual_attention(layer, x, dup, None, mode="dense")


# ------------------------------------------------------------------ realistic size
# Full Cora (2,708 nodes) over the union support of Â^1, Â^2 with the X-LogSMask term of heads 1 and 2
# (-inf outside each head's own support), weights scaled so the logits q·k/sqrt(d_h) over the pairs spread
# by several units, as after training. The small graphs above run at initialisation, where a wrong mask
# value barely moves a softmax; here it would show.
REAL_DIM, REAL_HEADS = 32, 2  # d_h = 16


@pytest.fixture(scope="module")
def cora_pairs(tmp_path_factory):
    from xmask_cli.model.logsmask import SparseStructure, XLogSMaskBias

    data, ei, values = cora_union_pairs(tmp_path_factory.mktemp("cora"), 2)
    bias = XLogSMaskBias(REAL_HEADS, (1, 2))(SparseStructure(ei, values))
    # A fixed random projection of the bag-of-words features to the layer's width.
    proj = torch.randn(data.x.size(1), REAL_DIM, generator=torch.Generator().manual_seed(0)) / math.sqrt(REAL_DIM)
    return data.x @ proj, ei, bias


def _spread_layer(mask_scale, x, ei):
    """A layer whose logits over the pairs have a per-head std of at least 5."""
    torch.manual_seed(0)
    layer = StructuralAttention(REAL_DIM, REAL_HEADS, mask_scale=mask_scale).eval()

    def std():
        q, k, _ = layer.split_heads(x)
        return float(((q[ei[0]] * k[ei[1]]).sum(-1) / math.sqrt(layer.head_dim)).std(0).min())

    assert scale_qk([layer], std) >= LOGIT_STD
    return layer


@pytest.mark.parametrize("mask_scale", ["paper", "none"])
def test_dual_dense_and_sparse_equal_at_cora_size_with_trained_scale_logits(cora_pairs, mask_scale):
    x0, ei, bias = cora_pairs
    n = x0.size(0)
    assert n == 2708 and bool(torch.isinf(bias).any()) and bool(torch.isfinite(bias).any(1).all())
    layer = _spread_layer(mask_scale, x0, ei)
    # Regions of 256 consecutive ids; the threshold at the median density makes about half of them dense.
    density = sorted(r.density for r in plan_regions(ei, n, None, 256, threshold=2.0))
    regions = plan_regions(ei, n, None, 256, threshold=density[len(density) // 2])
    s = region_summary(regions)
    assert 0 < s["dense_regions"] < s["regions"]
    target = torch.randn(n, REAL_DIM, generator=torch.Generator().manual_seed(3))

    def run(mode, regions=None):
        layer.zero_grad()
        x = x0.clone().requires_grad_()
        out = dual_attention(layer, x, ei, bias, regions=regions, mode=mode)
        ((out - target) ** 2).sum().backward()
        return out.detach(), {"x": x.grad, **{k: p.grad.clone() for k, p in layer.named_parameters()}}

    ref_out, ref_grads = run("sparse")  # forward_sparse: the CSR kernel
    for mode, regs in (("dual", regions), ("dense", None)):
        out, grads = run(mode, regs)
        scale = float(ref_out.abs().max())
        assert float((out - ref_out).abs().max()) <= 1e-4 * scale, mode
        for name, g in ref_grads.items():
            if name == "k.bias":  # q_i·b_k shifts a whole softmax row: its gradient is 0 up to round-off
                continue
            assert float((grads[name] - g).abs().max()) <= 1e-4 * float(g.abs().max()), (mode, name)


def test_dense_and_dual_modes_refuse_the_mean_combine():
    """Only the sparse path averages heads (combine='mean', the attention output layer): the region path projects."""
    layer = _layer(combine="mean")
    x, edge_index = torch.randn(4, DIM), torch.tensor([[0, 1, 2], [1, 2, 3]])
    assert dual_attention(layer, x, edge_index, None, mode="sparse").shape == (4, DIM // HEADS)
    for mode in ("dense", "dual"):
        with pytest.raises(ValueError, match="no attention output layer"):
            dual_attention(layer, x, edge_index, None, mode=mode)
