"""model.attention.pairs: attention of a query set over its own pairs into a key set, against numpy."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from xmask_cli.model.attention.structural import StructuralAttention


@pytest.mark.parametrize("kernel", ["csr", "gather"])
def test_pairs_of_a_separate_query_set_match_numpy(kernel):
    torch.manual_seed(0)
    heads, dim, nq, nk = 2, 8, 3, 5
    attn = StructuralAttention(dim, heads, combine="concat").eval()
    attn.sparse_kernel = kernel
    xq, xk = torch.randn(nq, dim), torch.randn(nk, dim)
    edge_index = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 2, 4, 1, 3, 4]])
    bias = torch.randn(edge_index.size(1), heads)
    bias[1, 0] = float("-inf")  # outside head 0's support: weight exactly 0
    with torch.no_grad():
        out = attn.forward_pairs(xq, xk, edge_index, bias).numpy()
        q = attn.q(xq).view(nq, heads, -1).numpy()
        k = attn.k(xk).view(nk, heads, -1).numpy()
        v = attn.v(xk).view(nk, heads, -1).numpy()
    d = dim // heads
    want = np.zeros((nq, heads, d))
    rows, cols = edge_index.numpy()
    for i in range(nq):
        mine = np.flatnonzero(rows == i)
        for h in range(heads):
            logits = np.array([(q[i, h] @ k[cols[e], h] + bias[e, h].item()) / math.sqrt(d) for e in mine])
            w = np.exp(logits - logits.max())
            w /= w.sum()
            want[i, h] = sum(w_e * v[cols[e], h] for w_e, e in zip(w, mine))
    np.testing.assert_allclose(out, want.reshape(nq, dim), rtol=1e-5, atol=1e-6)


def test_terms_of_the_gather_path():
    torch.manual_seed(1)
    attn = StructuralAttention(8, 2).eval()
    x = torch.randn(4, 8)
    edge_index = torch.tensor([[0, 0, 1, 2, 3], [1, 2, 0, 3, 3]])
    out, terms = attn.forward_pairs(x, x, edge_index, None, return_terms=True)
    assert list(terms) == ["energy", "structural", "logits", "attention", "value", "aggregate"]
    assert terms["attention"].shape == (5, 2) and torch.equal(terms["structural"], torch.zeros(5, 2))
    # Each query's weights over its pairs sum to 1.
    sums = torch.zeros(4, 2).index_add_(0, edge_index[0], terms["attention"])
    torch.testing.assert_close(sums, torch.ones(4, 2))
    torch.testing.assert_close(out, attn.forward_sparse(x, edge_index))
