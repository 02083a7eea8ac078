"""Independent references for the learned-bias tests, built from the raw edge lists with numpy / networkx
(hop distances, ``D^-1 A`` walks, ``numpy.linalg.eigh`` of the Laplacians), never through the cache or
:mod:`xmask_cli.engine.batching.extras`; padded (dense) and disjoint-union (sparse) batches of them; the test graphs."""
from __future__ import annotations

import networkx as nx
import numpy as np
import scipy.sparse as sp
import torch

from xmask_cli.model.biases import SpdBias
from xmask_cli.structure.spectrum import magnetic_laplacian

S = 4  # walk channels I, P, P^2, P^3
K = 3  # powers Â^1..Â^3
ALL = ("spd", "rrwp", "magnetic", "eigen")


# ----------------------------------------------------------------- references
def spd_matrix(n: int, edges: list[tuple[int, int]], max_distance: int) -> np.ndarray:
    """``[n, n]`` hop distances by networkx: ``d`` up to ``max_distance``, -1 beyond, -2 unreachable."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    spd = np.full((n, n), -2, dtype=np.int64)
    for i, lengths in nx.all_pairs_shortest_path_length(g):
        for j, d in lengths.items():
            spd[i, j] = d if d <= max_distance else -1
    return spd


def ref_extras(n: int, edges: list[tuple[int, int]], max_distance: int = 2, q: float = 0.25) -> dict[str, np.ndarray]:
    """Dense extras of one graph (edges directed as given; SPD, walks, spectrum undirected)."""
    a_dir = np.zeros((n, n))
    for u, v in edges:
        a_dir[u, v] = 1.0
    a = np.maximum(a_dir, a_dir.T)
    spd = spd_matrix(n, edges, max_distance)
    deg = a.sum(1)
    p = np.divide(a, deg[:, None], out=np.zeros_like(a), where=deg[:, None] > 0)
    rrwp = np.stack([np.linalg.matrix_power(p, s) for s in range(S)])
    dis = np.divide(1.0, np.sqrt(deg), out=np.zeros_like(deg), where=deg > 0)
    lap = np.eye(n) - dis[:, None] * a * dis[None, :]
    ev, eu = np.linalg.eigh(lap)
    mag = magnetic_laplacian(sp.csr_matrix(a_dir), q).toarray()
    mv, mu = np.linalg.eigh(mag)
    return {"spd": spd, "rrwp": rrwp, "eig_vals": ev, "eig_vecs": eu, "eig_mask": np.ones(n, bool),
            "mag_vals": mv, "mag_vecs": mu, "mag_mask": np.ones(n, bool), "adj": a}


def pad(items: list[dict[str, np.ndarray]]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Padded dense extras (torch) and the node mask."""
    bsz, n = len(items), max(len(it["spd"]) for it in items)
    m = max(len(it["eig_vals"]) for it in items)
    out = {"spd": torch.full((bsz, n, n), -2, dtype=torch.int16), "rrwp": torch.zeros(bsz, S, n, n)}
    for pre, dt in (("eig", torch.float32), ("mag", torch.complex64)):
        out[f"{pre}_vals"] = torch.zeros(bsz, m)
        out[f"{pre}_vecs"] = torch.zeros(bsz, n, m, dtype=dt)
        out[f"{pre}_mask"] = torch.zeros(bsz, m, dtype=torch.bool)
    mask = torch.zeros(bsz, n, dtype=torch.bool)
    for b, it in enumerate(items):
        k = len(it["spd"])
        mask[b, :k] = True
        out["spd"][b, :k, :k] = torch.from_numpy(it["spd"])
        out["rrwp"][b, :, :k, :k] = torch.from_numpy(it["rrwp"])
        for pre, dt in (("eig", torch.float32), ("mag", torch.complex64)):
            mk = len(it[f"{pre}_vals"])
            out[f"{pre}_vals"][b, :mk] = torch.from_numpy(it[f"{pre}_vals"])
            out[f"{pre}_vecs"][b, :k, :mk] = torch.from_numpy(it[f"{pre}_vecs"]).to(dt)
            out[f"{pre}_mask"][b, :mk] = torch.from_numpy(it[f"{pre}_mask"])
    return out, mask


def sparse(items: list[dict[str, np.ndarray]], pairs: list[tuple[np.ndarray, np.ndarray]]):
    """Disjoint union: ``edge_index`` of the given per-graph pairs and the matching sparse extras."""
    m = max(len(it["eig_vals"]) for it in items)
    rows, cols, spd, rrwp, per_node = [], [], [], [], {f"{p}_{s}": [] for p in ("eig", "mag") for s in ("vals", "vecs", "mask")}
    off = 0
    for it, (r, c) in zip(items, pairs):
        n = len(it["spd"])
        rows.append(r + off)
        cols.append(c + off)
        spd.append(it["spd"][r, c])
        rrwp.append(it["rrwp"][:, r, c].T)
        for pre in ("eig", "mag"):
            mk = len(it[f"{pre}_vals"])
            vals = np.zeros((n, m))
            vals[:, :mk] = it[f"{pre}_vals"]
            vecs = np.zeros((n, m), dtype=it[f"{pre}_vecs"].dtype)
            vecs[:, :mk] = it[f"{pre}_vecs"]
            valid = np.zeros((n, m), bool)
            valid[:, :mk] = it[f"{pre}_mask"]
            per_node[f"{pre}_vals"].append(vals)
            per_node[f"{pre}_vecs"].append(vecs)
            per_node[f"{pre}_mask"].append(valid)
        off += n
    ex = {"spd": torch.from_numpy(np.concatenate(spd)).to(torch.int16),
          "rrwp": torch.from_numpy(np.concatenate(rrwp)).float()}
    for k, v in per_node.items():
        t = torch.from_numpy(np.concatenate(v))
        ex[k] = t.to(torch.complex64) if k == "mag_vecs" else (t if k.endswith("mask") else t.float())
    ei = torch.from_numpy(np.stack([np.concatenate(rows), np.concatenate(cols)])).long()
    return ei, ex


def all_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    r, c = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    return r.ravel(), c.ravel()


def randomize(module: torch.nn.Module, seed: int) -> None:
    """Random non-zero parameters everywhere (the SPD self bucket stays 0, as ``padding_idx`` keeps it)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.7)
        for mod in module.modules():
            if isinstance(mod, SpdBias):
                mod.table.weight[0].zero_()


def relu(x):
    return np.maximum(x, 0.0)


# Directed: a 4-cycle 0->1->2->3->0 with a chord 0->2 and a pendant 4 -> 3.
DIRECTED = (5, [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (4, 3)])
# Path of 4 plus a directed triangle: two components, distances beyond the cut-off 2.
TWO_COMP = (7, [(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 4)])
# Symmetric star (both directions given): the eigenvalue 1 is repeated.
STAR = (5, [(0, j) for j in range(1, 5)] + [(j, 0) for j in range(1, 5)])
