"""GraphQA-style structural-reasoning tasks, generated offline from a seed.

``--dataset graphqa:<task>`` builds ``num_graphs`` random graphs (Erdős–Rényi,
``n`` uniform in ``[min_nodes, max_nodes]``, edge probability uniform in
``[0.05, 0.4]``) from ``numpy.random.default_rng(seed)`` and labels each one
with the answer to one question. Every task is a graph-level classification:

==================  =========================================  ======================
task                label                                      query nodes (features)
==================  =========================================  ======================
``node_count``      ``n - min_nodes``                          none
``edge_count``      ``min(#edges, EDGE_CAP)``                  none
``node_degree``     degree of node ``a``                       ``a``
``edge_existence``  1 if ``{a, b}`` is an edge                 ``a``, ``b``
``shortest_path``   hop distance ``a``-``b``, capped at         ``a``, ``b``
                    ``PATH_CAP``; 0 when unreachable
``connectivity``    1 if ``a`` and ``b`` are connected         ``a``, ``b``
``cycle_check``     1 if the graph has a cycle                 none
``triangle_count``  ``min(#triangles, TRIANGLE_CAP)``          none
==================  =========================================  ======================

Node features are ``[1, is_a, is_b]`` (pair questions mark their two query
nodes, as GraphQA's encoders do). For the binary pair tasks the query pair is
drawn half of the time among the "yes" pairs (an edge, a connected pair) and
half among the "no" pairs, when the graph has both, so the classes stay balanced. Graphs are undirected; no self loops.

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

__all__ = ["TASKS", "GraphQADataset", "generate"]

TASKS = ("node_count", "edge_count", "node_degree", "edge_existence", "shortest_path", "connectivity",
         "cycle_check", "triangle_count")
#: Classes stay few enough to learn from a thousand graphs.
EDGE_CAP, PATH_CAP, TRIANGLE_CAP = 40, 6, 10


def _bfs(adj: list[list[int]], source: int) -> np.ndarray:
    """Hop distances from ``source`` (-1 where unreachable)."""
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


def _num_classes(task: str, min_nodes: int, max_nodes: int) -> int:
    return {"node_count": max_nodes - min_nodes + 1, "edge_count": EDGE_CAP + 1, "node_degree": max_nodes,
            "edge_existence": 2, "shortest_path": PATH_CAP + 1, "connectivity": 2, "cycle_check": 2,
            "triangle_count": TRIANGLE_CAP + 1}[task]


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
        x = torch.zeros(n, 3)
        x[:, 0] = 1.0
        if task in ("node_degree", "edge_existence", "shortest_path", "connectivity"):
            x[a, 1] = 1.0
            if task != "node_degree":
                x[b, 2] = 1.0
        edge_index = torch.from_numpy(np.stack([np.concatenate([u, v]), np.concatenate([v, u])]).astype(np.int64))
        out.append(Data(x=x, edge_index=edge_index, y=torch.tensor([label]), num_nodes=n,
                        query=torch.tensor([a, b])))
    return out


class GraphQADataset(InMemoryDataset):
    """The generated graphs of one task as a PyG in-memory dataset (nothing on disk)."""

    def __init__(self, task: str, num_graphs: int = 1000, seed: int = 0, min_nodes: int = 5, max_nodes: int = 20):
        super().__init__(root=None)
        self.task = task
        self._classes = _num_classes(task, min_nodes, max_nodes) if task in TASKS else 0
        self.data, self.slices = self.collate(generate(task, num_graphs, seed, min_nodes, max_nodes))

    @property
    def num_classes(self) -> int:  # every class of the task, present in this sample or not
        return self._classes
