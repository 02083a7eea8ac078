"""Rows of the powers and walks, a block at a time, equal the whole-matrix computation bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmask_cli.structure import Truncation, adjacency, adjacency_powers, random_walk_powers
from xmask_cli.structure.rowblocks import ARRAY_BYTES, PowerRows, WalkRows, rows_per_block


def _graph(n: int, seed: int) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    e = rng.integers(0, n, size=(2, 4 * n))
    e[:, : n // 10] = rng.integers(0, 5, size=(2, n // 10))  # a few hubs: rows long enough to truncate
    return adjacency(e, n)


def _same(block: sp.csr_matrix, whole: sp.csr_matrix) -> None:
    block, whole = block.tocsr(), whole.tocsr()
    assert block.shape == whole.shape
    np.testing.assert_array_equal(block.indptr, whole.indptr)
    np.testing.assert_array_equal(block.indices, whole.indices)
    np.testing.assert_array_equal(block.data, whole.data)  # bit for bit, not close


@pytest.mark.parametrize("normalization", ["sym", "no-symnorm"])
@pytest.mark.parametrize("rule", [Truncation(), Truncation(1e-3, 0), Truncation(1e-4, 9), Truncation(0.0, 5)])
def test_power_rows_equal_the_whole_powers(normalization, rule):
    a = _graph(300, 0)
    whole = adjacency_powers(a, 4, normalization=normalization, truncation=rule)
    rows = PowerRows(a, 4, normalization=normalization, truncation=rule)
    for bounds in ([0, 300], [0, 1, 77, 150, 299, 300], [0, 128, 256, 300]):
        for s, e in zip(bounds[:-1], bounds[1:]):
            for got, want in zip(rows.rows(s, e), whole):
                _same(got, want[s:e])
    if not rule.exact:  # the rule did bite: a test of identity under truncation, not of exact powers only
        assert whole[3].nnz < adjacency_powers(a, 4, normalization=normalization)[3].nnz


@pytest.mark.parametrize("rule", [Truncation(), Truncation(1e-3, 7)])
def test_walk_rows_equal_the_whole_walks(rule):
    a = _graph(200, 1)
    whole = random_walk_powers(a, 5, truncation=rule)
    rows = WalkRows(a, 5, truncation=rule)
    for s, e in ((0, 64), (64, 65), (65, 200)):
        got = rows.rows(s, e)
        assert len(got) == len(whole) == 6
        for g, w in zip(got, whole):
            _same(g, w[s:e])


def test_rows_per_block_follows_the_budget():
    deg = np.full(100_000, 10)
    small, big = rows_per_block(deg, 2, 128, 32 << 20), rows_per_block(deg, 2, 128, 256 << 20)
    assert 256 <= small < big <= 100_000
    assert abs(big / small - 8) < 1  # linear in the budget between the bounds
    assert rows_per_block(deg, 4, 128, 256 << 20) < big  # more powers, fewer rows


def test_rows_per_block_keeps_every_array_under_the_cap():
    # A large budget: the cap on one array decides. Per row, a power holds up to topk entries (12 bytes
    # each) and the pairs' values are k float32 wide.
    deg = np.full(1_000_000, 10)
    for k, topk in ((2, 128), (3, 64), (19, 128)):
        rows = rows_per_block(deg, k, topk, 64 << 30)
        assert rows * topk * max(12, 4 * k) <= ARRAY_BYTES
        assert (rows + 1) * topk * max(12, 4 * k) > ARRAY_BYTES or rows == 256
    assert rows_per_block(deg, 2, 128, 64 << 30) > rows_per_block(deg, 19, 128, 64 << 30)
