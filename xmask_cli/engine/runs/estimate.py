"""What a run will cost before it runs: stored pairs, and the memory of its largest training step.

Pairs: the support of ``Â^k`` (self loops added, so the diagonal is in it) is every pair within ``k`` hops,
so the pairs a cache stores (the union support of ``Â^1..Â^K``, and each power's own) follow from the graphs
alone: :func:`hop_pair_counts` counts them with boolean sparse products, :func:`cached_pair_counts` reads
them back from a cache file (the same numbers for graphs under ``structure.large.min_nodes``; above it
prepare keeps at most ``large.topk`` entries a row, and :func:`hop_pair_counts` gives that bound).

Memory of one training step, beyond what is resident before it (weights, optimizer state, the batch):
the gradients (4 bytes a parameter) and the activations kept for the backward pass,
``4 · (TOKEN_FLOATS · layers · nodes · hidden + ENTRY_FLOATS · entries)`` bytes. ``entries`` is what the
step's attention spans, per head, summed over heads and attention layers: on the dense and packed paths the
padded ``[G, H, W, W]`` grids of its attention groups (:func:`~xmask_cli.model.packing.plan_groups`), built
once and shared by the layers; on the sparse path each head's own support in every attention layer.
``ENTRY_FLOATS`` counts the floats an entry holds: on the dense and packed paths the X-LogSMask bias and the
SDPA mask built from it (CPU SDPA keeps no attention matrix), on the sparse path each pair's logit and
weight. ``TOKEN_FLOATS`` (floats of width ``hidden`` a block keeps per node: Q, K, V, the attention output
and its layout copies, residual and norm inputs, the FFN's hidden rows, dropout masks) depends on the
block's shape; it is measured, not derived: on MUTAG's steps for the graph-level block (attention,
projection, post-norm residuals, FFN of width 2) and on Cora's for the GAT-shaped sparse block (attention
only). A dropout on the raw features (``input_dropout``, or ``layer_dropout`` where the first block reads
them: ``encoder: none``) keeps its output and its mask, ``DROPPED_FLOATS`` floats per feature (a dense
feature matrix; sparse features drop their stored entries only, which the estimate leaves out).
``benchmarks/dry_run_memory.py`` checks the figure against measured steps on presets beyond those.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from xmask_cli.cache import StructureCache
from xmask_cli.model.packing import GROUP_CALL_PAIRS, plan_groups

__all__ = ["DROPPED_FLOATS", "ENTRY_FLOATS", "TOKEN_FLOATS", "StepShape", "cached_pair_counts", "graph_batch_shape",
           "hop_pair_counts", "step_bytes"]

#: Floats of width ``hidden`` a block keeps per node during a step, by attention path (measured; see above).
TOKEN_FLOATS = {"dense": 22.0, "packed": 22.0, "sparse": 5.0}
#: Floats per attention entry alive during a step, by attention path (see the module docstring).
ENTRY_FLOATS = {"dense": 2.0, "packed": 2.0, "sparse": 2.0}
#: Floats a dropout keeps per dropped value: its output, and its mask at one byte (a quarter float).
DROPPED_FLOATS = 1.25
#: Bytes of one stored float.
FLOAT = 4


def hop_pair_counts(edges: list[np.ndarray], num_nodes: np.ndarray, k: int, *, large_min: int | None = None,
                    topk: int = 0) -> np.ndarray:
    """``[G, k]``: pairs of each graph within ``1..k`` hops (self pairs included), the support of ``Â^1..Â^k``.

    Graphs above ``large_min`` nodes get their row-capped bound ``Σ min(row pairs, topk)`` when ``topk > 0``
    (prepare truncates such graphs' rows to ``topk`` entries).
    """
    nn = np.asarray(num_nodes, dtype=np.int64)
    out = np.zeros((len(nn), k), dtype=np.int64)
    if k < 1 or len(nn) == 0:
        return out
    offsets = np.concatenate([[0], np.cumsum(nn)])
    rows = [np.asarray(e).reshape(2, -1)[0] + offsets[g] for g, e in enumerate(edges)]
    cols = [np.asarray(e).reshape(2, -1)[1] + offsets[g] for g, e in enumerate(edges)]
    total = int(offsets[-1])
    r, c = np.concatenate(rows) if rows else np.zeros(0, np.int64), np.concatenate(cols) if cols else np.zeros(0, np.int64)
    # One block-diagonal matrix for every graph: no pair crosses graphs, and each product runs once.
    a = sp.csr_matrix((np.ones(len(r), dtype=np.float32), (r, c)), shape=(total, total))
    step = ((a + a.T + sp.identity(total, dtype=np.float32, format="csr")) > 0).astype(np.float32).tocsr()
    reach = step.copy()
    graph_of_row = np.repeat(np.arange(len(nn)), nn)
    capped = np.zeros(len(nn), dtype=bool) if large_min is None or topk <= 0 else nn > large_min
    for j in range(k):
        per_row = np.diff(reach.indptr)
        if capped.any():
            per_row = np.where(capped[graph_of_row], np.minimum(per_row, topk), per_row)
        out[:, j] = np.bincount(graph_of_row, weights=per_row, minlength=len(nn)).astype(np.int64)
        if j + 1 < k:
            reach = (reach @ step > 0).astype(np.float32).tocsr()
    return out


def cached_pair_counts(cache: StructureCache, k: int) -> np.ndarray:
    """``[G, k]``: the pairs a cache file stores for each graph and power (entries of ``Â^j`` that are not 0)."""
    ptr = cache.read_array("graphs/node_ptr")
    indptr = cache.read_array("powers/indptr")
    values = cache.read_array("powers/values")[:, :k]
    pair_ptr = indptr[ptr]  # each graph's first and last stored pair
    nonzero = np.concatenate([np.zeros((1, values.shape[1]), np.int64), np.cumsum(values != 0, axis=0)])
    return (nonzero[pair_ptr[1:]] - nonzero[pair_ptr[:-1]]).astype(np.int64)


@dataclass(frozen=True)
class StepShape:
    """What the largest training step holds: its graphs, nodes and attention entries (per head, summed over
    heads) on one path (``dense``, ``packed`` or ``sparse``); ``dropped_width``: the raw feature columns a
    dropout draws over per node (0: none)."""

    graphs: int
    nodes: int
    entries: int
    path: str
    dropped_width: int = 0

    def to_json(self) -> dict[str, object]:
        return {"graphs": self.graphs, "nodes": self.nodes, "attention_entries": self.entries, "path": self.path,
                "dropped_feature_columns": self.dropped_width}


def graph_batch_shape(sizes: list[int], heads: int, layout: str, dropped_width: int = 0) -> StepShape:
    """A graph-level batch of graphs of ``sizes``: packed (attention groups as the model plans them) or padded."""
    if layout == "packed":
        groups = plan_groups(sizes, GROUP_CALL_PAIRS)
        entries = sum(len(g) * sizes[g[0]] ** 2 for g in groups) * heads
        return StepShape(len(sizes), int(sum(sizes)), int(entries), "packed", dropped_width)
    width = max(sizes, default=0)
    return StepShape(len(sizes), len(sizes) * width, len(sizes) * width * width * heads, "dense", dropped_width)


def step_bytes(shape: StepShape, *, parameters: int, hidden: int, layers: int) -> int:
    """Bytes one training step of ``shape`` adds to what is resident before it (see the module docstring)."""
    tokens = TOKEN_FLOATS[shape.path] * layers * shape.nodes * hidden
    dropped = DROPPED_FLOATS * shape.nodes * shape.dropped_width
    return int(FLOAT * (parameters + tokens + dropped + ENTRY_FLOATS[shape.path] * shape.entries))
