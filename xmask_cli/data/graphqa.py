"""GraphQA-style structural-reasoning tasks, generated offline from a seed.

``--dataset graphqa:<task>`` builds ``num_graphs`` random graphs (Erdős–Rényi,
``n`` uniform in ``[min_nodes, max_nodes]``, edge probability uniform in
``[0.05, 0.4]``) from ``numpy.random.default_rng(seed)`` and labels each one
with the answer to one question. Every task is a graph-level classification:

========================  =========================================  ======================  ========
task                      label                                      query nodes (features)  directed
========================  =========================================  ======================  ========
``node_count``            ``n - min_nodes``                          none                    no
``edge_count``            ``min(#edges, EDGE_CAP)``                  none                    no
``node_degree``           degree of node ``a``                       ``a``                   no
``edge_existence``        1 if ``{a, b}`` is an edge                 ``a``, ``b``            no
``shortest_path``         hop distance ``a``-``b``, capped at         ``a``, ``b``            no
                          ``PATH_CAP``; 0 when unreachable
``connectivity``          1 if ``a`` and ``b`` are connected         ``a``, ``b``            no
``cycle_check``           1 if the graph has a cycle                 none                    no
``triangle_count``        ``min(#triangles, TRIANGLE_CAP)``          none                    no
``reachability``          1 if a directed path ``a -> b`` exists     ``a``, ``b``            yes
``directed_cycle_check``  1 if the graph has a directed cycle        none                    yes
========================  =========================================  ======================  ========

Node features are ``[1, is_a, is_b]`` (pair questions mark their two query
nodes, as GraphQA's encoders do). For the binary pair tasks the query pair is
drawn half of the time among the "yes" pairs (an edge, a connected pair, a
reachable pair) and half among the "no" pairs, when the graph has both, so the
classes stay balanced. No self loops.

Undirected tasks store every edge in both directions. The :data:`DIRECTED`
tasks store each edge once, ``u -> v``, in ``edge_index`` (no reverse edge),
and are built so that only the direction of the edges answers them: whatever
symmetrises the graph (powers, SPD, the Laplacian spectrum, RRWP) sees the
same undirected graph for either answer; the magnetic Laplacian, computed from
the directed edges, does not.

* ``reachability``: a random DAG: an Erdős–Rényi graph as above whose edges
  all point forward along a hidden random node order (so its undirected shadow
  is the same G(n, p), and node ids do not give the order away). "No" queries
  are reversed pairs (``b`` reaches ``a``) with probability
  :data:`REVERSED_SHARE`, otherwise any unreachable pair.
* ``directed_cycle_check``: a random DAG as above that has a "shortcut" edge
  ``x -> y`` (``y`` also reachable from ``x`` by a longer path); half of the
  graphs get that edge flipped to ``y -> x``, which closes a directed cycle and
  leaves the undirected graph unchanged. Both classes are drawn from the same
  undirected graphs. (After :data:`SHORTCUT_TRIES` draws without a shortcut, the
  last DAG is kept as a "no" graph.)

The split is fixed: 80/10/10 by a permutation seeded with the generation seed,
the same for every training seed (the registry's ``fixed-8-1-1``).

Example::

    ds = GraphQADataset("cycle_check", num_graphs=1000, seed=0)
    ds[0].x, ds[0].y, ds.num_classes
"""
from __future__ import annotations

from collections import deque

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset

__all__ = ["TASKS", "DIRECTED", "PAIR_TASKS", "GraphQADataset", "generate"]

TASKS = ("node_count", "edge_count", "node_degree", "edge_existence", "shortest_path", "connectivity",
         "cycle_check", "triangle_count", "reachability", "directed_cycle_check")
#: Tasks on directed graphs: ``edge_index`` holds each edge once, in its direction.
DIRECTED = frozenset({"reachability", "directed_cycle_check"})
#: Tasks whose features mark both query nodes ``a`` and ``b``.
PAIR_TASKS = ("edge_existence", "shortest_path", "connectivity", "reachability")
#: Classes stay few enough to learn from a thousand graphs.
EDGE_CAP, PATH_CAP, TRIANGLE_CAP = 40, 6, 10
#: Share of "no" reachability queries drawn among reversed pairs, which only edge direction tells from "yes" ones.
REVERSED_SHARE = 0.75
#: Draws of a DAG for ``directed_cycle_check`` before one without a shortcut edge is accepted.
SHORTCUT_TRIES = 50


def _bfs(adj: list[list[int]], source: int) -> np.ndarray:
    """Hop distances from ``source`` (-1 where unreachable); follows ``adj`` as given (successors if directed)."""
    dist = np.full(len(adj), -1, dtype=np.int64)
    dist[source] = 0
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for v in adj[u]:
            if dist[v] < 0:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def _components(adj: list[list[int]]) -> int:
    seen = np.zeros(len(adj), dtype=bool)
    count = 0
    for s in range(len(adj)):
        if not seen[s]:
            count += 1
            seen[_bfs(adj, s) >= 0] = True
    return count


def _successors(n: int, src: np.ndarray, dst: np.ndarray) -> list[list[int]]:
    adj: list[list[int]] = [[] for _ in range(n)]
    for u, v in zip(src.tolist(), dst.tolist()):
        adj[u].append(v)
    return adj


def _reach(succ: list[list[int]]) -> np.ndarray:
    """``[n, n]`` bool: ``[a, b]`` when a directed path ``a -> b`` exists, ``a != b``."""
    n = len(succ)
    out = np.stack([_bfs(succ, s) >= 0 for s in range(n)]) if n else np.zeros((0, 0), dtype=bool)
    np.fill_diagonal(out, False)  # queries never ask a node about itself
    return out


def _has_directed_cycle(succ: list[list[int]]) -> bool:
    """Kahn's algorithm: a directed graph is acyclic iff repeatedly removing sources empties it."""
    indeg = np.zeros(len(succ), dtype=np.int64)
    for vs in succ:
        for v in vs:
            indeg[v] += 1
    queue = deque(np.flatnonzero(indeg == 0).tolist())
    removed = 0
    while queue:
        u = queue.popleft()
        removed += 1
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                queue.append(v)
    return removed < len(succ)


def _random_dag(rng: np.random.Generator, min_nodes: int, max_nodes: int) -> tuple[int, np.ndarray, np.ndarray]:
    """G(n, p) as the undirected tasks draw it, every edge pointing forward along a random node order."""
    n = int(rng.integers(min_nodes, max_nodes + 1))
    p = float(rng.uniform(0.05, 0.4))
    order = rng.permutation(n)
    iu, ju = np.triu_indices(n, k=1)
    keep = rng.random(len(iu)) < p
    return n, order[iu[keep]].astype(np.int64), order[ju[keep]].astype(np.int64)


def _directed_graph(task: str, rng: np.random.Generator, min_nodes: int,
                    max_nodes: int) -> tuple[int, np.ndarray, np.ndarray, int, int, int]:
    """``(n, src, dst, a, b, label)`` of one graph of a :data:`DIRECTED` task."""
    if task == "reachability":
        n, src, dst = _random_dag(rng, min_nodes, max_nodes)
        reach = _reach(_successors(n, src, dst))
        a, b = (int(x) for x in rng.choice(n, size=2, replace=False))
        if rng.random() < 0.5:
            pool = np.argwhere(reach)
        else:
            # Mostly reversed pairs: their undirected view is the same as a "yes" pair's.
            reversed_pairs = np.argwhere(~reach & reach.T)
            if len(reversed_pairs) and rng.random() < REVERSED_SHARE:
                pool = reversed_pairs
            else:
                pool = np.argwhere(~reach & ~np.eye(n, dtype=bool))
        if len(pool):
            a, b = (int(x) for x in pool[int(rng.integers(len(pool)))])
        return n, src, dst, a, b, int(reach[a, b])
    # directed_cycle_check
    for _ in range(SHORTCUT_TRIES):
        n, src, dst = _random_dag(rng, min_nodes, max_nodes)
        succ = _successors(n, src, dst)
        reach = _reach(succ)
        # x -> y is a shortcut when another successor of x also reaches y; flipping it then closes a cycle.
        shortcuts = [i for i, (x, y) in enumerate(zip(src.tolist(), dst.tolist()))
                     if any(reach[z, y] for z in succ[x] if z != y)]
        if shortcuts:
            break
    a, b = (int(x) for x in rng.choice(n, size=2, replace=False))
    if shortcuts and rng.random() < 0.5:
        i = int(rng.choice(shortcuts))
        src[i], dst[i] = dst[i], src[i]
    return n, src, dst, a, b, int(_has_directed_cycle(_successors(n, src, dst)))


def _undirected_graph(task: str, rng: np.random.Generator, min_nodes: int,
                      max_nodes: int) -> tuple[int, np.ndarray, np.ndarray, int, int, int]:
    """``(n, u, v, a, b, label)`` of one graph of an undirected task; each edge once as ``u < v``."""
    n = int(rng.integers(min_nodes, max_nodes + 1))
    p = float(rng.uniform(0.05, 0.4))
    iu, ju = np.triu_indices(n, k=1)
    keep = rng.random(len(iu)) < p
    u, v = iu[keep], ju[keep]
    adj: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(u.tolist(), v.tolist()):
        adj[a].append(b)
        adj[b].append(a)
    a, b = (int(x) for x in rng.choice(n, size=2, replace=False))
    if task in ("edge_existence", "connectivity"):
        # Half the queries among "yes" answers, half among "no" (when the graph has one): balanced classes.
        want_yes = rng.random() < 0.5
        if task == "edge_existence":
            pool = np.flatnonzero(keep if want_yes else ~keep)
            if len(pool):
                i = int(rng.choice(pool))
                a, b = int(iu[i]), int(ju[i])
        else:
            dist = _bfs(adj, a)
            pool = np.flatnonzero(dist > 0) if want_yes else np.flatnonzero(dist < 0)
            if len(pool):
                b = int(rng.choice(pool))
    if task == "node_count":
        label = n - min_nodes
    elif task == "edge_count":
        label = min(len(u), EDGE_CAP)
    elif task == "node_degree":
        label = len(adj[a])
    elif task == "edge_existence":
        label = int(b in adj[a])
    elif task == "shortest_path":
        d = int(_bfs(adj, a)[b])
        label = 0 if d < 0 else min(d, PATH_CAP)
    elif task == "connectivity":
        label = int(_bfs(adj, a)[b] >= 0)
    elif task == "cycle_check":
        label = int(len(u) > n - _components(adj))  # a forest has exactly n - components edges
    else:
        sets = [set(x) for x in adj]
        label = min(sum(len(sets[x] & sets[y]) for x, y in zip(u.tolist(), v.tolist())) // 3, TRIANGLE_CAP)
    return n, u, v, a, b, label


def _num_classes(task: str, min_nodes: int, max_nodes: int) -> int:
    return {"node_count": max_nodes - min_nodes + 1, "edge_count": EDGE_CAP + 1, "node_degree": max_nodes,
            "edge_existence": 2, "shortest_path": PATH_CAP + 1, "connectivity": 2, "cycle_check": 2,
            "triangle_count": TRIANGLE_CAP + 1, "reachability": 2, "directed_cycle_check": 2}[task]


def generate(task: str, num_graphs: int = 1000, seed: int = 0, min_nodes: int = 5,
             max_nodes: int = 20) -> list[Data]:
    """``num_graphs`` labelled graphs for ``task`` (see the module docstring); a function of the arguments only.

    Raises:
        ValueError: unknown task, or a bad size range.
    """
    if task not in TASKS:
        raise ValueError(f"unknown GraphQA task '{task}': choose from {', '.join(TASKS)}")
    if not 2 <= min_nodes <= max_nodes:
        raise ValueError(f"need 2 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(num_graphs):
        if task in DIRECTED:
            n, src, dst, a, b, label = _directed_graph(task, rng, min_nodes, max_nodes)
            edges = np.stack([src, dst])  # once, in its direction: the magnetic Laplacian reads it as is
        else:
            n, u, v, a, b, label = _undirected_graph(task, rng, min_nodes, max_nodes)
            edges = np.stack([np.concatenate([u, v]), np.concatenate([v, u])])
        x = torch.zeros(n, 3)
        x[:, 0] = 1.0
        if task in PAIR_TASKS or task == "node_degree":
            x[a, 1] = 1.0
            if task != "node_degree":
                x[b, 2] = 1.0
        out.append(Data(x=x, edge_index=torch.from_numpy(edges.astype(np.int64)).reshape(2, -1),
                        y=torch.tensor([label]), num_nodes=n, query=torch.tensor([a, b])))
    return out


class GraphQADataset(InMemoryDataset):
    """The generated graphs of one task as a PyG in-memory dataset (nothing on disk).

    ``directed`` says whether ``edge_index`` holds each edge once in its direction (the :data:`DIRECTED` tasks).
    """

    def __init__(self, task: str, num_graphs: int = 1000, seed: int = 0, min_nodes: int = 5, max_nodes: int = 20):
        super().__init__(root=None)
        self.task = task
        self.directed = task in DIRECTED
        self._classes = _num_classes(task, min_nodes, max_nodes) if task in TASKS else 0
        self.data, self.slices = self.collate(generate(task, num_graphs, seed, min_nodes, max_nodes))

    @property
    def num_classes(self) -> int:  # every class of the task, present in this sample or not
        return self._classes
