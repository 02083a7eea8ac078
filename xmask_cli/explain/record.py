"""Recording: the model's own forward with every layer's attention terms, as numpy.

:func:`record_terms` runs the very forward a run evaluates with
(:meth:`XMaskNet.encode_dense` / :meth:`~XMaskNet.encode_sparse` with
``return_terms=True``); :class:`Recorded` holds one forward's terms and crops
them; :class:`SingleGraph` is the forward over one graph's nodes for node-,
link- and edge-level runs (the full graph, or the METIS part holding a node).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from xmask_cli.errors import UsageError
from xmask_cli.model.batches import DenseBatch, SparseBatch
from xmask_cli.model.network import XMaskNet

__all__ = ["KINDS", "Recorded", "SingleGraph", "record_terms", "to_numpy"]

#: Map kinds recorded per layer and head, in plotting order (rows of the grid).
KINDS = ("energy", "structural", "logits", "attention")


@dataclass
class Recorded:
    """Every layer's terms of one forward over ``n`` nodes, as numpy.

    Dense: ``layers[l][kind]`` is ``[H, n, n]``. Sparse: ``[E, H]`` on ``pairs`` (``[2, E]`` local ids).
    """

    n: int
    layers: list[dict[str, np.ndarray]]
    pairs: np.ndarray | None = None

    @property
    def dense(self) -> bool:
        return self.pairs is None

    @property
    def heads(self) -> int:
        a = self.layers[0]["attention"]
        return int(a.shape[0] if self.dense else a.shape[1])

    def crop(self, sel: np.ndarray) -> list[dict[str, np.ndarray]]:
        """``[H, m, m]`` maps per layer and kind on the local nodes ``sel`` (in that order)."""
        out = []
        pairs = self.pairs
        if pairs is None:  # dense
            for terms in self.layers:
                out.append({k: np.ascontiguousarray(terms[k][:, sel][:, :, sel]) for k in KINDS})
            return out
        m = len(sel)
        pos = np.full(self.n, -1, dtype=np.int64)
        pos[sel] = np.arange(m)
        r, c = pos[pairs[0]], pos[pairs[1]]
        keep = (r >= 0) & (c >= 0)
        r, c = r[keep], c[keep]
        fill = {"energy": np.nan, "structural": np.nan, "logits": -np.inf, "attention": 0.0}
        for terms in self.layers:
            maps = {}
            for k in KINDS:
                a = np.full((self.heads, m, m), fill[k], dtype=np.float32)
                a[:, r, c] = terms[k][keep].T
                maps[k] = a
            out.append(maps)
        return out

    def rows(self, layer: int, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(query position in queries, key, attention [.., H])`` of every recorded pair of rows ``queries``.

        Sparse recordings only: dense maps are read as row blocks (:func:`~xmask_cli.explain.hops.hop_mass`).
        """
        pairs = self.pairs
        if pairs is None:  # dense
            raise ValueError("rows() lists the pairs of a sparse recording; index a dense one's maps directly")
        att = self.layers[layer]["attention"]
        where = np.full(self.n, -1, dtype=np.int64)
        where[queries] = np.arange(len(queries))
        q = where[pairs[0]]
        keep = q >= 0
        return q[keep], pairs[1][keep], att[keep]


def to_numpy(terms: dict[str, torch.Tensor], index: Any = None) -> dict[str, np.ndarray]:
    """The :data:`KINDS` of one layer's terms (optionally indexed, e.g. batch 0) as float32 numpy."""
    return {k: (terms[k] if index is None else terms[k][index]).detach().float().cpu().numpy() for k in KINDS}


@torch.no_grad()
def record_terms(model: XMaskNet, batch: DenseBatch | SparseBatch,
                 reduce: Callable[[dict[str, torch.Tensor]], Any] | None = None) -> tuple[torch.Tensor, list[Any]]:
    """Eval-mode forward of ``model`` with every layer's attention terms.

    Dense for a :class:`DenseBatch` (``x [1, N, F]``, ``powers``, ``mask``), sparse for a
    :class:`SparseBatch` (``x [N, F]``, ``edge_index``, ``values``); their ``extras`` feed
    the learned biases. Returns ``(h, terms per layer)``. ``reduce`` (dense only): called on each
    layer's terms as soon as the layer has run, its result kept instead, so the
    ``[1, H, N, N]`` maps of one layer are gone before the next layer's exist.
    """
    model.eval()
    extras = None if batch.extras is None else {k: v.to(batch.x.device) for k, v in batch.extras.items()}
    if isinstance(batch, DenseBatch):
        out = model.encode_dense(batch.x, batch.powers, batch.mask, return_terms=reduce or True, extras=extras)
    elif reduce is not None:
        raise ValueError("reduce is for the dense forward")
    else:
        out = model.encode_sparse(batch.x, batch.edge_index, batch.values, return_terms=True, extras=extras)
    if not isinstance(out, tuple):  # return_terms is set: the encoders return (h, terms)
        raise TypeError(f"{type(model).__name__} returned no attention terms")
    return out


class SingleGraph:
    """The forward over one graph's nodes for node-, link- and edge-level tasks (full graph or a part)."""

    def __init__(self, task: Any, level: str):
        self.task, self.level = task, level
        self.num_nodes = int(task.num_nodes)  # node, link and edge tasks: the graph's node count
        self.cache_path = task.cache_path
        self._memo: dict[Any, tuple[np.ndarray, Recorded]] = {}

    def _batch_for(self, nodes: Sequence[int] | np.ndarray) -> tuple[Any, np.ndarray]:
        """(batch key, global ids of the batch's nodes) holding all ``nodes``."""
        t = self.task
        if self.level == "node" and t.eval_mode == "partition":
            for i, b in enumerate(t.eval_batches):
                ids = b.nodes.numpy()
                if np.isin(nodes, ids).all():
                    return i, ids
            raise UsageError(f"nodes {list(map(int, nodes))} lie in different METIS parts of this run's evaluation "
                             f"batches; explain them one at a time (--node I)")
        return "full", np.arange(self.num_nodes)

    def features(self, nodes: np.ndarray) -> np.ndarray:
        """``[len(nodes), F]`` float32 input features of the global ids ``nodes`` (as the forward reads them)."""
        return self.task.x[torch.as_tensor(np.asarray(nodes, dtype=np.int64))].float().cpu().numpy()

    def forward(self, model: Any, nodes: Sequence[int] | np.ndarray) -> tuple[np.ndarray, Recorded]:
        """``(global ids of the forward's nodes, its recorded terms)`` for a forward holding all ``nodes``."""
        key, ids = self._batch_for(nodes)
        if key in self._memo:
            return self._memo[key]
        t = self.task
        device = next(model.parameters()).device
        if self.level == "node":
            b = t.whole_graph_batch() if key == "full" else t.eval_batches[key]
            x = (t.x if b.nodes is None else t.x[b.nodes]).to(device)
            if b.powers is not None:
                _, layers = record_terms(model, DenseBatch(x.unsqueeze(0), b.powers.to(device), extras=b.extras))
                pairs = None
            else:
                _, layers = record_terms(model, SparseBatch(x, b.edge_index.to(device), b.values.to(device),
                                                            extras=b.extras))
                pairs = b.edge_index.cpu().numpy()
        else:
            s = t.structure
            x = t.x.to(device)
            if s.dense:
                _, layers = record_terms(model, DenseBatch(x.unsqueeze(0), s.powers, extras=s.extras))
                pairs = None
            else:
                _, layers = record_terms(model, SparseBatch(x, s.pairs, s.values, extras=s.extras))
                pairs = s.pairs.cpu().numpy()
        if pairs is None:
            rec = Recorded(n=len(ids), layers=[to_numpy(terms, 0) for terms in layers])
        else:
            rec = Recorded(n=len(ids), layers=[to_numpy(terms) for terms in layers], pairs=pairs)
        self._memo = {key: (ids, rec)}  # keep one forward: a full-graph one can be large
        return ids, rec
