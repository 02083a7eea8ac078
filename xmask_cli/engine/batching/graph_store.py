"""A graph-level dataset held once, compactly, for every stream of a task: features and log-powers as flat arrays.

The cache stores each graph's ``Â^1..Â^K`` on their union support as pairs
(per-node ``indptr``, ``col``, ``values [P, K]``). :class:`GraphStore` reads
those arrays once, sorts each node's pairs by column (a batch's pairs are then
row-major, as the pair path's CSR plan takes them), takes ``log(Â^k + eps)`` of
every stored pair once (in float32, in place, chunk by chunk), and keeps them beside the flattened node
features. A batch of any graphs is then two fancy-indexed gathers, with no
loop over its graphs: the node rows and the stored pairs of each graph are
contiguous ranges, laid out by ``np.repeat`` of their starts.

The train, validation and test streams of a task share one store, so the
structure is in memory once, whatever the number of streams.

Example::

    store = GraphStore(cache_path, features, labels, log_mask=(1e-30, "hard"))
    x, mask, pairs = store.gather(np.array([4, 17, 3]))   # [B, N, F], [B, N], LogPairs
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
from numpy.typing import DTypeLike
from torch import Tensor

from xmask_cli.cache import StructureCache
from xmask_cli.model.batches import LogPairs
from xmask_cli.model.logsmask import log_powers

__all__ = ["GraphStore", "ranges", "spans_of"]

#: Stored pairs whose log is taken per step when the store is built (bounds the scratch to a few MB).
LOG_CHUNK = 1 << 18


def ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(flat, local)``: the concatenated ranges ``starts[i] .. starts[i] + counts[i] - 1`` and each entry's
    offset in its range, without a Python loop over the ranges."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    before = np.cumsum(counts) - counts
    local = np.arange(total, dtype=np.int64) - np.repeat(before, counts)
    return np.repeat(np.asarray(starts, dtype=np.int64), counts) + local, local


def spans_of(array: np.ndarray, spans: Sequence[slice], dtype: DTypeLike | None = None) -> np.ndarray:
    """``array[spans[0]], array[spans[1]], ...`` concatenated (as ``dtype``: a safe widening), a new array."""
    if not spans:
        return np.empty((0, *array.shape[1:]), dtype=dtype or array.dtype)
    return np.concatenate([array[s] for s in spans], dtype=dtype)


def _rows_sorted(indptr: np.ndarray, col: np.ndarray) -> bool:
    """Whether every CSR row's entries come by increasing column (checked chunk by chunk: little scratch)."""
    first = np.zeros(len(col), dtype=bool)  # a row's first entry: no comparison with the entry before it
    first[indptr[:-1][np.diff(indptr) > 0]] = True
    for s in range(0, max(len(col) - 1, 0), LOG_CHUNK):
        e = min(s + LOG_CHUNK + 1, len(col))
        c = col[s:e].astype(np.int64)
        if bool(((c[1:] <= c[:-1]) & ~first[s + 1:e]).any()):
            return False
    return True


def _sort_rows(indptr: np.ndarray, col: np.ndarray, values: np.ndarray) -> None:
    """Sort each CSR row's entries by column, in place, moving their value rows along: rows taken in chunks of
    about :data:`LOG_CHUNK` entries, each one stable sort of ``(row, column)`` keys (bounded scratch)."""
    n_rows, r0 = len(indptr) - 1, 0
    while r0 < n_rows:
        r1 = min(max(int(np.searchsorted(indptr, indptr[r0] + LOG_CHUNK, side="right")) - 1, r0 + 1), n_rows)
        a, b = int(indptr[r0]), int(indptr[r1])
        key = np.repeat(np.arange(r1 - r0, dtype=np.int64) << 32, np.diff(indptr[r0:r1 + 1])) | col[a:b]
        order = np.argsort(key, kind="stable")
        col[a:b], values[a:b] = col[a:b][order], values[a:b][order]
        r0 = r1


class GraphStore:
    """Node features, labels and (with ``log_mask``) every graph's log-powers at its stored pairs.

    Args:
        cache_path: the dataset's structure cache (``xmask prepare``).
        features: ``features[g]`` is graph ``g``'s ``[n_g, F]`` node features.
        labels: ``[G]`` or ``[G, T]`` graph labels.
        log_mask: ``(eps, outside_support)`` of the model's X-LogSMask term; None: no pairs are kept
            (a stream then reads dense powers from the cache).
        log_budget_bytes: the most bytes of log values kept; beyond it the store keeps the stored
            powers and takes their log per batch (the same numbers, a little more work per batch).

    Raises:
        ValueError: the features or labels do not match the cache's graphs.
    """

    def __init__(self, cache_path: str | os.PathLike[str], features: Sequence[Tensor], labels: Tensor,
                 log_mask: tuple[float, str] | None = None, log_budget_bytes: int = 1 << 29):
        if log_budget_bytes < 0:
            raise ValueError(f"log_budget_bytes must be >= 0, got {log_budget_bytes}")
        self.log_spec = None if log_mask is None else (float(log_mask[0]), str(log_mask[1]))
        with StructureCache(cache_path) as cache:
            self.num_nodes = np.asarray(cache.read_array("graphs/num_nodes"), dtype=np.int64)
            node_ptr = np.asarray(cache.read_array("graphs/node_ptr"), dtype=np.int64)
            if len(features) != len(self.num_nodes) or len(labels) != len(self.num_nodes):
                raise ValueError(f"cache has {len(self.num_nodes)} graphs, got {len(features)} features "
                                 f"and {len(labels)} labels")
            rows = np.array([f.size(0) for f in features], dtype=np.int64)
            bad = np.flatnonzero(rows != self.num_nodes)
            if len(bad):
                g = int(bad[0])
                raise ValueError(f"graph {g} has {self.num_nodes[g]} nodes in the cache but {rows[g]} feature rows")
            self.node_ptr = node_ptr
            self.features = torch.cat(list(features)) if len(features) else torch.zeros(0, 0)
            self.labels = labels
            self.logged = False
            if self.log_spec is not None:
                self._read_pairs(cache, node_ptr, log_budget_bytes)

    def _read_pairs(self, cache: StructureCache, node_ptr: np.ndarray, budget: int) -> None:
        """Every stored pair once: local row / col (16 bits where graphs allow) and the log of its values."""
        indptr = np.asarray(cache.read_array("powers/indptr"), dtype=np.int64)
        self.pair_ptr = indptr[node_ptr]
        per_node = np.diff(indptr)
        small = np.uint16 if int(self.num_nodes.max(initial=0)) <= np.iinfo(np.uint16).max else np.int32
        local_node = (np.arange(len(per_node), dtype=np.int64) - np.repeat(node_ptr[:-1], self.num_nodes)).astype(small)
        self.row = np.repeat(local_node, per_node)  # repeated in 16 bits: no [P] int64 scratch
        self.col = np.asarray(cache.read_array("powers/col")).astype(small, copy=False)
        # float32 as the dense path scatters them; the log is taken in float32 (1e-30 underflows float16).
        self.values = np.asarray(cache.read_array("powers/values"), dtype=np.float32)
        # Row-major pairs: a batch's pairs are then sorted as the pair path's CSR plan needs them (no sort per
        # batch); the dense masks place pairs by position, so their order changes no number.
        if not _rows_sorted(indptr, self.col):
            self.col, self.values = np.require(self.col, requirements="W"), np.require(self.values, requirements="W")
            _sort_rows(indptr, self.col, self.values)
        if self.values.nbytes <= budget:
            eps, outside = self.log_spec  # type: ignore[misc]
            vals = torch.from_numpy(self.values)
            for s in range(0, len(vals), LOG_CHUNK):
                part = vals[s:s + LOG_CHUNK]
                off = torch.from_numpy(self.row[s:s + LOG_CHUNK] != self.col[s:s + LOG_CHUNK])[:, None]
                log_powers(part, eps, outside, off_diagonal=off, inplace=True)  # writes into self.values
            self.logged = True

    @property
    def nbytes(self) -> int:
        """Bytes of the structure kept (pairs and their values)."""
        return sum(a.nbytes for a in (getattr(self, n, None) for n in ("row", "col", "values")) if a is not None)

    def gather(self, ids: np.ndarray) -> tuple[Tensor, Tensor, LogPairs | None]:
        """``(x [B, N, F], mask [B, N], pairs)`` of graphs ``ids``, padded to the largest (N >= 1).

        ``pairs``: their :class:`LogPairs` (None without ``log_mask``).
        """
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        sizes = self.num_nodes[ids]
        bsz, width = len(ids), max(int(sizes.max(initial=0)), 1)
        src, local = ranges(self.node_ptr[ids], sizes)
        dst = torch.from_numpy(np.repeat(np.arange(bsz, dtype=np.int64) * width, sizes) + local)
        feat = self.features
        x = feat.new_zeros((bsz * width, *feat.shape[1:]))
        x[dst] = feat[torch.from_numpy(src)]
        mask = torch.zeros(bsz * width, dtype=torch.bool)
        mask[dst] = True
        pairs = None
        if self.log_spec is not None:
            starts = self.pair_ptr[ids]
            counts = self.pair_ptr[ids + 1] - starts
            # Each graph's pairs are one contiguous span: copy the spans (memcpy), no [P] index array to
            # build and gather through; the 16-bit rows and columns widen inside the same copy.
            spans = [slice(a, b) for a, b in zip(starts.tolist(), (starts + counts).tolist())]
            row = torch.from_numpy(spans_of(self.row, spans, np.int64))
            col = torch.from_numpy(spans_of(self.col, spans, np.int64))
            values = torch.from_numpy(spans_of(self.values, spans))
            if not self.logged:
                eps, outside = self.log_spec
                log_powers(values, eps, outside, off_diagonal=(row != col)[:, None], inplace=True)
            graph = torch.from_numpy(np.repeat(np.arange(bsz, dtype=np.int64), counts))
            pairs = LogPairs(graph=graph, row=row, col=col, values=values)
        return x.view(bsz, width, *feat.shape[1:]), mask.view(bsz, width), pairs
