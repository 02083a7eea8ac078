"""Shared graphs for the structure tests.

Every case carries its raw edge list (self loops, duplicates and reversed
duplicates left in on purpose) and builds its own reference adjacency with a
plain Python loop, so that the references never go through
``xmask_cli.structure.adjacency``.
"""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np
import pytest


@dataclass(frozen=True)
class Case:
    """A small test graph given as a raw edge list."""

    name: str
    n: int
    edges: tuple[tuple[int, int], ...]

    @property
    def edge_index(self) -> np.ndarray:
        """``[2, E]`` int64 array, exactly as given (loops and duplicates kept)."""
        return np.array(self.edges, dtype=np.int64).reshape(-1, 2).T.copy()

    def dense(self, symmetric: bool = True) -> np.ndarray:
        """Reference binary adjacency: no self loops, duplicates collapsed."""
        a = np.zeros((self.n, self.n))
        for u, v in self.edges:
            if u == v:
                continue
            a[u, v] = 1.0
            if symmetric:
                a[v, u] = 1.0
        return a

    def nx_graph(self, directed: bool = False) -> nx.Graph:
        """networkx graph on nodes ``0..n-1`` without self loops."""
        g = nx.DiGraph() if directed else nx.Graph()
        g.add_nodes_from(range(self.n))
        g.add_edges_from((u, v) for u, v in self.edges if u != v)
        return g

    @property
    def isolated(self) -> np.ndarray:
        """Boolean mask of nodes without any (non-loop) edge."""
        return self.dense().sum(axis=1) == 0


def _gnp_case(seed: int) -> Case:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 41))
    p = float(rng.uniform(0.05, 0.35))
    g = nx.gnp_random_graph(n, p, seed=seed)
    return Case(f"gnp{seed}_n{n}", n, tuple(g.edges()))


def _messy_case(seed: int) -> Case:
    """numpy random edge list with self loops, duplicates and reversed duplicates."""
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(5, 41))
    e = rng.integers(0, n, size=(int(rng.integers(n, 3 * n)), 2))
    loops = np.repeat(rng.integers(0, n, size=(3, 1)), 2, axis=1)
    dup = e[: max(1, len(e) // 4)]
    edges = np.concatenate([e, loops, dup, dup[:, ::-1]])
    return Case(f"messy{seed}_n{n}", n, tuple(map(tuple, edges.tolist())))


HAND_CASES = [
    Case("path5", 5, ((0, 1), (1, 2), (2, 3), (3, 4))),
    Case("star6", 6, tuple((0, j) for j in range(1, 6))),
    # two triangles and an edge: three components
    Case("disconnected", 8, ((0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (6, 7))),
    # a path plus two isolated nodes (3 and 5; 5 only has a self loop)
    Case("isolated", 6, ((0, 1), (1, 2), (2, 4), (5, 5))),
    Case("loops_dups", 5, ((0, 0), (0, 1), (1, 0), (0, 1), (1, 2), (2, 2), (2, 3), (3, 2), (3, 4), (4, 4))),
]
RANDOM_CASES = [_gnp_case(s) for s in range(6)] + [_messy_case(s) for s in range(3)]
ALL_CASES = HAND_CASES + RANDOM_CASES


@pytest.fixture(params=ALL_CASES, ids=lambda c: c.name)
def graph(request: pytest.FixtureRequest) -> Case:
    """Every shared graph, hand-worked and random."""
    return request.param


@pytest.fixture(params=[c for c in ALL_CASES if not c.isolated.any()], ids=lambda c: c.name)
def graph_no_isolated(request: pytest.FixtureRequest) -> Case:
    """The shared graphs that have no isolated node."""
    return request.param


def random_directed_case(seed: int, n: int | None = None, p: float = 0.15) -> Case:
    """Seeded directed graph (some reciprocal edges, maybe isolated nodes)."""
    rng = np.random.default_rng(2000 + seed)
    n = int(rng.integers(5, 41)) if n is None else n
    g = nx.gnp_random_graph(n, p, seed=seed, directed=True)
    return Case(f"digraph{seed}_n{n}", n, tuple(g.edges()))


@pytest.fixture(params=range(5), ids=lambda s: f"digraph{s}")
def digraph(request: pytest.FixtureRequest) -> Case:
    """Seeded random directed graphs."""
    return random_directed_case(request.param)


def connected_case(seed: int, n: int, p: float) -> Case:
    """Seeded random graph made connected by a path over a random permutation."""
    rng = np.random.default_rng(3000 + seed)
    g = nx.gnp_random_graph(n, p, seed=seed)
    perm = rng.permutation(n)
    g.add_edges_from(zip(perm[:-1].tolist(), perm[1:].tolist()))
    assert nx.is_connected(g)
    return Case(f"connected{seed}_n{n}", n, tuple(g.edges()))


@pytest.fixture
def make_connected():
    """Factory for seeded connected graphs: ``make_connected(seed, n, p)``."""
    return connected_case


@pytest.fixture
def make_directed():
    """Factory for seeded directed graphs: ``make_directed(seed, n=None, p=0.15)``."""
    return random_directed_case
