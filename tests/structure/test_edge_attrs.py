"""Edge attributes per pair: which listed edge each pair takes its attributes from (a plain loop as the
reference), and the coding the data's dtype decides."""
from __future__ import annotations

import numpy as np
import pytest

from xmask_cli.structure.edge_attrs import EdgeCoding, attrs_digest, edge_coding, edge_pairs


def loop_pairs(edge_index: np.ndarray, attr: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    """The rule by hand: listed directions first (first listing wins), then reverses of unlisted pairs."""
    out: dict[tuple[int, int], np.ndarray] = {}
    for e, (s, d) in enumerate(edge_index.T.tolist()):
        if s != d and (s, d) not in out:
            out[(s, d)] = attr[e]
    for e, (s, d) in enumerate(edge_index.T.tolist()):
        if s != d and (d, s) not in out:
            out[(d, s)] = attr[e]
    return out


def as_dict(counts: np.ndarray, col: np.ndarray, attr: np.ndarray) -> dict[tuple[int, int], np.ndarray]:
    rows = np.repeat(np.arange(len(counts)), counts)
    return {(int(r), int(c)): a for r, c, a in zip(rows, col, attr)}


def test_hand_graph_directions_duplicates_and_self_loops():
    # 0->1 and 1->0 listed with different attributes; 2->3 only one way; 1->2 twice (first wins); a self loop.
    ei = np.array([[0, 1, 2, 1, 1, 3], [1, 0, 3, 2, 2, 3]])
    attr = np.array([[1, 0], [2, 1], [3, 0], [4, 1], [9, 9], [7, 7]])
    counts, col, got = edge_pairs(ei, attr, 5)
    assert counts.tolist() == [1, 2, 2, 1, 0]  # node 4 isolated; row 3 has (3, 2) only (the loop is dropped)
    want = {(0, 1): [1, 0], (1, 0): [2, 1], (1, 2): [4, 1], (2, 1): [4, 1], (2, 3): [3, 0], (3, 2): [3, 0]}
    assert {k: v.tolist() for k, v in as_dict(counts, col, got).items()} == want
    rows = np.repeat(np.arange(5), counts)
    assert np.all(np.diff(rows * 5 + col) > 0)  # row-major, columns ascending


@pytest.mark.parametrize("seed", range(4))
def test_random_multigraphs_match_the_loop(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 25))
    ei = rng.integers(0, n, size=(2, int(rng.integers(0, 60))))
    attr = rng.normal(size=(ei.shape[1], 3)).astype(np.float32)
    counts, col, got = edge_pairs(ei, attr, n)
    ours, want = as_dict(counts, col, got), loop_pairs(ei, attr)
    assert ours.keys() == want.keys() and len(ours) == int(counts.sum())
    for k in want:
        np.testing.assert_array_equal(ours[k], want[k])


def test_coding_follows_the_dtype():
    ints = [np.array([[0, 2, 1], [4, 0, 0]]), np.zeros((0, 3), dtype=np.int64)]
    assert edge_coding(ints) == EdgeCoding("index", (5, 3, 2))
    assert edge_coding(ints, vocab=(5, 6, 2)) == EdgeCoding("index", (5, 6, 2))  # a known vocabulary
    assert edge_coding(ints, vocab=(3, 6)) == EdgeCoding("index", (5, 6, 2))  # the data's codes beyond it
    assert edge_coding([np.array([[True], [False]])]) == EdgeCoding("index", (2,))
    floats = [np.eye(4, dtype=np.float32)]
    assert edge_coding(floats) == EdgeCoding("linear", (4,)) and edge_coding(floats).columns == 4
    with pytest.raises(ValueError, match="codes >= 0"):
        edge_coding([np.array([[0], [-1]])])
    with pytest.raises(ValueError, match="columns in different graphs"):
        edge_coding([np.zeros((1, 2), dtype=int), np.zeros((1, 3), dtype=int)])
    with pytest.raises(ValueError, match="encoding must be one of"):
        EdgeCoding("onehot", (2,))
    with pytest.raises(ValueError, match="one column count"):
        EdgeCoding("linear", (2, 3))


def test_digest_changes_with_values_and_dtype():
    a = [np.array([[1, 2]]), np.array([[3, 4]])]
    assert attrs_digest(a) == attrs_digest([x.copy() for x in a])
    assert attrs_digest(a) != attrs_digest([a[0], np.array([[3, 5]])])
    assert attrs_digest(a) != attrs_digest([x.astype(np.float32) for x in a])
