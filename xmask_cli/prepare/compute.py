"""Structure of one block of graphs: pair groups (powers, SPD, RRWP) and per-graph results (spectra, partitions).

Small graphs are packed into block-diagonal blocks: the powers and distances
of a block-diagonal matrix are the blocks' own, so one sparse product serves
hundreds of molecules. A large graph goes alone, with the truncation rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from xmask_cli import structure as S
from xmask_cli.config import StructureSection
from xmask_cli.structure.rowblocks import PowerRows, WalkRows


@dataclass
class BlockResult:
    """Structure of consecutive graphs, ready to append to the cache."""

    num_nodes: np.ndarray
    num_edges: np.ndarray
    large: np.ndarray
    component: np.ndarray
    pairs: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # group -> arrays incl. 'node_counts'
    eig: dict[str, dict[str, list[Any]]] = field(default_factory=dict)  # group -> vals / vecs / method
    part: np.ndarray | None = None
    dropped: dict[str, np.ndarray] = field(default_factory=dict)  # group -> [rows, K] share of row mass truncated
    #: False for a block of rows of a large graph: it carries pairs only; the graph's own arrays come after them.
    complete: bool = True
    #: Rows of Â the fan-out cap cut in this block's large graphs (hubs: degree >= ``structure.large.fanout``).
    capped: int = 0


def _block_adjacency(edges: list[np.ndarray], nn: np.ndarray, symmetric: bool = True) -> sp.csr_matrix:
    offs = np.concatenate([[0], np.cumsum(nn)])
    ei = np.concatenate([e + o for e, o in zip(edges, offs[:-1])], axis=1) if edges else np.zeros((2, 0), dtype=np.int64)
    return S.adjacency(ei, int(offs[-1]), symmetric=symmetric)


def col_dtype(num_nodes: np.ndarray) -> np.dtype:
    """Graph-local column ids fit uint16 for every graph-level benchmark: half the bytes of int32."""
    return np.dtype(np.uint16) if int(np.max(num_nodes, initial=0)) <= 1 << 16 else np.dtype(np.int32)


def _split_pairs(row: np.ndarray, col: np.ndarray, offs: np.ndarray, cdtype: np.dtype, **extra: np.ndarray) -> dict[str, np.ndarray]:
    """Block pairs (grouped by ascending row) -> per-node counts and graph-local columns."""
    n = int(offs[-1])
    node_counts = np.bincount(row, minlength=n).astype(np.int64)
    if len(offs) == 2:  # one graph: ids are already local
        local = col.astype(cdtype, copy=False)
    else:
        graph_of_node = np.repeat(np.arange(len(offs) - 1), np.diff(offs))
        local = (col - offs[:-1][graph_of_node][row]).astype(cdtype)
    out = {"node_counts": node_counts, "col": local}
    out.update(extra)
    return out


def compute_block(
    edges: list[np.ndarray],
    nn: np.ndarray,
    cfg: StructureSection,
    large: bool,
    level: str,
    cdtype: np.dtype = np.dtype(np.int32),
    parts: tuple[str, ...] = ("pairs", "per-graph"),
) -> BlockResult:
    """Structure of one block of graphs (block-diagonal), or of one large graph.

    ``parts`` selects the pair groups (powers, SPD, RRWP: large outputs), the
    per-graph results (spectra, partitions: small outputs), or both, so that a
    worker process can compute the second while the writing process does the first.
    """
    from threadpoolctl import threadpool_limits

    # Matrices here are small or sparse: threaded BLAS only adds contention (seen: one
    # 136-node eigh from 3 ms to 600 ms while another process kept the second core busy).
    # Parallelism comes from --workers and numba instead.
    with threadpool_limits(1, user_api="blas"):
        return _compute_block(edges, nn, cfg, large, level, cdtype, parts)


def _compute_block(
    edges: list[np.ndarray], nn: np.ndarray, cfg: StructureSection, large: bool, level: str, cdtype: np.dtype,
    parts: tuple[str, ...],
) -> BlockResult:
    nn = np.asarray(nn, dtype=np.int64)
    offs = np.concatenate([[0], np.cumsum(nn)]).astype(np.int64)
    a = _block_adjacency(edges, nn)
    graph_of_node = np.repeat(np.arange(len(nn)), nn)
    edge_counts = (np.bincount(graph_of_node, weights=np.diff(a.indptr), minlength=len(nn)) // 2).astype(np.int64)
    res = BlockResult(num_nodes=nn, num_edges=edge_counts, large=np.full(len(nn), large), component=S.connected_components(a))
    trunc = S.Truncation(cfg.large.tau, cfg.large.topk, cfg.large.fanout) if large else S.Truncation()
    res.capped = S.capped_rows(a, trunc) if large else 0
    if "pairs" in parts:
        _pair_groups(res, a, offs, cfg, large, trunc, cdtype)
    if "per-graph" in parts:
        _per_graph(res, a, edges, nn, offs, cfg, level)
    return res


def _pair_groups(res: BlockResult, a: sp.csr_matrix, offs: np.ndarray, cfg: StructureSection, large: bool,
                 trunc: S.Truncation, cdtype: np.dtype) -> None:
    spd_max = cfg.spd.max_distance if cfg.spd.enabled else 0
    if large:  # truncated, iterated sparse products; SPD only within a small radius
        pw = S.adjacency_powers(a, cfg.powers.k, normalization=cfg.powers.normalization, truncation=trunc)
        # Exact row sums by mat-vecs (no dense power): what truncation removed, row by row.
        res.dropped["powers"] = S.dropped_share(pw, S.power_row_sums(a, cfg.powers.k, normalization=cfg.powers.normalization))
        row, col, vals = S.union_pairs(pw)
        del pw
        res.pairs["powers"] = _split_pairs(row, col, offs, cdtype, values=vals.astype(np.float32))
        if spd_max:
            r, c, d = S.shortest_path_pairs(a, min(spd_max, cfg.large.spd_radius))
            res.pairs["spd"] = _split_pairs(r, c, offs, cdtype, dist=d)
    else:  # exact: one breadth-first search per node gives the powers and the distances
        fused = spd_max >= cfg.powers.k
        base = np.repeat(offs[:-1], np.diff(offs))  # first node of each node's graph
        out = S.ball_structure(a, cfg.powers.k, normalization=cfg.powers.normalization,
                               spd_radius=spd_max if fused else 0, base=base, col_dtype=cdtype,
                               values_dtype=np.dtype(np.float32))
        res.pairs["powers"] = {"node_counts": out["counts"], "col": out["col"], "values": out["values"]}
        if fused:
            res.pairs["spd"] = {"node_counts": out["spd_counts"], "col": out["spd_col"], "dist": out["spd_dist"]}
        elif spd_max:
            r, c, d = S.shortest_path_pairs(a, spd_max)
            res.pairs["spd"] = _split_pairs(r, c, offs, cdtype, dist=d)

    if cfg.rrwp.enabled:
        if large:
            walks = S.random_walk_powers(a, cfg.rrwp.steps, truncation=trunc)
            res.dropped["rrwp"] = S.dropped_share(walks, S.random_walk_row_sums(a, cfg.rrwp.steps))
            r, c, v = S.union_pairs(walks)
            del walks
        else:
            r, c, v = S.walk_pairs(a, cfg.rrwp.steps)
        res.pairs["rrwp"] = _split_pairs(r, c, offs, cdtype, values=v.astype(np.float32))


class LargeGraph:
    """One large graph, prepared a block of rows at a time (see :mod:`~xmask_cli.structure.rowblocks`).

    Holds what every block reads, O(nnz + n K): the adjacency, ``Â`` (or the walk matrix) and the exact row
    sums that the dropped mass is measured against. A block's pairs equal the same rows of the whole-graph
    computation (:func:`compute_block` with ``large=True``), bit for bit.
    """

    def __init__(self, edges: np.ndarray, n: int, cfg: StructureSection, cdtype: np.dtype):
        self.n, self.cfg, self.cdtype = int(n), cfg, cdtype
        self.a = _block_adjacency([edges], np.asarray([n], dtype=np.int64))
        trunc = S.Truncation(cfg.large.tau, cfg.large.topk, cfg.large.fanout)
        norm = cfg.powers.normalization
        self.powers = PowerRows(self.a, cfg.powers.k, normalization=norm, truncation=trunc)
        self.power_sums = S.power_row_sums(self.a, cfg.powers.k, normalization=norm)
        self.walks = WalkRows(self.a, cfg.rrwp.steps, truncation=trunc) if cfg.rrwp.enabled else None
        self.walk_sums = S.random_walk_row_sums(self.a, cfg.rrwp.steps) if cfg.rrwp.enabled else None
        self.spd = min(cfg.spd.max_distance, cfg.large.spd_radius) if cfg.spd.enabled else 0

    def rows(self, start: int, stop: int) -> BlockResult:
        """Pair groups (and dropped mass) of rows ``start:stop``; ``complete=False``."""
        from threadpoolctl import threadpool_limits

        empty = np.zeros(0, dtype=np.int64)
        res = BlockResult(num_nodes=empty, num_edges=empty, large=np.zeros(0, dtype=bool),
                          component=np.zeros(0, dtype=np.int32), complete=False)
        offs = np.asarray([0, stop - start], dtype=np.int64)
        with threadpool_limits(1, user_api="blas"):
            pw = self.powers.rows(start, stop)
            res.dropped["powers"] = S.dropped_share(pw, self.power_sums[start:stop])
            counts, col, vals = S.union_rows(pw, self.cdtype, np.dtype(np.float32))  # one graph: columns are local
            del pw
            res.pairs["powers"] = {"node_counts": counts, "col": col, "values": vals}
            del counts, col, vals
            if self.spd:
                r, c, d = S.shortest_path_pairs(self.a, self.spd, start=start, stop=stop)
                res.pairs["spd"] = _split_pairs(r.astype(np.int64) - start, c, offs, self.cdtype, dist=d)
            if self.walks is not None:
                walks = self.walks.rows(start, stop)
                assert self.walk_sums is not None  # computed whenever the walks are
                res.dropped["rrwp"] = S.dropped_share(walks, self.walk_sums[start:stop])
                counts, col, vals = S.union_rows(walks, self.cdtype, np.dtype(np.float32))
                del walks
                res.pairs["rrwp"] = {"node_counts": counts, "col": col, "values": vals}
        return res


def _per_graph(res: BlockResult, a: sp.csr_matrix, edges: list[np.ndarray], nn: np.ndarray, offs: np.ndarray,
               cfg: StructureSection, level: str) -> None:
    if cfg.spectrum.enabled:
        lap = S.normalized_laplacian(a)
        res.eig["spectrum"] = _per_graph_eigs(lap, offs, res.component, cfg.spectrum.num_eigs, cfg.spectrum.full_max_nodes,
                                              np.float32)
    if cfg.magnetic.enabled:
        ad = _block_adjacency(edges, nn, symmetric=False)
        lap = S.magnetic_laplacian(ad, cfg.magnetic.q)
        # Weak components of the directed graph: the same as the symmetrized graph's.
        res.eig["magnetic"] = _per_graph_eigs(lap, offs, res.component, cfg.magnetic.num_eigs, cfg.spectrum.full_max_nodes,
                                              np.complex64)

    if level == "node" and cfg.partition.parts > 0:
        res.part = np.concatenate([S.metis_parts(a[s:e, s:e], cfg.partition.parts, seed=cfg.partition.seed)
                                   for s, e in zip(offs[:-1], offs[1:])]) if len(nn) else np.zeros(0, np.int32)


def _per_graph_eigs(lap: sp.csr_matrix, offs: np.ndarray, component: np.ndarray, m: int, full_max: int,
                    dtype: Any) -> dict[str, list[Any]]:
    """Each graph's stored spectrum, solved per connected component (see :func:`~xmask_cli.structure.graph_spectra`)."""
    vals, vecs, methods = [], [], []
    for lv, vv, how in S.graph_spectra(lap, offs, component, m, full_max_nodes=full_max):
        vals.append(np.real(lv).astype(np.float64))
        vecs.append(np.ascontiguousarray(vv).astype(dtype).ravel())
        methods.append(how)
    return {"vals": vals, "vecs": vecs, "methods": methods}
