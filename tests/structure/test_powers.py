"""Normalized adjacency powers, truncation, random walks and union_pairs,
each against a dense numpy computation written here."""
from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import xmask_cli.structure.powers as powers_module
from xmask_cli.structure import (
    Truncation,
    adjacency,
    adjacency_powers,
    dropped_share,
    normalized_adjacency,
    power_row_sums,
    random_walk_powers,
    random_walk_row_sums,
    truncate_rows,
    union_pairs,
)

K = 4
RTOL = 1e-10
ATOL = 1e-14  # only for entries that are exactly zero in one of the two


# --- dense references -------------------------------------------------------


def dense_sym_norm(a: np.ndarray) -> np.ndarray:
    """``D^-1/2 (A + I) D^-1/2`` with ``D`` the row sums of ``A + I``."""
    ai = a + np.eye(a.shape[0])
    d = ai.sum(axis=1) ** -0.5
    return d[:, None] * ai * d[None, :]


def dense_no_symnorm(a: np.ndarray, k: int) -> np.ndarray:
    """``N((A + I)^k)``, ``N(M) = D_M^-1/2 M D_M^-1/2`` with ``D_M`` the row sums of ``M``."""
    m = np.linalg.matrix_power(a + np.eye(a.shape[0]), k)
    d = m.sum(axis=1) ** -0.5
    return d[:, None] * m * d[None, :]


def dense_random_walk(a: np.ndarray) -> np.ndarray:
    deg = a.sum(axis=1)
    p = np.zeros_like(a)
    nz = deg > 0
    p[nz] = a[nz] / deg[nz, None]
    return p


def dense_truncate(m: np.ndarray, tau: float, topk: int, prefer: np.ndarray | None = None,
                   protect: np.ndarray | None = None) -> np.ndarray:
    """Row-wise rule: keep |x| >= tau or a protected entry (the diagonal, and
    ``protect != 0``); then at most ``topk`` per row, every protected entry
    first and then by decreasing magnitude (a row with more protected entries
    than ``topk`` keeps exactly those).

    Entries of equal magnitude (to 1e-9 relative) are common in Â, e.g. two
    neighbours of equal degree. Where such a tie straddles the ``topk``
    boundary the rule does not say which entry survives, so the choice is
    read from ``prefer`` (the matrix under test): only the tie is borrowed,
    never a value, and the number kept from the tie must still be right.
    """
    out = np.zeros_like(m)
    for i in range(m.shape[0]):
        safe = {i} | (set(np.flatnonzero(protect[i]).tolist()) if protect is not None else set())
        cand = [j for j in np.flatnonzero(m[i]) if j in safe or tau <= 0 or abs(m[i, j]) >= tau]
        if topk > 0 and len(cand) > topk:
            others = sorted((j for j in cand if j not in safe), key=lambda j: -abs(m[i, j]))
            mine = [j for j in cand if j in safe]
            n_keep = topk - len(mine)
            kept = []
            if n_keep > 0:
                b = abs(m[i, others[n_keep - 1]])
                sure = [j for j in others if abs(m[i, j]) > b * (1 + 1e-9)]
                tied = [j for j in others if abs(abs(m[i, j]) - b) <= b * 1e-9]
                need = n_keep - len(sure)
                if len(tied) == need:
                    kept = sure + tied
                else:
                    assert prefer is not None, f"tie at the topk boundary in row {i}"
                    chosen = [j for j in tied if prefer[i, j] != 0]
                    assert len(chosen) == need, f"row {i}: kept {len(chosen)} of a tie, expected {need}"
                    kept = sure + chosen
            cand = mine + kept
        out[i, cand] = m[i, cand]
    return out


def assert_sparse_equals_dense(s: sp.spmatrix, d: np.ndarray, rtol: float = RTOL) -> None:
    np.testing.assert_allclose(s.toarray(), d, rtol=rtol, atol=ATOL)


# --- normalized adjacency and exact powers -----------------------------------


def test_normalized_adjacency_path3_hand_worked():
    # Path 0-1-2: degrees of A + I are (2, 3, 2).
    a = adjacency(np.array([[0, 1], [1, 2]]), 3)
    ah = normalized_adjacency(a).toarray()
    assert ah[0, 0] == pytest.approx(1 / 2, rel=1e-12)
    assert ah[1, 1] == pytest.approx(1 / 3, rel=1e-12)
    assert ah[0, 1] == pytest.approx(1 / math.sqrt(6), rel=1e-12)
    assert ah[1, 0] == pytest.approx(1 / math.sqrt(6), rel=1e-12)
    assert ah[0, 2] == 0.0
    # Â^2[0, 2] = Â[0,1] Â[1,2] = 1/6 and Â^2[0, 0] = 1/4 + 1/6.
    p2 = adjacency_powers(a, 2)[1].toarray()
    assert p2[0, 2] == pytest.approx(1 / 6, rel=1e-12)
    assert p2[0, 0] == pytest.approx(1 / 4 + 1 / 6, rel=1e-12)


def test_normalized_adjacency_isolated_node_is_one():
    # An isolated node has degree 1 in A + I: its row of Â is the unit vector.
    a = adjacency(np.array([[0], [1]]), 3)
    ah = normalized_adjacency(a).toarray()
    np.testing.assert_array_equal(ah[2], [0.0, 0.0, 1.0])


def test_normalized_adjacency_matches_dense(graph):
    a = adjacency(graph.edge_index, graph.n)
    ah = normalized_adjacency(a)
    assert ah.format == "csr" and ah.has_sorted_indices
    assert_sparse_equals_dense(ah, dense_sym_norm(graph.dense()))


def test_sym_powers_match_matrix_power(graph):
    a = adjacency(graph.edge_index, graph.n)
    ref = dense_sym_norm(graph.dense())
    out = adjacency_powers(a, K, normalization="sym")
    assert len(out) == K
    for k, p in enumerate(out, start=1):
        assert p.shape == (graph.n, graph.n)
        assert_sparse_equals_dense(p, np.linalg.matrix_power(ref, k))


def test_sym_power_support_is_the_k_hop_ball(graph):
    # Â has a positive diagonal, so Â^k_ij > 0 exactly when dist(i, j) <= k.
    a = adjacency(graph.edge_index, graph.n)
    g = graph.nx_graph()
    for k, p in enumerate(adjacency_powers(a, K), start=1):
        p = p.tocsr()
        p.eliminate_zeros()
        support = set(zip(*[x.tolist() for x in p.nonzero()]))
        ball = {(i, j) for i in range(graph.n) for j in nx.single_source_shortest_path_length(g, i, cutoff=k)}
        assert support == ball


def test_no_symnorm_path3_hand_worked():
    # (A + I)^2 on the path 0-1-2 is [[2,2,1],[2,3,2],[1,2,2]]; row sums (5, 7, 5).
    a = adjacency(np.array([[0, 1], [1, 2]]), 3)
    p1, p2 = adjacency_powers(a, 2, normalization="no-symnorm")
    assert p2[0, 2] == pytest.approx(1 / 5, rel=1e-12)
    assert p2[0, 1] == pytest.approx(2 / math.sqrt(35), rel=1e-12)
    assert p2[1, 1] == pytest.approx(3 / 7, rel=1e-12)
    # k = 1 is the same matrix under both conventions; k = 2 is not.
    assert_sparse_equals_dense(p1, normalized_adjacency(a).toarray())
    assert adjacency_powers(a, 2)[1][0, 2] == pytest.approx(1 / 6, rel=1e-12)


def test_no_symnorm_matches_dense(graph):
    a = adjacency(graph.edge_index, graph.n)
    out = adjacency_powers(a, K, normalization="no-symnorm")
    assert len(out) == K
    for k, p in enumerate(out, start=1):
        assert_sparse_equals_dense(p, dense_no_symnorm(graph.dense(), k))


def test_adjacency_powers_rejects_bad_arguments():
    a = adjacency(np.array([[0], [1]]), 2)
    with pytest.raises(ValueError):
        adjacency_powers(a, 0)
    with pytest.raises(ValueError):
        adjacency_powers(a, 2, normalization="rw")


# --- truncation --------------------------------------------------------------


def test_truncation_exact_flag():
    assert Truncation().exact
    assert not Truncation(tau=1e-3).exact
    assert not Truncation(topk=5).exact


def test_truncate_rows_hand_worked():
    m = sp.csr_matrix(
        np.array(
            [
                [0.01, 0.50, 0.20, 0.05],
                [0.30, 0.02, 0.00, 0.40],
                [0.10, 0.00, 0.90, 0.60],
                [0.00, 0.00, 0.00, 0.00],
            ]
        )
    )
    # tau only: small diagonals survive, small off-diagonals go.
    t = truncate_rows(m, Truncation(tau=0.1)).toarray()
    np.testing.assert_array_equal(
        t,
        [
            [0.01, 0.50, 0.20, 0.00],
            [0.30, 0.02, 0.00, 0.40],
            [0.10, 0.00, 0.90, 0.60],
            [0.00, 0.00, 0.00, 0.00],
        ],
    )
    # topk only: the diagonal takes one of the two slots, whatever its size.
    t = truncate_rows(m, Truncation(topk=2)).toarray()
    np.testing.assert_array_equal(
        t,
        [
            [0.01, 0.50, 0.00, 0.00],
            [0.00, 0.02, 0.00, 0.40],
            [0.00, 0.00, 0.90, 0.60],
            [0.00, 0.00, 0.00, 0.00],
        ],
    )
    # topk = 1 keeps the diagonal alone.
    t = truncate_rows(m, Truncation(topk=1)).toarray()
    np.testing.assert_array_equal(t, np.diag([0.01, 0.02, 0.90, 0.0]))
    # Both: tau first, then topk among the survivors.
    t = truncate_rows(m, Truncation(tau=0.25, topk=3)).toarray()
    np.testing.assert_array_equal(
        t,
        [
            [0.01, 0.50, 0.00, 0.00],
            [0.30, 0.02, 0.00, 0.40],
            [0.00, 0.00, 0.90, 0.60],
            [0.00, 0.00, 0.00, 0.00],
        ],
    )
    # The exact rule leaves the matrix alone.
    np.testing.assert_array_equal(truncate_rows(m, Truncation()).toarray(), m.toarray())


def _assert_truncated(p: sp.csr_matrix, rule: Truncation, a: np.ndarray) -> None:
    """Row-level invariants of a truncated power of Â (``a``: binary adjacency)."""
    p = p.tocsr()
    n = p.shape[0]
    per_row = np.diff(p.indptr)
    deg = a.sum(axis=1).astype(int)
    if rule.topk > 0:
        assert np.all(per_row <= np.maximum(rule.topk, deg + 1))
    rows = np.repeat(np.arange(n), per_row)
    protected = (rows == p.indices) | (a[rows, p.indices] != 0)
    if rule.tau > 0:
        assert np.all((np.abs(p.data) >= rule.tau) | protected)
    # Every power of Â is positive on the diagonal and on every edge, and those are always kept.
    assert np.array_equal(np.bincount(rows[protected], minlength=n), deg + 1)


RULES = [Truncation(tau=0.05), Truncation(tau=0.02, topk=6), Truncation(topk=4), Truncation(topk=1)]


def _check_truncated_sym(case, rule: Truncation) -> list[sp.csr_matrix]:
    a = adjacency(case.edge_index, case.n)
    ah = dense_sym_norm(case.dense())
    out = adjacency_powers(a, K, truncation=rule)
    assert len(out) == K
    # Independent iteration: P_1 = Â whole, P_k = trunc(P_{k-1} Â) keeping Â's support.
    assert_sparse_equals_dense(out[0], ah)
    ref = ah
    for p in out[1:]:
        _assert_truncated(p, rule, case.dense())
        got = p.toarray()
        ref = dense_truncate(ref @ ah, rule.tau, rule.topk, prefer=got, protect=ah)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    return out


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"tau{r.tau}_topk{r.topk}")
@pytest.mark.parametrize("seed", range(3))
def test_truncated_sym_powers_equal_iterated_dense(seed, rule, make_connected):
    case = make_connected(seed, 15 + 10 * seed, 0.15)
    out = _check_truncated_sym(case, rule)
    # Truncation actually bites on these graphs (else the test would be vacuous).
    exact = adjacency_powers(adjacency(case.edge_index, case.n), K)
    assert sum(p.nnz for p in out) < sum(e.nnz for e in exact)


def test_truncated_sym_powers_on_every_graph(graph):
    _check_truncated_sym(graph, Truncation(tau=0.03, topk=3))


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"tau{r.tau}_topk{r.topk}")
def test_truncated_sym_powers_in_small_row_blocks(rule, monkeypatch, make_connected):
    # Large graphs multiply in row blocks; force a handful of rows per block so
    # that every block but the first starts off the diagonal.
    monkeypatch.setattr(powers_module, "_ROW_BLOCK_NNZ", 40)
    _check_truncated_sym(make_connected(5, 35, 0.15), rule)


@pytest.mark.parametrize("rule", [Truncation(), Truncation(tau=0.0, topk=0), Truncation(tau=-1.0, topk=-1)], ids=["default", "zeros", "negative"])
def test_exact_truncation_rules_give_exact_powers(graph, rule):
    a = adjacency(graph.edge_index, graph.n)
    ah = dense_sym_norm(graph.dense())
    for k, p in enumerate(adjacency_powers(a, K, truncation=rule), start=1):
        assert_sparse_equals_dense(p, np.linalg.matrix_power(ah, k))
    for k, p in enumerate(adjacency_powers(a, K, normalization="no-symnorm", truncation=rule), start=1):
        assert_sparse_equals_dense(p, dense_no_symnorm(graph.dense(), k))
    pw = dense_random_walk(graph.dense())
    for k, p in enumerate(random_walk_powers(a, K, truncation=rule)):
        assert_sparse_equals_dense(p, np.linalg.matrix_power(pw, k))


def test_truncated_product_in_row_blocks(monkeypatch, make_connected):
    # Force many small row blocks: the result must not depend on the blocking
    # (this caught the diagonal being looked up with block-local row ids).
    case = make_connected(7, 40, 0.1)
    a = adjacency(case.edge_index, case.n)
    rule = Truncation(tau=0.01, topk=8)
    whole = adjacency_powers(a, K, truncation=rule)
    rw_whole = random_walk_powers(a, K, truncation=rule)
    monkeypatch.setattr(powers_module, "_ROW_BLOCK_NNZ", 10)
    blocked = adjacency_powers(a, K, truncation=rule)
    rw_blocked = random_walk_powers(a, K, truncation=rule)
    for p, q in zip(whole + rw_whole, blocked + rw_blocked):
        np.testing.assert_array_equal(p.toarray(), q.toarray())


@pytest.mark.parametrize("rule", [Truncation(tau=0.05), Truncation(tau=0.02, topk=5)], ids=["tau", "tau_topk"])
def test_truncated_no_symnorm(rule, make_connected):
    # Documented rule: R_1 = A + I, P_j = trunc(N_j(R_j)) where N_j normalizes with
    # the exact row sums of (A + I)^j, and R_{j+1} = (R_j on the support of P_j)(A + I).
    case = make_connected(3, 30, 0.12)
    a = adjacency(case.edge_index, case.n)
    ai = case.dense() + np.eye(case.n)
    out = adjacency_powers(a, K, normalization="no-symnorm", truncation=rule)
    raw = ai.copy()
    # The first power N(A + I) = Â is kept whole.
    assert_sparse_equals_dense(out[0], dense_sym_norm(case.dense()))
    for j, p in enumerate(out, start=1):
        d = np.linalg.matrix_power(ai, j).sum(axis=1) ** -0.5
        ref = d[:, None] * raw * d[None, :]
        if j > 1:
            _assert_truncated(p, rule, case.dense())
            ref = dense_truncate(ref, rule.tau, rule.topk, prefer=p.toarray(), protect=ai)
        assert_sparse_equals_dense(p, ref)
        raw = np.where(ref != 0, raw, 0.0) @ ai


def test_exact_row_sums_by_matvec_equal_dense(graph):
    a = adjacency(graph.edge_index, graph.n)
    d = graph.dense()
    sym = power_row_sums(a, K)
    raw = power_row_sums(a, K, normalization="no-symnorm")
    walk = random_walk_row_sums(a, K)
    for k in range(1, K + 1):
        np.testing.assert_allclose(sym[:, k - 1], np.linalg.matrix_power(dense_sym_norm(d), k).sum(1), rtol=1e-12)
        np.testing.assert_allclose(raw[:, k - 1], dense_no_symnorm(d, k).sum(1), rtol=1e-12)
    for k in range(K + 1):
        np.testing.assert_allclose(walk[:, k], np.linalg.matrix_power(dense_random_walk(d), k).sum(1), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"tau{r.tau}_topk{r.topk}")
def test_dropped_share_equals_dense(rule, make_connected):
    case = make_connected(11, 40, 0.2)
    a = adjacency(case.edge_index, case.n)
    out = adjacency_powers(a, K, truncation=rule)
    share = dropped_share(out, power_row_sums(a, K))
    ah = dense_sym_norm(case.dense())
    for k, p in enumerate(out, start=1):
        ref = 1.0 - p.toarray().sum(1) / np.linalg.matrix_power(ah, k).sum(1)
        np.testing.assert_allclose(share[:, k - 1], np.clip(ref, 0, 1), atol=1e-12)  # 1e-12: rounding snapped to 0
    assert np.all(share[:, 0] == 0) and share[:, -1].max() > 0


def test_star_hub_keeps_its_edges_at_every_power():
    # A 500-leaf hub under topk = 128: Â^1 whole, and every power keeps the hub's 501 entries.
    leaves = 500
    a = adjacency(np.stack([np.zeros(leaves, dtype=np.int64), np.arange(1, leaves + 1)]), leaves + 1)
    out = adjacency_powers(a, 3, truncation=Truncation(tau=1e-6, topk=128))
    ah = normalized_adjacency(a)
    assert (out[0] != ah).nnz == 0
    for p in out:
        assert p[0].nnz == leaves + 1
        assert np.all(np.diff(p.indptr)[1:] == (2 if p is out[0] else 128))


# --- random walks ------------------------------------------------------------


def test_random_walk_powers_match_dense(graph):
    a = adjacency(graph.edge_index, graph.n)
    p = dense_random_walk(graph.dense())
    out = random_walk_powers(a, K)
    assert len(out) == K + 1
    for k, m in enumerate(out):
        assert_sparse_equals_dense(m, np.linalg.matrix_power(p, k))
    iso = graph.isolated
    for m in out[1:]:
        sums = np.asarray(m.sum(axis=1)).ravel()
        np.testing.assert_allclose(sums[~iso], 1.0, rtol=1e-12)
        np.testing.assert_array_equal(sums[iso], 0.0)


@pytest.mark.parametrize("rule", [Truncation(tau=0.05), Truncation(tau=0.02, topk=5), Truncation(topk=3)], ids=["tau", "tau_topk", "topk"])
def test_truncated_random_walk_powers_equal_iterated_dense(graph, rule):
    # [I, trunc(P), trunc(trunc(P) P), ...]; I is returned as is.
    a = adjacency(graph.edge_index, graph.n)
    p = dense_random_walk(graph.dense())
    out = random_walk_powers(a, K, truncation=rule)
    assert len(out) == K + 1
    np.testing.assert_array_equal(out[0].toarray(), np.eye(graph.n))
    # P whole, then P^k = trunc(P^(k-1) P) keeping the diagonal and P's support where present.
    assert_sparse_equals_dense(out[1], p)
    ref = p
    adj = graph.dense()
    for m in out[2:]:
        m = m.tocsr()
        per_row = np.diff(m.indptr)
        if rule.topk > 0:
            assert np.all(per_row <= np.maximum(rule.topk, adj.sum(axis=1) + 1))
        rows = np.repeat(np.arange(graph.n), per_row)
        if rule.tau > 0:
            assert np.all((np.abs(m.data) >= rule.tau) | (rows == m.indices) | (adj[rows, m.indices] != 0))
        got = m.toarray()
        ref = dense_truncate(ref @ p, rule.tau, rule.topk, prefer=got, protect=p)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


def test_random_walk_star_hand_worked():
    a = adjacency(np.array([[0, 0, 0, 0], [1, 2, 3, 4]]), 6)  # node 5 isolated
    i, p, p2 = random_walk_powers(a, 2)
    np.testing.assert_array_equal(i.toarray(), np.eye(6))
    assert p[0, 1] == pytest.approx(1 / 4) and p[1, 0] == 1.0 and p[1, 2] == 0.0
    assert p2[0, 0] == pytest.approx(1.0) and p2[1, 2] == pytest.approx(1 / 4)
    assert p[5].nnz == 0 and p2[5].nnz == 0


def test_random_walk_zero_steps_is_identity():
    a = adjacency(np.array([[0, 1], [1, 2]]), 3)
    out = random_walk_powers(a, 0)
    assert len(out) == 1
    np.testing.assert_array_equal(out[0].toarray(), np.eye(3))


# --- union_pairs --------------------------------------------------------------


def _check_union(mats: list[sp.spmatrix]) -> None:
    dense = [sp.csr_matrix(m).toarray() for m in mats]
    supports = []
    for m in mats:
        c = sp.coo_matrix(m)
        supports.append(set(zip(c.row.tolist(), c.col.tolist())))
    row, col, values = union_pairs(mats)
    n = dense[0].shape[0]
    assert row.shape == col.shape == (values.shape[0],)
    assert values.shape[1] == len(mats)
    key = row.astype(np.int64) * n + col
    assert np.all(np.diff(key) > 0), "pairs must be sorted row-major and unique"
    assert set(zip(row.tolist(), col.tolist())) == set().union(*supports)
    for j, d in enumerate(dense):
        np.testing.assert_array_equal(values[:, j], d[row, col])


def test_union_pairs_hand_worked():
    m1 = sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 0.0]]))
    m2 = sp.csr_matrix(np.array([[0.0, 2.0], [0.0, 3.0]]))
    row, col, values = union_pairs([m1, m2])
    np.testing.assert_array_equal(row, [0, 0, 1])
    np.testing.assert_array_equal(col, [0, 1, 1])
    np.testing.assert_array_equal(values, [[1.0, 0.0], [0.0, 2.0], [0.0, 3.0]])


def test_union_pairs_values_of_opposite_sign_do_not_cancel():
    m1 = sp.csr_matrix(np.array([[0.0, 1.0], [0.0, 0.0]]))
    m2 = sp.csr_matrix(np.array([[0.0, -1.0], [2.0, 0.0]]))
    row, col, values = union_pairs([m1, m2])
    np.testing.assert_array_equal(row, [0, 1])
    np.testing.assert_array_equal(col, [1, 0])
    np.testing.assert_array_equal(values, [[1.0, -1.0], [0.0, 2.0]])


def test_union_pairs_of_truncated_powers(graph):
    a = adjacency(graph.edge_index, graph.n)
    mats = adjacency_powers(a, K, truncation=Truncation(tau=0.05, topk=3)) + adjacency_powers(a, 2)
    _check_union(mats)


@pytest.mark.parametrize("seed", range(4))
def test_union_pairs_random_sparse(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 41))
    mats = [sp.random(n, n, density=float(rng.uniform(0.02, 0.3)), format=fmt, random_state=seed * 10 + t) for t, fmt in enumerate(["csr", "coo", "csc"])]
    mats = [m - 0.5 * (m != 0) for m in mats]  # negative values too
    _check_union(mats)


def test_union_pairs_non_canonical_csr():
    # Unsorted indices and a duplicate (summed, as scipy reads it).
    m = sp.csr_matrix((np.array([1.0, 2.0, 3.0, 4.0]), np.array([2, 0, 2, 1]), np.array([0, 3, 3, 4])), shape=(3, 3))
    ref = m.toarray()
    row, col, values = union_pairs([m])
    np.testing.assert_array_equal(row, [0, 0, 2])
    np.testing.assert_array_equal(col, [0, 2, 1])
    np.testing.assert_array_equal(values[:, 0], ref[row, col])
    assert ref[0, 2] == 4.0
