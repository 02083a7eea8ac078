"""Whole-graph node attention in query batches: every query over all of its stored keys.

A large graph's attention runs over the cache's stored (truncated) support of
the *whole* graph, as the full-graph sparse path does, but never materialises
all pairs at once. For a set of query nodes ``Q`` and ``L`` blocks, layer
``l`` needs the block input at every key of every query of layer ``l`` (and at
the queries themselves, for the residual); so the node sets are taken
backwards, PyG ``NeighborLoader``-style but with *all* stored keys (no
sampling)::

    S_L = Q,    S_{l-1} = S_l ∪ keys(S_l)

and each block is computed forwards on ``S_l`` from ``S_{l-1}`` in chunks of
queries whose pairs fit a budget (``chunk_pairs``). This is exact: a query's
output is a function of its own stored pairs only, so it equals the
full-graph sparse forward at that node (tested). Memory is bounded by the
chunk: the ``[E, H, d_h]`` pair tensors only ever hold one chunk's pairs;
with more than one chunk in a layer, training recomputes each chunk in the
backward (activation checkpointing) instead of keeping every chunk's pairs.

Plain heads (``k_h = 0``, ``use_bias: false``) attend over every node of the
graph, as on every other path (:func:`~xmask_cli.model.attention.ops.plain_attention`,
in query chunks): every ``S_l`` below the queries is then the whole graph.
A model that needs the dense grid (``outside_support: eps``, a learned bias
on a plain head) is refused here.

With one block (the large-graph presets) ``S_0`` is just the batch's support.
With several, ``S_0`` grows towards the whole graph; a batch of all training
nodes then gives one exact full-batch gradient step per epoch, with memory
still bounded by the chunk. Evaluation runs every node as a query.

Example::

    with StructureCache(path) as cache:
        support = Support.from_coo(*cache.powers(0), num_nodes=N)
    h = encode_queries(model, x, support, np.arange(support.num_nodes))  # [N, hidden]
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from xmask_cli.config import NodeSection
from xmask_cli.model.layers import TransformerBlock, transformer_blocks
from xmask_cli.model.logsmask import SparseStructure, XLogSMaskBias
from xmask_cli.model.model_config import sparse_refusal
from xmask_cli.model.network import XMaskNet

__all__ = ["Support", "QueryStats", "closure", "encode_queries", "chunks_by_pairs"]

#: Default pair budget of one attention chunk (``node.query_chunk_pairs``, 2^19): with ``hidden = 64`` one
#: gathered ``[E, H, d_h]`` float tensor is 128 MB.
CHUNK_PAIRS = NodeSection.query_chunk_pairs
#: Rows of raw features encoded at once (bounds the gathered ``[n, F]`` copy; Physics has F = 8415).
ENCODE_ROWS = 4096
#: Above this many gathered feature floats (256 MB) the backward re-gathers and re-encodes each row
#: block instead of keeping it; below, keeping them is cheaper (input dropout is most of the encoder's work).
ENCODE_KEEP_FLOATS = 1 << 26


@dataclass
class Support:
    """The stored support of one graph as CSR over global node ids.

    Attributes:
        indptr: ``[N + 1]`` row pointers.
        col: ``[P]`` key of each stored pair, rows ascending.
        values: ``[P, K]`` ``Â^1..Â^K`` at each pair.
    """

    indptr: np.ndarray
    col: np.ndarray
    values: np.ndarray

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def num_pairs(self) -> int:
        return len(self.col)

    @classmethod
    def from_coo(cls, row: np.ndarray, col: np.ndarray, values: np.ndarray, num_nodes: int) -> Support:
        """From the cache's ``(row, col, values)`` (rows ascending, as every cache stores them)."""
        row = np.asarray(row, dtype=np.int64)
        if len(row) > 1 and bool((np.diff(row) < 0).any()):
            order = np.argsort(row, kind="stable")
            row, col, values = row[order], np.asarray(col)[order], np.asarray(values)[order]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=num_nodes))]).astype(np.int64)
        return cls(indptr, np.asarray(col, dtype=np.int64), np.ascontiguousarray(values, dtype=np.float32))

    def counts(self, rows: np.ndarray) -> np.ndarray:
        """Stored pairs of each of ``rows``."""
        return self.indptr[rows + 1] - self.indptr[rows]

    def positions(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(pos [E], counts [len(rows)])``: CSR positions of all pairs of ``rows``, row by row."""
        starts = self.indptr[rows]
        counts = self.indptr[rows + 1] - starts
        offsets = np.repeat(starts - np.cumsum(counts) + counts, counts)
        return np.arange(int(counts.sum()), dtype=np.int64) + offsets, counts


@dataclass
class QueryStats:
    """What the last :func:`encode_queries` call touched (for memory checks and benchmarks).

    Attributes:
        set_sizes: ``|S_0|, ..., |S_L|`` (``S_L`` = the queries).
        pairs: attended pairs per layer.
        max_chunk_pairs: most pairs in one attention chunk (the bound on pair tensors).
        chunks: attention chunks in all.
    """

    set_sizes: list[int] = field(default_factory=list)
    pairs: list[int] = field(default_factory=list)
    max_chunk_pairs: int = 0
    chunks: int = 0


def closure(support: Support, queries: np.ndarray, layers: int, whole: bool = False) -> list[np.ndarray]:
    """Node sets ``[S_0, ..., S_L]`` (ascending ids): ``S_L = queries``, ``S_{l-1} = S_l ∪ keys(S_l)``.

    ``whole``: every ``S_l`` below ``S_L`` is the whole graph (a model with plain
    heads, whose keys are every node).
    """
    sets = [np.unique(np.asarray(queries, dtype=np.int64))]
    for _ in range(layers):
        cur = sets[0]
        if whole:
            sets.insert(0, np.arange(support.num_nodes, dtype=np.int64))
            continue
        if len(cur) == support.num_nodes:
            sets.insert(0, cur)  # already everything
            continue
        pos, _ = support.positions(cur)
        sets.insert(0, np.union1d(cur, support.col[pos]))
    return sets


def chunks_by_pairs(counts: np.ndarray, budget: int) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` query slices whose pairs stay within ``budget`` (at least one query each)."""
    bounds, start, total = [], 0, 0
    for i, c in enumerate(counts.tolist()):
        if i > start and total + c > budget:
            bounds.append((start, i))
            start, total = i, 0
        total += c
    if start < len(counts):
        bounds.append((start, len(counts)))
    return bounds


def _maybe_checkpoint(fn: Callable[..., Tensor], *args: Tensor, recompute: bool) -> Tensor:
    # Non-reentrant checkpointing keeps the RNG state, so dropout draws the same masks when recomputed.
    if recompute:
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


def encode_queries(model: XMaskNet, x: Tensor | sp.csr_matrix, support: Support, queries: np.ndarray, *,
                   chunk_pairs: int = CHUNK_PAIRS, device: torch.device | str = "cpu",
                   stats: QueryStats | None = None, output: bool = False) -> Tensor:
    """Node embeddings ``[len(queries), hidden]`` of an :class:`~xmask_cli.model.network.XMaskNet`.

    Each block attends from every query over all of its stored pairs, exactly
    as :meth:`XMaskNet.encode_sparse` on the whole graph's pairs would.

    Args:
        model: the network (node task, no attention experts).
        x: ``[N, F]`` raw features of the whole graph (any device; rows are gathered per chunk),
            or a scipy CSR matrix for sparse features (encoded as a sparse product).
        support: the graph's stored pairs (:class:`Support`).
        queries: ascending, distinct global ids.
        chunk_pairs: pair budget of one attention chunk (a query with more pairs gets a chunk alone).
        device: where the model runs.
        stats: filled with what was touched, when given.
        output: also run the model's attention output layer (``model.output: attention``) as one more
            layer over the same pairs: the result is then the outputs ``[len(queries), out_dim]``.

    Returns:
        The embeddings in the order of ``queries``.
    """
    refusal = sparse_refusal(model.cfg)
    if refusal is not None:
        raise ValueError(f"the query-batch path attends over stored pairs (sparse), which is refused: {refusal}")
    queries = np.asarray(queries, dtype=np.int64)
    if len(queries) > 1 and bool((np.diff(queries) <= 0).any()):
        raise ValueError("queries must be ascending and distinct")
    # (block, its X-LogSMask bias, its layer index for learned biases or None): the blocks, then the output layer.
    layers: list[tuple[TransformerBlock, XLogSMaskBias | None, int | None]] = [(block, model.bias, i) for i, block in enumerate(transformer_blocks(model.blocks))]
    if output:
        if model.out_block is None:
            raise ValueError("output=True needs a model with an attention output layer (model.output=attention)")
        layers.append((model.out_block, model.out_bias, None))
    # Plain heads (k_h = 0, use_bias=False) attend over every node: each layer then needs all of them.
    plain = bool(model.cfg.plain_heads)
    sets = closure(support, queries, len(layers), whole=plain)
    stats = stats if stats is not None else QueryStats()
    stats.set_sizes = [len(s) for s in sets]
    stats.pairs, stats.max_chunk_pairs, stats.chunks = [], 0, 0
    if not len(queries):
        return torch.zeros(0, model.cfg.out_dim if output else model.cfg.hidden, device=device)
    h = _encode_rows(model, x, sets[0], device)
    local = np.full(support.num_nodes, -1, dtype=np.int64)  # global id -> row of the previous layer's h
    for layer, (block, bias_module, learned_layer) in enumerate(layers):
        prev, cur = sets[layer], sets[layer + 1]
        # Dropped once per layer, before its query and key rows are taken: one mask per node, as on the sparse path.
        h = block.drop_input(h)
        local[prev] = np.arange(len(prev), dtype=np.int64)
        counts_cur = support.counts(cur)
        spans = chunks_by_pairs(counts_cur, chunk_pairs)
        run = _LayerRun(model, block, bias_module, learned_layer, plain)
        outs = [_maybe_checkpoint(run, h, *_chunk(support, cur[start:stop], local, device, h.device, stats),
                                  recompute=torch.is_grad_enabled() and len(spans) > 1) for start, stop in spans]
        stats.pairs.append(int(counts_cur.sum()))
        local[prev] = -1
        h = torch.cat(outs)
    return h


def _encode_rows(model: XMaskNet, x: Tensor | sp.csr_matrix, rows: np.ndarray,
                 device: torch.device | str) -> Tensor:
    """``[len(rows), hidden]`` encoded features of ``rows``, in blocks of :data:`ENCODE_ROWS`."""

    def encode(block_rows: Tensor) -> Tensor:
        if isinstance(x, sp.spmatrix):  # sparse features: only the rows' stored entries are gathered
            sub = x[block_rows.numpy()].tocoo()
            indices = torch.from_numpy(np.stack([sub.row, sub.col]).astype(np.int64))
            block = torch.sparse_coo_tensor(indices, torch.from_numpy(sub.data.astype(np.float32)), sub.shape,
                                            check_invariants=False)
            return model.embed(block.to(device))
        return model.embed(x[block_rows].to(device, non_blocking=True))

    ids = torch.from_numpy(rows)
    if isinstance(x, Tensor):
        ids = ids.to(x.device)
    width = x.shape[1] if not isinstance(x, sp.spmatrix) else x.nnz / max(x.shape[0], 1)
    recompute = torch.is_grad_enabled() and len(rows) * width > ENCODE_KEEP_FLOATS
    return torch.cat([_maybe_checkpoint(encode, ids[i:i + ENCODE_ROWS], recompute=recompute)
                      for i in range(0, len(rows), ENCODE_ROWS)])


def _chunk(support: Support, rows: np.ndarray, local: np.ndarray, device: torch.device | str,
           h_device: torch.device, stats: QueryStats) -> tuple[Tensor, ...]:
    """``(q_idx, k_idx, edge_index, values, global_pairs)`` of one chunk of query ``rows``, its keys only."""
    pos, counts = support.positions(rows)
    keys, key_col = np.unique(support.col[pos], return_inverse=True)  # the chunk's keys only
    q_row = np.repeat(np.arange(len(rows), dtype=np.int64), counts)
    edge_index = torch.from_numpy(np.stack([q_row, key_col.reshape(-1).astype(np.int64)])).to(device)
    # The bias sees global ids: it tells the self pair (i, i) apart by them, which chunk-local
    # query and key indices (two different numberings) cannot.
    global_pairs = torch.from_numpy(np.stack([rows[q_row], support.col[pos]])).to(device)
    values = torch.from_numpy(support.values[pos]).to(device)
    stats.max_chunk_pairs = max(stats.max_chunk_pairs, len(pos))
    stats.chunks += 1
    return (torch.from_numpy(local[rows]).to(h_device), torch.from_numpy(local[keys]).to(h_device), edge_index,
            values, global_pairs)


class _LayerRun:
    """One layer's attention over one chunk's pairs, from the previous layer's ``h`` (checkpointable)."""

    def __init__(self, model: XMaskNet, block: TransformerBlock, bias_module: XLogSMaskBias | None,
                 learned_layer: int | None, plain: bool):
        self.model, self.block, self.bias_module, self.learned_layer, self.plain = (
            model, block, bias_module, learned_layer, plain)

    def __call__(self, h_prev: Tensor, q_idx: Tensor, k_idx: Tensor, edge_index: Tensor, values: Tensor,
                 global_pairs: Tensor) -> Tensor:
        xlog = None if self.bias_module is None else self.bias_module(
            SparseStructure(edge_index=global_pairs, values=values))
        learned = None if self.learned_layer is None else self.model._learned(self.learned_layer, None,
                                                                               edge_index=edge_index)
        # With plain heads h_prev holds every node, in id order: their keys.
        return self.block.forward_pairs(h_prev[q_idx], h_prev[k_idx], edge_index, xlog,
                                        plain_keys=h_prev if self.plain else None, learned=learned)
