"""Cached structure beyond the powers, shaped for the learned biases (SPD, RRWP, spectra, edge attributes).

The learned biases (:mod:`xmask_cli.model.biases`) read ``extras``: a
dict of tensors, dense for padded batches and per pair / per node for the
sparse path. :class:`GraphExtras` reads what one cached graph holds, once,
and serves any block of its nodes (a whole graph, a random subgraph, a METIS
part) or any list of its pairs. Nothing is recomputed here.

Hop distances keep the cache's convention (:class:`~xmask_cli.structure.spd.PairDistances`):
``>= 0`` a distance, ``-1`` reachable but beyond the cached cut-off, ``-2``
unreachable (other component).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

from xmask_cli.cache import StructureCache
from xmask_cli.engine.batching.graph_store import ranges
from xmask_cli.structure.spd import UNREACHABLE, PairDistances

__all__ = ["EXTRA_SECTIONS", "GraphExtras", "pad_extras", "padded_edges", "to_tensors"]

#: Cache sections the learned biases can read.
EXTRA_SECTIONS = ("spd", "rrwp", "spectrum", "magnetic", "edge")


def _torch_codes(attr: np.ndarray) -> np.ndarray:
    """Stored edge codes wider than a byte as int32: torch has no general uint16 / uint32 tensors."""
    return attr.astype(np.int32) if attr.dtype.kind == "u" and attr.dtype.itemsize > 1 else attr


def _sorted_keys(row: np.ndarray, col: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    keys = row.astype(np.int64) * n + col.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    return keys[order], order


def _lookup(keys: np.ndarray, table: np.ndarray, rows: np.ndarray, cols: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(position into the stored pairs, found)`` of each ``(rows, cols)``."""
    q = rows.astype(np.int64) * n + cols.astype(np.int64)
    pos = np.searchsorted(keys, q)
    pos = np.minimum(pos, max(len(keys) - 1, 0))
    found = keys[pos] == q if len(keys) else np.zeros(len(q), dtype=bool)
    return table[pos], found


class GraphExtras:
    """The extras of cached graph ``g`` that ``needs`` asks for.

    Args:
        cache: an open :class:`StructureCache`.
        g: graph index in the cache.
        needs: sections among :data:`EXTRA_SECTIONS`.

    Raises:
        ValueError: a needed section is not in the cache (prepare it enabled).
    """

    def __init__(self, cache: StructureCache, g: int, needs: Iterable[str]):
        self.needs = frozenset(needs)
        unknown = self.needs - set(EXTRA_SECTIONS)
        if unknown:
            raise ValueError(f"unknown structure section(s) {sorted(unknown)}; expected some of {EXTRA_SECTIONS}")
        self.n = cache.num_nodes(g)
        for section in self.needs:
            if not cache.has(section):
                raise ValueError(f"the cache {cache.path} has no '{section}' structure: prepare it with "
                                 f"structure.{section}.enabled=true")
        if "spd" in self.needs:
            self.component = np.asarray(cache.component(g), dtype=np.int64)
            self._spd = PairDistances(*cache.spd(g), self.component)
        if "rrwp" in self.needs:
            row, col, vals = cache.rrwp(g)
            self._rrwp = (row.astype(np.int64), col.astype(np.int64), np.asarray(vals, dtype=np.float32))
        if "edge" in self.needs:
            row, col, attr = cache.edge(g)  # row-major, columns ascending within a row (prepare's order)
            self._edge = (row.astype(np.int64), col.astype(np.int64), _torch_codes(attr))
        self._keys: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # sorted pair keys, built on the first lookup
        self._eig: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if "spectrum" in self.needs:
            vals, vecs = cache.spectrum(g)
            self._eig["eig"] = (np.asarray(vals, dtype=np.float32), np.asarray(vecs, dtype=np.float32))
        if "magnetic" in self.needs:
            vals, vecs = cache.magnetic(g)
            self._eig["mag"] = (np.asarray(vals, dtype=np.float32), np.asarray(vecs, dtype=np.complex64))

    # ------------------------------------------------------------- dense
    def dense(self, nodes: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Dense extras of the block ``nodes`` (ascending global ids; None: the whole graph).

        ``spd [n, n]`` int16, ``rrwp [S, n, n]``, ``edge_attr [n, n, C]`` / ``edge_mask [n, n]`` (the
        joining edge's attributes, 0 and False where none), ``eig_vals [m]`` / ``eig_vecs [n, m]``
        (and ``mag_*``), the eigenvectors' rows of the block's nodes.
        """
        n = self.n
        ids = np.arange(n) if nodes is None else np.asarray(nodes, dtype=np.int64)
        local = np.full(n, -1, dtype=np.int64)
        local[ids] = np.arange(len(ids))
        out: dict[str, np.ndarray] = {}
        if "spd" in self.needs:
            out["spd"] = self._spd.block(ids, ids)
        if "rrwp" in self.needs:
            row, col, vals = self._rrwp
            lr, lc = local[row], local[col]
            keep = (lr >= 0) & (lc >= 0)
            rrwp = np.zeros((vals.shape[1], len(ids), len(ids)), dtype=np.float32)
            rrwp[:, lr[keep], lc[keep]] = vals[keep].T
            out["rrwp"] = rrwp
        if "edge" in self.needs:
            out["edge_attr"], out["edge_mask"] = self._dense_edge(local, len(ids))
        for prefix, (vals, vecs) in self._eig.items():
            out[f"{prefix}_vals"] = vals
            out[f"{prefix}_vecs"] = vecs[ids]
            out[f"{prefix}_mask"] = np.ones(len(vals), dtype=bool)
        return out

    def _dense_edge(self, local: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
        """``edge_attr [n, n, C]`` (0 off the edges) and ``edge_mask [n, n]`` of a block (``local``: block ids)."""
        row, col, attr = self._edge
        lr, lc = local[row], local[col]
        keep = (lr >= 0) & (lc >= 0)
        dense = np.zeros((size, size, attr.shape[1]), dtype=attr.dtype)
        joined = np.zeros((size, size), dtype=bool)
        dense[lr[keep], lc[keep]] = attr[keep]
        joined[lr[keep], lc[keep]] = True
        return dense, joined

    # ------------------------------------------------------------ sparse
    def _sorted(self, section: str) -> tuple[np.ndarray, np.ndarray]:
        if section not in self._keys:
            row, col, _ = self._rrwp if section == "rrwp" else self._edge
            self._keys[section] = _sorted_keys(row, col, self.n)
        return self._keys[section]

    def pairs(self, rows: np.ndarray, cols: np.ndarray, nodes: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Sparse extras of the pairs ``(rows, cols)`` (global ids) of a block ``nodes``.

        ``spd [E]``, ``rrwp [E, S]`` (0 off the cached walks), ``edge_attr [E, C]`` and ``edge_mask [E]``
        (0 and False where no edge joins the pair), and per node of
        the block ``eig_vals [n, m]`` (the graph's, repeated), ``eig_vecs [n, m]``,
        ``eig_mask [n, m]`` (and ``mag_*``): the sparse biases index them by the
        pairs' block-local ids.
        """
        rows, cols = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
        out: dict[str, np.ndarray] = {}
        if "spd" in self.needs:
            out["spd"] = self._spd.pairs(rows, cols).astype(np.int16)
        if "rrwp" in self.needs:
            keys, order = self._sorted("rrwp")
            vals = self._rrwp[2]
            if len(keys):
                got, found = _lookup(keys, vals[order], rows, cols, self.n)
                out["rrwp"] = np.where(found[:, None], got, 0.0).astype(np.float32)
            else:
                out["rrwp"] = np.zeros((len(rows), vals.shape[1]), dtype=np.float32)
        if "edge" in self.needs:
            keys, order = self._sorted("edge")
            attr = self._edge[2]
            if len(keys):
                got, found = _lookup(keys, attr[order], rows, cols, self.n)
                out["edge_attr"] = np.where(found[:, None], got, 0).astype(attr.dtype)
                out["edge_mask"] = found
            else:
                out["edge_attr"] = np.zeros((len(rows), attr.shape[1]), dtype=attr.dtype)
                out["edge_mask"] = np.zeros(len(rows), dtype=bool)
        ids = np.arange(self.n) if nodes is None else np.asarray(nodes, dtype=np.int64)
        for prefix, (vals, vecs) in self._eig.items():
            out[f"{prefix}_vals"] = np.broadcast_to(vals, (len(ids), len(vals))).copy()
            out[f"{prefix}_vecs"] = vecs[ids]
            out[f"{prefix}_mask"] = np.ones((len(ids), len(vals)), dtype=bool)
        return out


def pad_extras(items: Sequence[dict[str, np.ndarray]], n_max: int) -> dict[str, np.ndarray]:
    """Stack per-graph :meth:`GraphExtras.dense` dicts into a padded batch.

    ``spd [B, N, N]`` (padding ``-2``), ``rrwp [B, S, N, N]`` (0), ``edge_attr [B, N, N, C]`` (0) and
    ``edge_mask [B, N, N]`` (False), eigenpairs
    ``*_vals [B, m]``, ``*_vecs [B, N, m]``, ``*_mask [B, m]`` with ``m`` the
    most eigenpairs any graph here has (graphs differ when some are small).
    """
    if not items:
        return {}
    bsz = len(items)
    out: dict[str, np.ndarray] = {}
    if "spd" in items[0]:
        spd = np.full((bsz, n_max, n_max), UNREACHABLE, dtype=np.int16)
        for b, it in enumerate(items):
            n = it["spd"].shape[0]
            spd[b, :n, :n] = it["spd"]
        out["spd"] = spd
    if "rrwp" in items[0]:
        s = items[0]["rrwp"].shape[0]
        rrwp = np.zeros((bsz, s, n_max, n_max), dtype=np.float32)
        for b, it in enumerate(items):
            n = it["rrwp"].shape[1]
            rrwp[b, :, :n, :n] = it["rrwp"]
        out["rrwp"] = rrwp
    if "edge_attr" in items[0]:
        attr = items[0]["edge_attr"]
        edge = np.zeros((bsz, n_max, n_max, attr.shape[-1]), dtype=attr.dtype)
        joined = np.zeros((bsz, n_max, n_max), dtype=bool)
        for b, it in enumerate(items):
            n = it["edge_mask"].shape[0]
            edge[b, :n, :n] = it["edge_attr"]
            joined[b, :n, :n] = it["edge_mask"]
        out["edge_attr"], out["edge_mask"] = edge, joined
    for prefix in ("eig", "mag"):
        if f"{prefix}_vals" not in items[0]:
            continue
        m = max(len(it[f"{prefix}_vals"]) for it in items)
        dtype = items[0][f"{prefix}_vecs"].dtype
        vals = np.zeros((bsz, m), dtype=np.float32)
        vecs = np.zeros((bsz, n_max, m), dtype=dtype)
        valid = np.zeros((bsz, m), dtype=bool)
        for b, it in enumerate(items):
            k = len(it[f"{prefix}_vals"])
            n = it[f"{prefix}_vecs"].shape[0]
            vals[b, :k] = it[f"{prefix}_vals"]
            vecs[b, :n, :k] = it[f"{prefix}_vecs"]
            valid[b, :k] = it[f"{prefix}_mask"]
        out[f"{prefix}_vals"], out[f"{prefix}_vecs"], out[f"{prefix}_mask"] = vals, vecs, valid
    return out


def padded_edges(cache: StructureCache, ids: np.ndarray, n_max: int) -> dict[str, np.ndarray]:
    """``edge_attr [B, N, N, C]`` and ``edge_mask [B, N, N]`` of graphs ``ids`` from a cache read into memory,
    the same arrays as :func:`pad_extras` of each graph's :meth:`GraphExtras.dense`, gathered for the whole
    batch at once (no loop over its graphs: a graph's nodes, and their pairs, are contiguous ranges)."""
    ids = np.asarray(ids, dtype=np.int64)
    node_ptr = cache.read_array("graphs/node_ptr")
    indptr = cache.read_array("edge/indptr")
    sizes = node_ptr[ids + 1] - node_ptr[ids]
    nodes, local = ranges(node_ptr[ids], sizes)
    per_node = indptr[nodes + 1] - indptr[nodes]
    pairs, _ = ranges(indptr[nodes], per_node)
    row = np.repeat(local, per_node)
    graph = np.repeat(np.repeat(np.arange(len(ids), dtype=np.int64), sizes), per_node)
    col = cache.read_array("edge/col")[pairs].astype(np.int64)
    attr = _torch_codes(cache.read_array("edge/attr")[pairs])
    edge = np.zeros((len(ids), n_max, n_max, attr.shape[1]), dtype=attr.dtype)
    joined = np.zeros((len(ids), n_max, n_max), dtype=bool)
    edge[graph, row, col] = attr
    joined[graph, row, col] = True
    return {"edge_attr": edge, "edge_mask": joined}


def to_tensors(extras: dict[str, np.ndarray], device: torch.device | str | None = None,
               batch_dim: bool = False) -> dict[str, Tensor]:
    """numpy extras -> tensors (``batch_dim`` adds a leading axis of 1 to dense ones)."""
    out = {}
    for k, v in extras.items():
        t = torch.from_numpy(np.ascontiguousarray(v))
        if batch_dim:
            t = t.unsqueeze(0)
        out[k] = t if device is None else t.to(device)
    return out
