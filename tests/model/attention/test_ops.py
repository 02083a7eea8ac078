"""The parameter-free attention kernels against dense numpy: the per-query softmax over pairs, and plain
attention (whole, chunked, per graph of a disjoint union, with its log-sum-exp)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from xmask_cli.model.attention.ops import plain_attention, segment_softmax


def test_segment_softmax_is_each_querys_softmax_over_its_pairs():
    rng = np.random.default_rng(0)
    n, e, h = 6, 25, 3
    index = rng.integers(0, n - 1, size=e)  # the last query has no pair; pairs in no particular order
    logits = rng.standard_normal((e, h)) * 3
    got = segment_softmax(torch.from_numpy(logits), torch.from_numpy(index), num_nodes=n).numpy()
    want = np.zeros_like(logits)
    for i in range(n):
        sel = index == i
        if sel.any():
            z = np.exp(logits[sel] - logits[sel].max(0))
            want[sel] = z / z.sum(0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(np.bincount(index, weights=got[:, 0], minlength=n)[:-1], 1.0)


def test_segment_softmax_of_large_logits_does_not_overflow_and_minus_inf_weighs_zero():
    logits = torch.tensor([[1000.0], [999.0], [float("-inf")], [-1000.0]], dtype=torch.float64)
    w = segment_softmax(logits, torch.tensor([0, 0, 0, 1]), num_nodes=2)
    e1 = 1 / (1 + math.exp(-1))
    torch.testing.assert_close(w, torch.tensor([[e1], [1 - e1], [0.0], [1.0]], dtype=torch.float64))
    assert segment_softmax(torch.zeros(0, 2), torch.zeros(0, dtype=torch.long), 3).shape == (0, 2)


def _dense_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, qg=None, kg=None):
    """``softmax_j(q_i . k_j / sqrt(d)) v_j`` per head, keys of the query's group only; log-sum-exp too."""
    d = q.shape[-1]
    s = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(d)
    if qg is not None:
        s = np.where((qg[:, None] != kg[None, :])[None], -np.inf, s)
    out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
    lse = np.full((q.shape[0], q.shape[1]), -np.inf)
    for hh in range(q.shape[1]):
        for i in range(q.shape[0]):
            row = s[hh, i]
            if np.isfinite(row).any():
                m = row[np.isfinite(row)].max()
                w = np.exp(row - m)
                lse[i, hh] = m + math.log(w.sum())
                out[i, hh] = (w / w.sum()) @ v[:, hh]
    return out, lse


@pytest.mark.parametrize("chunk_floats", [1 << 24, 10])  # whole, and a few query rows at a time
def test_plain_attention_equals_the_dense_formula(chunk_floats):
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((9, 2, 4)), rng.standard_normal((7, 2, 4)), rng.standard_normal((7, 2, 4))
    out, lse = plain_attention(*map(torch.from_numpy, (q, k, v)), chunk_floats=chunk_floats, return_lse=True)
    want, want_lse = _dense_ref(q, k, v)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lse.numpy(), want_lse, rtol=1e-12)


def test_plain_attention_per_group_and_a_query_without_keys():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((6, 3, 2)), rng.standard_normal((5, 3, 2)), rng.standard_normal((5, 3, 2))
    qg, kg = np.array([0, 0, 1, 1, 2, 1]), np.array([1, 0, 1, 0, 1])  # group 2 has no key
    out, lse = plain_attention(*map(torch.from_numpy, (q, k, v)), query_groups=torch.from_numpy(qg),
                               key_groups=torch.from_numpy(kg), chunk_floats=20, return_lse=True)
    want, want_lse = _dense_ref(q, k, v, qg, kg)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(out.numpy()[4], 0.0)
    assert np.isneginf(lse.numpy()[4]).all() and np.isfinite(lse.numpy()[[0, 1, 2, 3, 5]]).all()
    np.testing.assert_allclose(lse.numpy()[[0, 1, 2, 3, 5]], want_lse[[0, 1, 2, 3, 5]], rtol=1e-12)
    with pytest.raises(ValueError, match="both"):
        plain_attention(*map(torch.from_numpy, (q, k, v)), query_groups=torch.from_numpy(qg))


def test_chunked_gradients_equal_the_whole_ones():
    torch.manual_seed(0)
    q, k, v = (torch.randn(8, 2, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    grads = []
    with torch.enable_grad():
        for chunk in (1 << 24, 6):
            (plain_attention(q, k, v, chunk_floats=chunk) ** 2).sum().backward()
            grads.append([t.grad.clone() for t in (q, k, v)])
            for t in (q, k, v):
                t.grad = None
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    empty = plain_attention(torch.zeros(0, 2, 3), torch.zeros(4, 2, 3), torch.zeros(4, 2, 5))
    assert empty.shape == (0, 2, 5)
