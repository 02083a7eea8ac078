"""The compiled CSR row kernels against references written here: a dense numpy union of supports, and scipy's
own product followed by the truncation rule applied row by row in plain Python (bit for bit, not close)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from xmask_cli.structure import adjacency, normalized_adjacency, union_pairs, union_rows
from xmask_cli.structure.csr_kernels import canonical, product_rows


def _random_csr(rng: np.random.Generator, rows: int, cols: int, density: float, *, empty_rows: int = 0,
                negative: bool = True, explicit_zeros: int = 0, shuffle: bool = False, duplicates: int = 0) -> sp.csr_matrix:
    """Random CSR with some empty rows; optionally explicit zeros, rows in random order and duplicate entries."""
    m = sp.random(rows, cols, density=density, format="csr", random_state=rng, dtype=np.float64)
    m.data += 0.1  # no accidental zeros
    if negative:
        m.data *= rng.choice([-1.0, 1.0], size=m.data.shape[0])
    if empty_rows:
        keep = np.ones(rows)
        keep[rng.choice(rows, size=min(empty_rows, rows), replace=False)] = 0.0
        m = (sp.diags(keep) @ m).tocsr()
        m.eliminate_zeros()
    coo = m.tocoo()
    r, c, v = coo.row, coo.col, coo.data
    if explicit_zeros:
        zr, zc = rng.integers(0, rows, explicit_zeros), rng.integers(0, cols, explicit_zeros)
        fresh = ~np.isin(zr * cols + zc, r.astype(np.int64) * cols + c)
        r, c, v = np.concatenate([r, zr[fresh]]), np.concatenate([c, zc[fresh]]), np.concatenate([v, np.zeros(fresh.sum())])
    if duplicates and len(r):
        i = rng.integers(0, len(r), duplicates)
        r, c, v = np.concatenate([r, r[i]]), np.concatenate([c, c[i]]), np.concatenate([v, rng.random(duplicates)])
    order = np.lexsort((rng.random(len(r)) if shuffle else c, r))  # rows ascending, columns sorted or shuffled
    r, c, v = r[order], c[order], v[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=rows))])
    out = sp.csr_matrix((v, c.astype(np.int32), indptr), shape=(rows, cols))
    out.has_canonical_format = False  # as built: scipy must not assume anything
    return out


def _dense_union(mats: list[sp.spmatrix]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Union of stored positions (explicit zeros included, duplicates summed) by dense boolean masks."""
    shape = mats[0].shape
    stored = np.zeros(shape, dtype=bool)
    dense = []
    for m in mats:
        c = sp.coo_matrix(m)
        mask = np.zeros(shape, dtype=bool)
        mask[c.row, c.col] = True
        d = np.zeros(shape)
        np.add.at(d, (c.row, c.col), c.data)
        stored |= mask
        dense.append(d)
    row, col = np.nonzero(stored)  # row-major: rows ascending, columns ascending
    return row, col, np.stack([d[row, col] for d in dense], axis=1)


def _check_union(mats: list[sp.spmatrix]) -> None:
    row, col, vals = _dense_union(mats)
    got_row, got_col, got_vals = union_pairs(mats)
    np.testing.assert_array_equal(got_row, row)
    np.testing.assert_array_equal(got_col, col)
    np.testing.assert_array_equal(got_vals, vals)
    counts, col32, vals32 = union_rows(mats, np.dtype(np.int32), np.dtype(np.float32))
    assert col32.dtype == np.int32 and vals32.dtype == np.float32
    np.testing.assert_array_equal(counts, np.bincount(row, minlength=mats[0].shape[0]))
    np.testing.assert_array_equal(col32, col)
    assert vals32.tobytes() == vals.astype(np.float32).tobytes()  # numpy's rounding, bit for bit


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_union_equals_dense_union(seed, k):
    rng = np.random.default_rng(seed)
    rows, cols = int(rng.integers(1, 60)), int(rng.integers(1, 60))
    mats = [_random_csr(rng, rows, cols, float(rng.uniform(0.0, 0.4)), empty_rows=rows // 3,
                        explicit_zeros=int(rng.integers(0, 4))) for _ in range(k)]
    for m in mats:
        m.has_canonical_format = True  # sorted and duplicate-free as built (no shuffle, no duplicates)
    _check_union(mats)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_union_of_unsorted_rows_with_duplicates(seed, k):
    rng = np.random.default_rng(100 + seed)
    mats = [_random_csr(rng, 30, 40, 0.2, empty_rows=5, shuffle=True, duplicates=10) for _ in range(k)]
    before = [(m.indices.copy(), m.data.copy()) for m in mats]
    _check_union(mats)
    for m, (ind, data) in zip(mats, before):  # the arguments are read, not put in order in place
        np.testing.assert_array_equal(m.indices, ind)
        np.testing.assert_array_equal(m.data, data)


def test_union_of_other_formats_and_all_empty():
    rng = np.random.default_rng(7)
    m = _random_csr(rng, 25, 25, 0.2)
    _check_union([m.tocoo(), m.tocsc(), sp.csr_matrix((25, 25))])
    counts, col, vals = union_rows([sp.csr_matrix((4, 9)), sp.csr_matrix((4, 9))])
    assert counts.tolist() == [0, 0, 0, 0] and col.shape == (0,) and vals.shape == (0, 2)


def test_union_of_a_row_block_is_those_rows_of_the_whole():
    rng = np.random.default_rng(11)
    mats = [_random_csr(rng, 80, 80, 0.1, empty_rows=10) for _ in range(3)]
    row, col, vals = _dense_union(mats)
    start, stop = 23, 61
    r, c, v = union_pairs([m[start:stop] for m in mats])
    sel = (row >= start) & (row < stop)
    np.testing.assert_array_equal(r + start, row[sel])  # rows count from the block's first row
    np.testing.assert_array_equal(c, col[sel])
    np.testing.assert_array_equal(v, vals[sel])


# --- product_rows ---------------------------------------------------------------------------------------


def _reference_product(left: sp.csr_matrix, right: sp.csr_matrix, tau: float, topk: int,
                       protect: sp.csr_matrix | None, row_offset: int) -> sp.csr_matrix:
    """scipy's product (its own numbers), then the rule row by row in plain Python: protected entries (the
    diagonal and ``protect``), others with ``|x| >= tau``, then at most ``topk``: the largest others first,
    among equal values the smaller column."""
    raw = canonical(left @ right)  # scipy's products and sums; sorting moves, never changes, a value
    rows, data, cols = [], [], []
    for i in range(raw.shape[0]):
        g = i + row_offset
        s, e = raw.indptr[i], raw.indptr[i + 1]
        c, x = raw.indices[s:e], raw.data[s:e]
        safe = {g} | (set(protect.indices[protect.indptr[g]:protect.indptr[g + 1]].tolist()) if protect is not None else set())
        prot = [t for t in range(len(c)) if int(c[t]) in safe]
        cand = [t for t in range(len(c)) if int(c[t]) not in safe and (tau <= 0 or abs(x[t]) >= tau)]
        if topk > 0 and len(prot) + len(cand) > topk:
            cand = sorted(cand, key=lambda t: (-abs(x[t]), int(c[t])))[:max(topk - len(prot), 0)]
        keep = sorted(prot + cand)
        rows += [i] * len(keep)
        cols += [int(c[t]) for t in keep]
        data += [float(x[t]) for t in keep]
    return sp.csr_matrix((np.asarray(data, dtype=np.float64), (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64))),
                         shape=raw.shape)


def _same_bits(got: sp.csr_matrix, want: sp.csr_matrix) -> None:
    want = canonical(want)
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    assert got.data.tobytes() == want.data.tobytes()


RULES = [(0.0, 0), (0.3, 0), (0.0, 4), (0.2, 6), (0.0, 1)]


@pytest.mark.parametrize("tau,topk", RULES)
@pytest.mark.parametrize("seed", range(4))
def test_product_equals_scipy_then_the_rule(seed, tau, topk):
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(5, 60))
    # Unsorted rows, explicit zeros and negative values: every term is summed in scipy's order, and exact
    # cancellations are dropped as scipy drops them.
    left = _random_csr(rng, n, n, float(rng.uniform(0.05, 0.3)), empty_rows=n // 5, shuffle=True, explicit_zeros=3)
    right = _random_csr(rng, n, n, float(rng.uniform(0.05, 0.3)), empty_rows=n // 5, shuffle=bool(seed % 2))
    protect = canonical(_random_csr(rng, n, n, 0.1))
    for prot in (None, protect):
        got = product_rows(left, right, tau, topk, protect=prot)
        _same_bits(got, _reference_product(left, right, tau, topk, prot, 0))
        # Tiny chunks, one row or so each: the rows come out the same.
        _same_bits(product_rows(left, right, tau, topk, protect=prot, chunk_flops=3), got)


def test_product_drops_exact_cancellations_as_scipy_does():
    left = sp.csr_matrix(np.array([[1.0, 1.0], [0.0, 1.0]]))
    right = sp.csr_matrix(np.array([[2.0, 1.0], [-2.0, 1.0]]))
    got = product_rows(left, right)
    assert got.toarray().tolist() == [[0.0, 2.0], [-2.0, 1.0]]
    assert got.nnz == 3 == (left @ right).nnz


@pytest.mark.parametrize("tau,topk", [(0.0, 3), (0.05, 2)])
def test_product_breaks_ties_at_the_cut_by_smaller_column(tau, topk):
    # Row 0 of left @ right: 0.5 on columns 1..5 (a five-way tie at the cut); the diagonal is protected.
    left = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 1.0]]))
    right = sp.csr_matrix(np.array([[0.01, 0.5, 0.5, 0.5, 0.5, 0.5], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]))
    got = product_rows(left, right, tau, topk)
    want = [0] + list(range(1, topk))  # the diagonal, then the smallest columns of the tie
    assert got.indices[got.indptr[0]:got.indptr[1]].tolist() == want
    _same_bits(got, _reference_product(left, right, tau, topk, None, 0))


@pytest.mark.parametrize("tau,topk", [(1e-6, 128), (1e-3, 16), (0.0, 0)])
def test_product_on_row_blocks_of_a_graph(tau, topk):
    # Â times Â, a block of rows at a time: the rule reads the diagonal and Â's support at global rows.
    rng = np.random.default_rng(5)
    n = 3000
    e = rng.integers(0, n, size=(2, 6 * n))
    e[:, :300] = rng.integers(0, 20, size=(2, 300))  # hubs: rows over the budget
    a_hat = normalized_adjacency(adjacency(e, n))
    for start, stop in ((0, 1000), (1000, 1001), (1001, 3000)):
        got = product_rows(a_hat[start:stop], a_hat, tau, topk, protect=a_hat, row_offset=start)
        _same_bits(got, _reference_product(a_hat[start:stop], a_hat, tau, topk, a_hat, start))
        if topk and stop - start > 1:  # the rule did drop entries here
            assert got.nnz < (a_hat[start:stop] @ a_hat).nnz


@pytest.mark.parametrize("tau, topk", [(0.0, 3), (0.25, 4), (0.5, 0), (0.0, 1)])
def test_product_cut_keeps_what_truncate_rows_keeps(tau, topk):
    # Two compiled implementations of one rule (truncate_rows' mask on any CSR, product_rows' cut as a row is
    # formed): a product with the identity is the matrix itself, so both must keep the same entries. Values
    # from a few levels, so many rows tie at the cut; a protected pattern and a row offset as row blocks have.
    from xmask_cli.structure.powers import Truncation, truncate_rows

    rng = np.random.default_rng(11)
    n, off = 1500, 200
    m = sp.random(n, n + off, density=0.01, format="csr", random_state=rng,
                  data_rvs=lambda k: rng.choice([0.125, 0.25, 0.5, 1.0], size=k))
    m.sort_indices()
    protect = sp.random(n + off, n + off, density=0.002, format="csr", random_state=rng)
    protect.data[:] = 1.0
    protect = canonical(protect)
    want = truncate_rows(m, Truncation(tau=tau, topk=topk), protect=protect, row_offset=off)
    got = product_rows(m, sp.identity(n + off, format="csr"), tau, topk, protect=protect, row_offset=off)
    want.sort_indices()
    assert want.nnz < m.nnz  # the rule does cut here
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)
