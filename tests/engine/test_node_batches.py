"""A batch's pairs and dense block read from a graph's CSR pairs, against numpy indexing of the dense matrix."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmask_cli.engine.node_batches import dense_block, induced_pairs


def _csr(n: int, k: int, density: float, seed: int):
    """Cached-pair layout of a random sparse graph: ``indptr``, ``col`` (rows ascending) and ``values [P, K]``,
    and the same values densely ``[K, n, n]``."""
    rng = np.random.default_rng(seed)
    support = sp.random(n, n, density=density, random_state=seed, format="csr")
    support.sum_duplicates()
    support.sort_indices()
    values = rng.uniform(0.1, 1.0, size=(support.nnz, k)).astype(np.float32)
    dense = np.zeros((k, n, n), dtype=np.float32)
    rows = np.repeat(np.arange(n), np.diff(support.indptr))
    dense[:, rows, support.indices] = values.T
    return support.indptr.astype(np.int64), support.indices.astype(np.int64), values, dense


@pytest.mark.parametrize("seed", range(4))
def test_dense_block_equals_indexing_the_dense_powers(seed):
    n, k = 60, 3
    indptr, col, values, dense = _csr(n, k, 0.1, seed)
    nodes = np.sort(np.random.default_rng(seed).choice(n, size=17, replace=False))
    local = np.full(n, -1, dtype=np.int64)
    got = dense_block(indptr, col, values, nodes, local)
    np.testing.assert_array_equal(got, dense[:, nodes][:, :, nodes])
    assert (local == -1).all()  # the scratch map is restored


def test_induced_pairs_are_the_pairs_with_both_ends_in_the_batch():
    n = 40
    indptr, col, values, dense = _csr(n, 1, 0.15, 7)
    nodes = np.array([1, 4, 5, 9, 20, 33, 39])
    local = np.full(n, -1, dtype=np.int64)
    pos, (r, c) = induced_pairs(indptr, col, nodes, local)
    # Brute force: every cached pair (i, j) with i and j in the batch, in CSR order.
    inside = set(nodes.tolist())
    want = [(p, i, int(col[p])) for i in range(n) for p in range(indptr[i], indptr[i + 1])
            if i in inside and int(col[p]) in inside]
    assert pos.tolist() == [p for p, _, _ in want]
    where = {int(g): i for i, g in enumerate(nodes)}
    assert r.tolist() == [where[i] for _, i, _ in want] and c.tolist() == [where[j] for _, _, j in want]
    assert (np.diff(r) >= 0).all()  # rows ascending, as in the cache
    assert (local == -1).all()


def test_a_batch_without_inner_pairs_is_empty():
    # A path 0-1-2-3 (both directions): nodes 0 and 2 are not adjacent, and no self pair is cached.
    indptr = np.array([0, 1, 3, 5, 6])
    col = np.array([1, 0, 2, 1, 3, 2])
    local = np.full(4, -1, dtype=np.int64)
    pos, ei = induced_pairs(indptr, col, np.array([0, 2]), local)
    assert pos.size == 0 and ei.shape == (2, 0)
    block = dense_block(indptr, col, np.ones((6, 2), np.float32), np.array([1, 2]), local)
    np.testing.assert_array_equal(block, np.array([[[0, 1], [1, 0]]] * 2, dtype=np.float32))
