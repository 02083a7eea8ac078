"""Splits against independent set arithmetic, the real bundled loaders and hand-worked sizes."""
from __future__ import annotations

import json
from types import SimpleNamespace

import networkx as nx
import numpy as np
import pytest
import torch

from xmask_cli.data.load import load_graphs
from xmask_cli.data.registry import get_dataset
from xmask_cli.engine.scoring.splits import (
    Split,
    check_parts,
    edge_pair_keys,
    edge_split,
    graph_split,
    node_split,
    random_split,
    random_split_sizes,
)
from xmask_cli.errors import UsageError


def assert_partition(split: Split, n: int) -> None:
    """Disjoint and covering ``range(n)``, checked with Python sets."""
    tr, va, te = (set(a.tolist()) for a in (split.train, split.val, split.test))
    assert len(tr) == len(split.train) and len(va) == len(split.val) and len(te) == len(split.test)
    assert not (tr & va) and not (tr & te) and not (va & te)
    assert tr | va | te == set(range(n))
    for a in (split.train, split.val, split.test):
        assert a.dtype == np.int64 and a.ndim == 1


@pytest.fixture(scope="module")
def cora(tmp_path_factory: pytest.TempPathFactory):
    return load_graphs(get_dataset("cora"), data_root=None, cache_dir=tmp_path_factory.mktemp("cora"), offline=True)


@pytest.fixture(scope="module")
def mutag(tmp_path_factory: pytest.TempPathFactory):
    return load_graphs(get_dataset("mutag"), data_root=None, cache_dir=tmp_path_factory.mktemp("mutag"), offline=True)


# ---------------------------------------------------------------- random_split

@pytest.mark.parametrize("n, fractions, sizes", [
    (188, (0.8, 0.1, 0.1), (152, 18, 18)),   # 18.8 -> 18 twice, remainder to train
    (10, (0.8, 0.1, 0.1), (8, 1, 1)),
    (100, (0.42, 0.29, 0.29), (42, 29, 29)),  # 100 * 0.29 is 28.999... in floating point
    (7, (0.6, 0.2, 0.2), (5, 1, 1)),
    (0, (0.8, 0.1, 0.1), (0, 0, 0)),
])
def test_random_split_sizes_and_partition(n, fractions, sizes):
    s = random_split(n, fractions, seed=3)
    assert s.sizes() == sizes
    assert_partition(s, n)


@pytest.mark.parametrize("fractions", [(0.8, 0.1, 0.1), (0.6, 0.2, 0.2), (0.85, 0.05, 0.1)])
def test_random_split_sizes_are_the_splits_sizes_for_every_seed(fractions):
    for n in range(0, 60):
        sizes = random_split_sizes(n, fractions)
        assert all(random_split(n, fractions, seed=s).sizes() == sizes for s in (0, 5))


def test_check_parts_names_the_empty_parts_and_every_size():
    check_parts((3, 1, 1), split="random-60-20-20", items="nodes", source="g")  # nothing empty
    with pytest.raises(UsageError) as e:
        check_parts((2, 0, 0), split="random-60-20-20", items="nodes", source="/d/g")
    assert str(e.value).startswith("/d/g: the random-60-20-20 split of 2 nodes leaves no val and no test nodes "
                                   "(train 2, val 0, test 0)")
    with pytest.raises(UsageError, match="of 1 graph leaves no val and no test graphs"):
        check_parts((1, 0, 0), split="random-8-1-1", items="graphs", source="s")
    with pytest.raises(UsageError, match="leaves no train edges"):
        check_parts((0, 1, 1), split="edge-85-5-10", items="edges", source="s")
    # A part the caller does not require may be empty (an edge-regression fraction of 0).
    check_parts((4, 0, 1), split="rows", items="rows", source="s", required=("train", "test"))


def test_edge_pair_keys_count_the_undirected_edges_as_networkx_does():
    rng = np.random.default_rng(0)
    ei = rng.integers(0, 30, size=(2, 200))  # repeats, both directions and self loops
    g = nx.Graph()
    g.add_nodes_from(range(30))
    g.add_edges_from((int(u), int(v)) for u, v in ei.T if u != v)
    keys = edge_pair_keys(ei, 30)
    assert len(keys) == g.number_of_edges()
    assert sorted((int(k // 30), int(k % 30)) for k in keys) == sorted(tuple(sorted(e)) for e in g.edges())
    assert np.all(np.diff(keys) > 0)


def test_random_split_deterministic_per_seed():
    a, b, c = random_split(500, seed=1), random_split(500, seed=1), random_split(500, seed=2)
    for part in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(a, part), getattr(b, part))
    assert not np.array_equal(a.test, c.test)
    # It is numpy's default_rng permutation, so it can be reproduced without xmask.
    perm = np.random.default_rng(1).permutation(500)
    np.testing.assert_array_equal(np.concatenate([a.train, a.val, a.test]), perm)


def test_random_split_rejects_bad_fractions():
    with pytest.raises(ValueError):
        random_split(10, (0.5, 0.2, 0.2))
    with pytest.raises(ValueError):
        random_split(10, (1.2, -0.1, -0.1))


def test_split_dict_round_trip_through_json():
    s = random_split(50, (0.6, 0.2, 0.2), seed=9, name="random-60-20-20")
    d = json.loads(json.dumps(s.to_dict()))
    assert d["name"] == "random-60-20-20" and d["seed"] == 9 and isinstance(d["train"], list)
    back = Split.from_dict(d)
    assert (back.name, back.seed) == (s.name, s.seed)
    for part in ("train", "val", "test"):
        np.testing.assert_array_equal(getattr(back, part), getattr(s, part))
        assert getattr(back, part).dtype == np.int64


# ---------------------------------------------------------------- node / graph splits

def test_public_cora_split(cora):
    data = cora.dataset[0]
    s = node_split(get_dataset("cora").split, data, seed=0)
    assert s.name == "public" and s.sizes() == (140, 500, 1000)
    np.testing.assert_array_equal(s.train, torch.nonzero(data.train_mask).view(-1).numpy())
    np.testing.assert_array_equal(s.test, torch.nonzero(data.test_mask).view(-1).numpy())
    # Fixed masks: the seed must not matter.
    np.testing.assert_array_equal(node_split("public", data, seed=5).val, s.val)


def test_random_node_split_over_cora_nodes(cora):
    data = cora.dataset[0]
    s = node_split("random-60-20-20", data, seed=0)
    assert s.sizes() == (2708 - 2 * 541, 541, 541)  # floor(2708 * 0.2) = 541
    assert_partition(s, 2708)
    assert not np.array_equal(s.val, node_split("random-60-20-20", data, seed=1).val)


def test_wikics_official_split_takes_column_zero():
    rng = np.random.default_rng(0)
    n = 30
    train = torch.from_numpy(rng.random((n, 20)) < 0.3)
    val = torch.from_numpy(rng.random((n, 20)) < 0.3)
    test = torch.from_numpy(rng.random(n) < 0.3)
    data = SimpleNamespace(train_mask=train, val_mask=val, test_mask=test, num_nodes=n)
    s = node_split("official-0", data, seed=0)
    assert s.train.tolist() == [i for i in range(n) if train[i, 0]]
    assert s.val.tolist() == [i for i in range(n) if val[i, 0]]
    assert s.test.tolist() == [i for i in range(n) if test[i]]


def test_tu_split_on_mutag(mutag):
    spec = get_dataset("mutag")
    s = graph_split(spec.split, mutag.dataset, seed=0)
    assert s.name == "random-8-1-1" and s.sizes() == (152, 18, 18)
    assert_partition(s, 188)
    again, other = graph_split(spec.split, mutag.dataset, seed=0), graph_split(spec.split, mutag.dataset, seed=1)
    np.testing.assert_array_equal(again.train, s.train)
    assert not np.array_equal(other.train, s.train)


def test_scaffold_split_uses_get_idx_split():
    idx = {"train": torch.tensor([0, 2, 4]), "valid": torch.tensor([1]), "test": torch.tensor([3, 5])}
    s = graph_split("scaffold", SimpleNamespace(get_idx_split=lambda: idx), seed=7)
    assert (s.train.tolist(), s.val.tolist(), s.test.tolist()) == ([0, 2, 4], [1], [3, 5])
    assert s.name == "scaffold"


def test_unknown_split_names_fail():
    with pytest.raises(ValueError):
        node_split("scaffold", SimpleNamespace(num_nodes=3), seed=0)
    with pytest.raises(ValueError):
        graph_split("public", [], seed=0)


# ---------------------------------------------------------------- edge split

def undirected_pairs(ei: np.ndarray) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in ei.T.tolist()}


def test_edge_split_on_cora(cora):
    ei = cora.edge_index[0]
    n = int(cora.num_nodes[0])
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(ei.T.tolist())
    g.remove_edges_from(nx.selfloop_edges(g))
    m = g.number_of_edges()

    sp = edge_split(ei, n, seed=0, num_neg_per_pos=3)
    train = undirected_pairs(sp.train_edge_index)
    val, test = undirected_pairs(sp.val_pos), undirected_pairs(sp.test_pos)
    # Sizes: floor of the fractions over unordered edges, remainder to train.
    assert len(val) == sp.val_pos.shape[1] == int(m * 0.05)
    assert len(test) == sp.test_pos.shape[1] == int(m * 0.10)
    assert len(train) == m - len(val) - len(test)
    # Train edges come in both directions, and together the three parts are the graph.
    directed = set(map(tuple, sp.train_edge_index.T.tolist()))
    assert all((v, u) in directed for u, v in directed) and len(directed) == 2 * len(train)
    assert train | val | test == {(min(u, v), max(u, v)) for u, v in g.edges()}
    # No held-out edge leaks into the structure, in either direction.
    assert not (train & val) and not (train & test) and not (val & test)
    assert not any((v, u) in directed or (u, v) in directed for u, v in val | test)
    # Negatives: M per positive, non-edges of the full graph, no self loops, no repeats.
    assert sp.val_neg.shape == (2, 3 * len(val)) and sp.test_neg.shape == (2, 3 * len(test))
    negs = np.concatenate([sp.val_neg, sp.test_neg], axis=1)
    assert (negs[0] < negs[1]).all()
    assert not any(g.has_edge(u, v) for u, v in negs.T.tolist())
    assert len(undirected_pairs(negs)) == negs.shape[1]


def test_edge_split_fixed_for_a_seed(cora):
    ei, n = cora.edge_index[0], int(cora.num_nodes[0])
    a, b, c = edge_split(ei, n, seed=4), edge_split(ei, n, seed=4), edge_split(ei, n, seed=5)
    for f in ("train_edge_index", "val_pos", "val_neg", "test_pos", "test_neg"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert not np.array_equal(a.test_pos, c.test_pos)
    assert not np.array_equal(a.test_neg, c.test_neg)
    # The split depends on the edge set only, not on how it is stored.
    shuffled = ei[:, np.random.default_rng(0).permutation(ei.shape[1])]
    d = edge_split(torch.from_numpy(shuffled), n, seed=4)
    np.testing.assert_array_equal(d.test_pos, a.test_pos)
    np.testing.assert_array_equal(d.val_neg, a.val_neg)


def test_edge_split_small_graph_self_loops_and_limits():
    # A 6-cycle plus a self loop, both directions stored: 6 unordered edges, 9 non-edges.
    cyc = [(i, (i + 1) % 6) for i in range(6)] + [(2, 2)]
    ei = np.array(cyc + [(v, u) for u, v in cyc], dtype=np.int64).T
    sp = edge_split(ei, 6, seed=0, fractions=(0.5, 0.25, 0.25), num_neg_per_pos=3)
    assert sp.train_pos.shape == (2, 4) and sp.val_pos.shape == (2, 1) and sp.test_pos.shape == (2, 1)
    assert not (sp.train_edge_index[0] == sp.train_edge_index[1]).any()  # the self loop is dropped
    negs = undirected_pairs(np.concatenate([sp.val_neg, sp.test_neg], axis=1))
    non_edges = {(u, v) for u in range(6) for v in range(u + 1, 6)} - {(min(e), max(e)) for e in cyc}
    assert len(negs) == 6 and negs <= non_edges
    with pytest.raises(ValueError):  # 2 positives * 5 negatives > 9 non-edges
        edge_split(ei, 6, seed=0, fractions=(0.5, 0.25, 0.25), num_neg_per_pos=5)
