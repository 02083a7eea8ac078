"""Toy graphs and a prepare call for the cache tests (random graphs with an isolated node, a self loop, a duplicate)."""
from __future__ import annotations

from pathlib import Path

import networkx as nx
import numpy as np

from xmask_cli.config import StructureSection
from xmask_cli.config_resolve import resolve
from xmask_cli.data.load import graphs_fingerprint
from xmask_cli.prepare import prepare_graphs


def random_graphs(seed: int = 0, count: int = 12) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    edges, nodes = [], []
    for i in range(count):
        n = int(rng.integers(1, 30))
        g = nx.gnp_random_graph(n, 0.15, seed=int(rng.integers(1 << 30)))
        e = np.array(list(g.edges()), dtype=np.int64).reshape(-1, 2).T
        if i == 3 and n > 2:  # a self loop and a duplicate edge must not matter
            e = np.concatenate([e, [[0, 0], [1, 1]]], axis=1) if e.size else e
        edges.append(e)
        nodes.append(n)
    return edges, np.array(nodes)


def prepare_toy(tmp_path: Path, edges, nodes, cfg: StructureSection | None = None, level: str = "graph", **kw):
    return prepare_graphs(dataset_key="toy", level=level, edges=edges, num_nodes=nodes,
                          fingerprint=graphs_fingerprint(edges, nodes), cfg=cfg or resolve("graph-level").structure,
                          cache_dir=tmp_path / "cache", **kw)
