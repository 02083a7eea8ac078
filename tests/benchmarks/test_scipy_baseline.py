"""benchmarks/scipy_baseline.py: the per-graph scipy pipeline computes what the cache stores, and its check
notices when it does not."""
from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from tests.benchmarks import load_script
from xmask_cli.config_resolve import resolve
from xmask_cli.prepare import prepare_graphs


@pytest.fixture(scope="module")
def B():
    return load_script("scipy_baseline")


def _random_graph(rng: np.random.Generator, n: int, p: float, isolated: int = 0) -> np.ndarray:
    """Edges of a G(n, p) graph whose last ``isolated`` nodes have no edges (several components)."""
    a = np.triu(rng.random((n, n)) < p, 1)
    a[n - isolated:, :] = False
    a[:, n - isolated:] = False
    r, c = np.nonzero(a)
    return np.stack([r, c])


@pytest.fixture(scope="module")
def graphs():
    """Small graphs (every eigenpair kept), graphs above full_max_nodes (lowest m per component, dense and
    ARPACK components), and one above large.min_nodes (truncated powers, SPD radius 2)."""
    rng = np.random.default_rng(3)
    specs = [(12, 0.3, 0), (40, 0.08, 3), (90, 0.05, 2), (150, 0.03, 5), (260, 0.02, 0), (230, 0.025, 1)]
    edges = [_random_graph(rng, n, p, iso) for n, p, iso in specs]
    # two disjoint copies of one graph: every non-zero eigenvalue is repeated across components
    e = _random_graph(rng, 70, 0.06)
    edges.append(np.concatenate([e, e + 70], axis=1))
    specs.append((140, 0, 0))
    return edges, np.array([s[0] for s in specs])


@pytest.fixture(scope="module")
def structure():
    # The 260- and 230-node graphs count as large here: truncation (tau, top-k) and the SPD radius apply.
    # fanout 6: the rows of the nodes of degree 6 or more are capped in the right-hand factor.
    return resolve("graph-level", ["structure.large.min_nodes=200", "structure.large.topk=12",
                                   "structure.large.tau=1e-3", "structure.large.fanout=6",
                                   "structure.spectrum.num_eigs=6"]).structure


@pytest.fixture(scope="module")
def cache(graphs, structure, tmp_path_factory):
    edges, nn = graphs
    s = prepare_graphs(dataset_key="tiny", level="graph", edges=edges, num_nodes=nn, fingerprint="t",
                       cfg=structure, cache_dir=tmp_path_factory.mktemp("cache"), force=True)
    assert s.truncation["large_graphs"] == 2 and s.truncation["capped_rows"] > 0
    return s.path


@pytest.fixture(scope="module")
def results(B, graphs, structure):
    return B.baseline_all(*graphs, structure)


def test_baseline_writes_what_the_cache_holds(B, results, cache) -> None:
    assert B.check_equal(results, cache) == []
    # The truncation actually cut rows of the large graphs (else the cap would be untested).
    for r in results[4:6]:
        assert r["dropped"] is not None and r["dropped"][:, 1:].max() > 0
        row = r["powers"][0]
        assert np.bincount(row).max() >= 12


def test_check_notices_each_kind_of_difference(B, results, cache) -> None:
    def changed(edit) -> list[str]:
        r = copy.deepcopy(results)
        edit(r)
        return B.check_equal(r, cache)

    def drop_pair(r):  # one pair fewer in a large graph's powers
        row, col, vals = r[4]["powers"]
        r[4]["powers"] = (row[1:], col[1:], vals[1:])

    def scale_value(r):
        r[1]["powers"][2][5, 1] *= 1.001

    def move_distance(r):
        r[2]["spd"][2][7] += 1

    def shift_eigenvalue(r):
        r[3]["spectrum"][0][-1] += 1e-3

    def rotate_out_of_space(r):  # same eigenvalues, a vector replaced by one outside its eigenspace
        lam, vec = r[2]["spectrum"]
        v = vec.copy()
        v[:, -1] = np.roll(v[:, -1], 1)
        r[2]["spectrum"] = (lam, v)

    def merge_components(r):
        r[1]["component"] = np.zeros_like(r[1]["component"])

    def more_dropped(r):
        r[5]["dropped"] = r[5]["dropped"] * 1.01

    for edit, words in ((drop_pair, "other pairs"), (scale_value, "power values"), (move_distance, "distances"),
                        (shift_eigenvalue, "eigenvalues"), (rotate_out_of_space, "eigenvectors"),
                        (merge_components, "components"), (more_dropped, "dropped mass")):
        probs = changed(edit)
        assert probs and any(words in p for p in probs), (edit.__name__, probs)


def test_another_row_cap_is_not_the_same_output(B, graphs, structure, cache) -> None:
    # A baseline with a looser cap (topk 16) does other work: the check must refuse it.
    other = resolve("graph-level", ["structure.large.min_nodes=200", "structure.large.topk=16",
                                    "structure.large.tau=1e-3", "structure.spectrum.num_eigs=6"]).structure
    probs = B.check_equal(B.baseline_all(*graphs, other), cache)
    assert any("powers on other pairs" in p for p in probs)


def test_another_fanout_is_not_the_same_output(B, graphs, structure, cache) -> None:
    # Without the fan-out cap the baseline computes other powers: the check must notice.
    other = dataclasses.replace(structure, large=dataclasses.replace(structure.large, fanout=0))
    probs = B.check_equal(B.baseline_all(*graphs, other), cache)
    assert any("powers" in p for p in probs)


def test_truncate_matches_a_row_by_row_rule(B) -> None:
    """The vectorised rule against a plain loop over rows (protected first, tau, then largest, ties to the smaller
    column), on a matrix with many tied values."""
    rng = np.random.default_rng(0)
    n, topk, tau = 30, 5, 0.05
    dense = rng.choice([0.0, 0.02, 0.1, 0.2, 0.3], size=(n, n), p=[0.4, 0.15, 0.15, 0.15, 0.15])
    protect = sp.csr_matrix((rng.random((n, n)) < 0.08).astype(float))
    got = B.truncate(sp.csr_matrix(dense), protect, tau, topk).toarray()
    want = np.zeros_like(dense)
    pd = protect.toarray() > 0
    for i in range(n):
        cols = np.flatnonzero(dense[i])
        prot = [c for c in cols if c == i or pd[i, c]]
        others = [c for c in cols if c not in prot and dense[i, c] >= tau]
        if len(prot) + len(others) > topk:
            others = sorted(others, key=lambda c: (-dense[i, c], c))[:max(topk - len(prot), 0)]
        want[i, prot + others] = dense[i, prot + others]
    np.testing.assert_array_equal(got, want)
