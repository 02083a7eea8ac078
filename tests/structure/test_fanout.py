"""The fan-out cap of the large-graph rule: ``P_k = trunc(P_{k-1} cap(M))``, each against a dense numpy
computation of the documented rule written here, on hub graphs where the cap bites."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from tests.structure.test_powers import (
    dense_random_walk,
    dense_sym_norm,
    dense_truncate,
)
from xmask_cli.structure import (
    Truncation,
    adjacency,
    adjacency_powers,
    cap_rows,
    capped_rows,
    dropped_share,
    power_row_sums,
    random_walk_powers,
)
from xmask_cli.structure.csr_kernels import _row_flops
from xmask_cli.structure.rowblocks import PowerRows, WalkRows

K = 4
RTOL = 1e-10
ATOL = 1e-14


def dense_cap(m: np.ndarray, fanout: int, deg: np.ndarray) -> np.ndarray:
    """A row with more than ``fanout`` non-zeros keeps its diagonal (if non-zero), then the columns of smallest
    ``(degree, id)``, ``fanout`` entries in all; other rows whole. A plain loop over rows."""
    out = m.copy()
    for i in range(m.shape[0]):
        cols = [int(j) for j in np.flatnonzero(m[i])]
        if fanout <= 0 or len(cols) <= fanout:
            continue
        order = sorted(cols, key=lambda j: (j != i, deg[j], j))
        out[i] = 0.0
        out[i, order[:fanout]] = m[i, order[:fanout]]
    return out


def hub_graph(n: int, seed: int, hubs: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """A Barabási–Albert graph plus ``hubs`` nodes joined to half the graph: ``(edge_index, dense adjacency)``."""
    g = nx.barabasi_albert_graph(n, 2, seed=seed)
    rng = np.random.default_rng(seed)
    for h in range(hubs):
        g.add_edges_from((h, int(j)) for j in rng.choice(np.arange(hubs, n), size=n // 2, replace=False))
    e = np.array(list(g.edges()), dtype=np.int64).T
    a = np.zeros((n, n))
    a[e[0], e[1]] = a[e[1], e[0]] = 1.0
    return e, a


def test_cap_rows_hand_worked():
    # Hub 0 with leaves 1..5; leaf 5 also joined to 6 and 7, so it has degree 3; the others degree 1.
    e = np.array([[0, 0, 0, 0, 0, 5, 5], [1, 2, 3, 4, 5, 6, 7]])
    a = adjacency(e, 8)
    ah = dense_sym_norm(a.toarray())
    deg = a.toarray().sum(1)
    got = cap_rows(sp.csr_matrix(ah), 3, deg)
    # The hub's row (6 entries) keeps itself and its two neighbours of smallest degree (1, then smaller id).
    assert sorted(got[0].indices.tolist()) == [0, 1, 2]
    # Leaf 5's row (itself, 0, 6, 7: 4 entries) keeps itself, 6 and 7 (degree 1) over the hub (degree 5).
    assert sorted(got[5].indices.tolist()) == [5, 6, 7]
    for i in (1, 2, 3, 4, 6, 7):  # two entries each: whole
        np.testing.assert_array_equal(got[i].toarray(), ah[i:i + 1])
    # For Â these are the row's largest entries (Â_jl = (d_j d_l)^-1/2).
    assert got[0, 1] == got[0, 2] == ah[0, 1:].max() and ah[0, 5] < ah[0, 1]
    assert got.has_sorted_indices
    rows, cols = got.nonzero()  # the kept values are Â's
    np.testing.assert_array_equal(np.asarray(got[rows, cols]).ravel(), ah[rows, cols])
    assert capped_rows(a, Truncation(fanout=3)) == 2 and capped_rows(a, Truncation(fanout=6)) == 0


@pytest.mark.parametrize("fanout", [1, 2, 5, 17, 1000])
@pytest.mark.parametrize("seed", range(2))
def test_cap_rows_equals_a_row_loop(fanout, seed):
    e, a = hub_graph(60, seed)
    deg = a.sum(1)
    for m in (dense_sym_norm(a), a + np.eye(60), dense_random_walk(a)):
        got = cap_rows(sp.csr_matrix(m), fanout, deg)
        np.testing.assert_array_equal(got.toarray(), dense_cap(m, fanout, deg))
        assert np.diff(got.indptr).max() <= fanout
    assert capped_rows(adjacency(e, 60), Truncation(fanout=fanout)) == int(np.count_nonzero(deg + 1 > fanout))


RULES = [Truncation(fanout=4), Truncation(tau=1e-3, topk=12, fanout=6), Truncation(topk=8, fanout=3),
         Truncation(tau=0.01, fanout=10)]


def _ids(r: Truncation) -> str:
    return f"tau{r.tau}_topk{r.topk}_fanout{r.fanout}"


@pytest.mark.parametrize("rule", RULES, ids=_ids)
@pytest.mark.parametrize("seed", range(2))
def test_capped_sym_powers_equal_the_documented_rule_densely(seed, rule):
    e, a = hub_graph(50, seed)
    n = a.shape[0]
    ah = dense_sym_norm(a)
    right = dense_cap(ah, rule.fanout, a.sum(1))
    out = adjacency_powers(adjacency(e, n), K, truncation=rule)
    np.testing.assert_allclose(out[0].toarray(), ah, rtol=RTOL, atol=ATOL)
    ref, exact = ah, ah
    for p in out[1:]:
        got = p.toarray()
        ref = dense_truncate(ref @ right, rule.tau, rule.topk, prefer=got, protect=ah)
        exact = exact @ ah
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
        assert np.all(got[(a + np.eye(n)) != 0] > 0)  # every real edge and self loop survives the cap
        assert np.all(got <= exact * (1 + 1e-12))  # never above the exact power
    # The cap bites here: without it the stored powers differ.
    uncapped = adjacency_powers(adjacency(e, n), K, truncation=Truncation(rule.tau, rule.topk))
    assert any((p != q).nnz for p, q in zip(out[1:], uncapped[1:]))


@pytest.mark.parametrize("rule", [Truncation(fanout=4), Truncation(tau=1e-3, topk=10, fanout=5)], ids=_ids)
def test_capped_no_symnorm_equals_the_documented_rule_densely(rule):
    # R_1 = A + I; P_j = trunc(N_j(R_j)) with the exact row sums of (A + I)^j; R_{j+1} = (R_j on P_j's support) cap(A + I).
    e, a = hub_graph(45, 3)
    n = a.shape[0]
    ai = a + np.eye(n)
    right = dense_cap(ai, rule.fanout, a.sum(1))
    out = adjacency_powers(adjacency(e, n), K, normalization="no-symnorm", truncation=rule)
    raw = ai.copy()
    for j, p in enumerate(out, start=1):
        d = np.linalg.matrix_power(ai, j).sum(axis=1) ** -0.5
        ref = d[:, None] * raw * d[None, :]
        if j > 1:
            ref = dense_truncate(ref, rule.tau, rule.topk, prefer=p.toarray(), protect=ai)
        np.testing.assert_allclose(p.toarray(), ref, rtol=RTOL, atol=ATOL)
        raw = np.where(ref != 0, raw, 0.0) @ right
    uncapped = adjacency_powers(adjacency(e, n), K, normalization="no-symnorm", truncation=Truncation(rule.tau, rule.topk))
    assert (out[-1] != uncapped[-1]).nnz > 0


@pytest.mark.parametrize("rule", [Truncation(fanout=3), Truncation(tau=1e-3, topk=9, fanout=4)], ids=_ids)
def test_capped_random_walks_equal_the_documented_rule_densely(rule):
    e, a = hub_graph(40, 5)
    n = a.shape[0]
    p = dense_random_walk(a)
    right = dense_cap(p, rule.fanout, a.sum(1))
    out = random_walk_powers(adjacency(e, n), K, truncation=rule)
    np.testing.assert_allclose(out[1].toarray(), p, rtol=RTOL, atol=ATOL)
    ref = p
    for m in out[2:]:
        got = m.toarray()
        ref = dense_truncate(ref @ right, rule.tau, rule.topk, prefer=got, protect=p)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    assert (out[-1] != random_walk_powers(adjacency(e, n), K, truncation=Truncation(rule.tau, rule.topk))[-1]).nnz > 0


@pytest.mark.parametrize("normalization", ["sym", "no-symnorm"])
def test_a_cap_above_every_degree_changes_nothing(normalization):
    # Every row of Â holds at most fanout entries: the rule is the tau / top-k rule alone, bit for bit.
    e, a = hub_graph(80, 1, hubs=0)
    fanout = int(a.sum(1).max()) + 1
    ad = adjacency(e, 80)
    for tau, topk in ((0.0, 0), (1e-3, 6)):
        with_cap = adjacency_powers(ad, K, normalization=normalization, truncation=Truncation(tau, topk, fanout))
        without = adjacency_powers(ad, K, normalization=normalization, truncation=Truncation(tau, topk))
        for p, q in zip(with_cap, without):
            np.testing.assert_array_equal(p.indptr, q.indptr)
            np.testing.assert_array_equal(p.indices, q.indices)
            np.testing.assert_array_equal(p.data, q.data)
    # With tau = topk = 0 that is the exact power.
    exact = adjacency_powers(ad, K, truncation=Truncation(0.0, 0, fanout))
    for k, p in enumerate(exact, start=1):
        np.testing.assert_allclose(p.toarray(), np.linalg.matrix_power(dense_sym_norm(a), k), rtol=RTOL, atol=ATOL)


def test_a_star_costs_fanout_per_entry_not_its_degree():
    # The work of each product row (its multiply-adds) is bounded by fanout x the entries of the row it
    # extends, so a star costs about what its entries cost, not leaves^2.
    leaves, fanout, topk = 3000, 16, 32
    a = adjacency(np.stack([np.zeros(leaves, dtype=np.int64), np.arange(1, leaves + 1)]), leaves + 1)
    rule = Truncation(1e-6, topk, fanout)
    out = adjacency_powers(a, 3, truncation=rule)
    right = cap_rows(out[0], fanout, np.diff(a.indptr))
    for prev in out[:-1]:
        flops = _row_flops(prev.indptr, prev.indices, right.indptr)
        assert flops.sum() <= fanout * prev.nnz
        # Without the cap each leaf would expand the hub's whole row.
        assert _row_flops(prev.indptr, prev.indices, out[0].indptr)[1:].min() > leaves
    # The hub keeps all its edges; a leaf keeps itself, the hub and the leaves the hub passes mass to.
    for p in out:
        assert p[0].nnz == leaves + 1
    assert set(out[1][5].indices.tolist()) == {0, 5, *range(1, fanout)}


@pytest.mark.parametrize("normalization", ["sym", "no-symnorm"])
def test_capped_power_rows_equal_the_whole_powers(normalization):
    e, _ = hub_graph(300, 7)
    ad = adjacency(e, 300)
    rule = Truncation(1e-4, 9, 6)
    whole = adjacency_powers(ad, K, normalization=normalization, truncation=rule)
    rows = PowerRows(ad, K, normalization=normalization, truncation=rule)
    for s, t in ((0, 1), (1, 77), (77, 300)):
        for got, want in zip(rows.rows(s, t), whole):
            want = want[s:t]
            np.testing.assert_array_equal(got.indptr, want.indptr)
            np.testing.assert_array_equal(got.indices, want.indices)
            np.testing.assert_array_equal(got.data, want.data)
    walks, wrows = random_walk_powers(ad, 4, truncation=rule), WalkRows(ad, 4, truncation=rule)
    for got, want in zip(wrows.rows(10, 200), walks):
        np.testing.assert_array_equal(got.toarray(), want[10:200].toarray())


def test_dropped_share_counts_what_the_cap_drops():
    e, a = hub_graph(60, 2)
    rule = Truncation(fanout=4)  # the cap alone: every loss is the cap's
    out = adjacency_powers(adjacency(e, 60), K, truncation=rule)
    share = dropped_share(out, power_row_sums(adjacency(e, 60), K))
    ah = dense_sym_norm(a)
    for k, p in enumerate(out, start=1):
        ref = 1.0 - p.toarray().sum(1) / np.linalg.matrix_power(ah, k).sum(1)
        np.testing.assert_allclose(share[:, k - 1], np.clip(ref, 0, 1), atol=1e-12)
    assert np.all(share[:, 0] == 0) and share[:, 1].max() > 0.05
