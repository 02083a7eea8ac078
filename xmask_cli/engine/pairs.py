"""Link prediction and edge regression as :class:`~xmask_cli.engine.loop.Task` s.

Both score node pairs with :meth:`XMaskNet.score_pairs` on node embeddings of
one graph, and both see **only the training edges** as structure (DESIGN.md,
"The math, pinned"): :func:`prepare_pair_structure` caches the powers, SPD
and spectrum of the training-edge graph under its own key, and each task
refuses a cache whose fingerprint is not that of its training edges, so no
validation or test edge can reach a mask, a distance or an eigenvector.

Node embeddings come from the whole training-edge graph at every step: the
dense path (``encode_dense`` on cached ``Â^1..Â^K``) when ``N <=
dense_max_nodes``, else the sparse path over the cached pairs (same numbers,
see :mod:`~xmask_cli.engine.paths`; a model that needs the dense grid,
``dense_only``, is refused above ``dense_max_nodes``).

Link prediction (:class:`LinkTask`)
-----------------------------------

Training: every epoch, the training positives (``split.train_pos``, one
column per undirected edge) against as many negatives drawn uniformly among
pairs ``u != v`` that are not training edges (with replacement), from
``numpy.random.default_rng((seed, epoch))``, so a resumed run draws exactly
the pairs it would have drawn. Loss: binary cross-entropy with logits.
``batch_size = 0`` puts every pair in one step; otherwise the positives are
shuffled by the same generator and each step takes ``batch_size`` positives
plus as many negatives, re-encoding the graph.

Evaluation, metric MRR (:func:`xmask_cli.engine.metrics.mrr`: rank = 1 +
#negatives scored higher + 0.5 * #negatives scored equal), two protocols:

* ``shared`` (default): HeaRT's "existing setting", the one used by the
  papers' Planetoid link benchmarks. Each val/test positive is ranked against
  ALL negatives of its part: EdgeSplit's fixed ``val_neg`` / ``test_neg``
  (``num_neg_per_pos`` per positive, so ``P * M`` negatives shared by all P
  positives of the part).
* ``per-positive``: positive ``i`` is ranked against its own
  ``num_neg_per_pos`` negatives only, columns ``i*M .. (i+1)*M-1`` of
  ``val_neg`` / ``test_neg`` (OGB-style; with ``M = 1`` a rank is 1, 1.5 or 2).

The ``train`` part (reported only) uses fixed negatives drawn once from
``default_rng((split.seed, 2))``, ``M`` per training positive, excluding every
known edge (train, val and test positives), under the same protocol.

Edge regression (:class:`EdgeTask`)
-----------------------------------

One row of an edge file (:mod:`xmask_cli.data.edgefile`) is one target
vector. Rows are split with :func:`edge_regression_split`; only the training
rows' edges (both directions) form the structure, and without node features
a one-hot degree of that training graph (capped at 64) stands in, so no
held-out edge leaks through features either. Targets are standardised by the
training rows' mean and std for the MSE loss; MAE / RMSE are reported in the
file's units.

Example::

    split = edge_split(data.edge_index, data.num_nodes, seed=0)
    path = prepare_pair_structure("cora", split.train_edge_index, data.num_nodes, cfg.structure, cache_dir)
    task = LinkTask(path, data.x, split, dataset="Cora", seed=0)
    model_cfg = ModelConfig(in_dim=task.in_dim, out_dim=task.out_dim, task=task.model_task, hidden=64)
    summary = train_task(task, model_cfg, TrainConfig(seed=0), "runs/cora-link/0")  # engine.train

    data = load_edge_file("bonds.csv")
    rows = edge_regression_split(data.num_edges, seed=0)
    path = prepare_pair_structure("bonds", train_edge_index(data, rows), data.num_nodes, cfg.structure,
                                  cache_dir, level="edge")
    task = EdgeTask(path, None, data, rows, dataset="bonds", metric="mae")
"""
from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from xmask_cli.cache import StructureCache, cache_key, cache_path
from xmask_cli.config import StructureConfig
from xmask_cli.data.edgefile import EdgeData
from xmask_cli.data.load import graphs_fingerprint
from xmask_cli.engine.extras import GraphExtras, to_tensors
from xmask_cli.engine.loop import PARTS
from xmask_cli.engine.metrics import METRICS, mrr
from xmask_cli.engine.paths import full_graph_attention
from xmask_cli.engine.splits import EdgeSplit, Split, pair_keys, sample_negatives, random_split

__all__ = [
    "PROTOCOLS", "MAX_DEGREE", "LinkTask", "EdgeTask", "prepare_pair_structure", "canonical_edges",
    "structure_fingerprint", "train_edge_index", "edge_regression_split", "one_hot_degree", "link_mrr",
]

#: MRR protocols of :class:`LinkTask` (see the module docstring).
PROTOCOLS = ("shared", "per-positive")
#: Degrees above this share the last one-hot slot (as :func:`xmask_cli.engine.train.node_features`).
MAX_DEGREE = 64
# metrics.mrr builds [rows, M] comparison matrices: bound them to ~4M entries per call.
_MRR_CHUNK = 1 << 22


# --------------------------------------------------------------- structure
def canonical_edges(edge_index: Any, num_nodes: int) -> np.ndarray:
    """``[2, 2U]`` unique undirected edges (no self loops): sorted pairs ``u < v``, then reversed.

    One canonical form, so the cache key (which hashes the edges) and the
    tasks' fingerprint check do not depend on edge order or duplicates.
    """
    ei = np.ascontiguousarray(np.asarray(edge_index), dtype=np.int64).reshape(2, -1)
    n = int(num_nodes)
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise ValueError(f"edge ids must lie in [0, {n})")
    keys = np.unique(pair_keys(ei[0], ei[1], n)[ei[0] != ei[1]])
    pairs = np.stack([keys // n, keys % n]).astype(np.int64) if n else np.zeros((2, 0), dtype=np.int64)
    return np.concatenate([pairs, pairs[::-1]], axis=1)


def structure_fingerprint(edge_index: Any, num_nodes: int) -> str:
    """Fingerprint of the (canonical) graph whose structure a pair task may see."""
    return graphs_fingerprint([canonical_edges(edge_index, num_nodes)], np.asarray([int(num_nodes)]))


def prepare_pair_structure(
    dataset_key: str,
    edge_index: np.ndarray,
    num_nodes: int,
    cfg: StructureConfig,
    cache_dir: Path,
    *,
    level: str = "link",
    workers: int = 1,
    force: bool = False,
    log: Callable[[str], None] = lambda m: None,
) -> Path:
    """Prepare (or reuse) the structure cache of the TRAINING-edge graph; returns its path.

    The cache lives under ``<cache_dir>/<dataset_key>-train-edges/``; its key
    hashes these edges, so another split (seed, fractions) gets its own file
    and the full graph's cache is never reused by mistake.

    Args:
        dataset_key: lower-case dataset name, e.g. ``"cora"``.
        edge_index: ``[2, E]`` training edges (both directions, or either; canonicalised).
        num_nodes: ``N``; isolated nodes (all of whose edges are held out) stay in the graph.
        cfg: the structure section of the config.
        level: recorded in the cache (``"link"`` or ``"edge"``).
        log: receives a line when the structure has to be computed.
    """
    from xmask_cli.prepare import prepare_graphs, structure_params  # prepare imports the heavy structure code

    edges = canonical_edges(edge_index, num_nodes)
    nn = np.asarray([int(num_nodes)], dtype=np.int64)
    fingerprint = graphs_fingerprint([edges], nn)
    key = f"{dataset_key}-train-edges"
    path = cache_path(Path(cache_dir), key, cache_key(fingerprint, structure_params(cfg, level)))
    if force or not path.exists():
        log(f"preparing the structure of {dataset_key}'s training edges ({edges.shape[1] // 2} undirected edges, "
            f"{int(num_nodes)} nodes) -> {path}")
    summary = prepare_graphs(dataset_key=key, level=level, edges=[edges], num_nodes=nn, fingerprint=fingerprint,
                             cfg=cfg, cache_dir=Path(cache_dir), workers=workers, force=force, log=log)
    if not summary.cached:
        log(f"prepared {summary.path} in {summary.seconds:.1f}s")
    return Path(summary.path)


class _Structure:
    """Cached structure of the training-edge graph, ready for the model (dense or sparse)."""

    def __init__(self, path: str | os.PathLike, edge_index: np.ndarray, num_nodes: int, dense_max_nodes: int,
                 device: torch.device, attention: str = "auto", needs: Iterable[str] = (),
                 dense_only: str | None = None):
        with StructureCache(path) as c:
            if c.num_graphs != 1 or c.num_nodes(0) != num_nodes:
                raise ValueError(f"cache {path} does not hold one graph of {num_nodes} nodes")
            # The leakage guard: only a cache of exactly the training edges is accepted.
            if c.fingerprint != structure_fingerprint(edge_index, num_nodes):
                raise ValueError(f"cache {path} was not prepared from this split's training edges; "
                                 f"build it with prepare_pair_structure(..., split training edges, ...)")
            num_pairs = c.num_pairs("powers", 0)
            self.dense = full_graph_attention(attention, num_nodes, num_pairs, device, dense_max_nodes,
                                              dense_only) == "dense"
            extras = GraphExtras(c, 0, needs) if needs else None
            self.extras = None
            if self.dense:
                self.powers = torch.from_numpy(c.dense_powers(0)).unsqueeze(0).to(device)
                self.k = int(self.powers.size(1))
                if extras is not None:
                    self.extras = to_tensors(extras.dense(), device, batch_dim=True)
            else:
                row, col, vals = c.powers(0)
                self.pairs = torch.from_numpy(np.stack([row.astype(np.int64), col.astype(np.int64)])).to(device)
                self.values = torch.from_numpy(np.ascontiguousarray(vals, dtype=np.float32)).to(device)
                self.k = int(self.values.size(1))
                if extras is not None:
                    self.extras = to_tensors(extras.pairs(row, col), device)

    def encode(self, model: torch.nn.Module, x: Tensor) -> Tensor:
        """``[N, hidden]`` embeddings of every node."""
        cfg = getattr(model, "cfg", None)
        if cfg is not None and cfg.use_bias and cfg.max_power > self.k:
            raise ValueError(f"the model reads Â^{cfg.max_power} but the cache holds powers up to {self.k}; "
                             f"prepare with structure.powers.k >= {cfg.max_power}")
        if self.dense:
            return model.encode_dense(x.unsqueeze(0), self.powers, None, extras=self.extras)[0]
        return model.encode_sparse(x, self.pairs, self.values, extras=self.extras)


def one_hot_degree(edge_index: np.ndarray, num_nodes: int, cap: int = MAX_DEGREE) -> Tensor:
    """``[N, min(max degree, cap) + 1]`` one-hot degree of the (undirected, canonicalised) graph.

    The featureless fallback, as for TU sets; computed on training edges so
    held-out edges cannot leak through the features.
    """
    ei = canonical_edges(edge_index, num_nodes)
    deg = np.bincount(ei[0], minlength=int(num_nodes)) if ei.size else np.zeros(int(num_nodes), dtype=np.int64)
    width = min(int(deg.max(initial=0)), cap) + 1
    return torch.eye(width)[torch.from_numpy(np.minimum(deg, width - 1).astype(np.int64))]


# ------------------------------------------------------------------- MRR
def _chunked_mrr(pos: np.ndarray, neg_rows: Callable[[slice], np.ndarray], width: int) -> float:
    """Mean of :func:`metrics.mrr` over row chunks (bounded memory; same number as one call)."""
    p = pos.shape[0]
    step = max(1, _MRR_CHUNK // max(width, 1))
    total = 0.0
    for s in range(0, p, step):
        sl = slice(s, min(p, s + step))
        total += mrr(pos[sl], neg_rows(sl)) * (sl.stop - sl.start)
    return total / p


def link_mrr(pos_scores: Any, neg_scores: Any, protocol: str = "shared", num_neg_per_pos: int = 1) -> float:
    """MRR of ``P`` positives under ``protocol`` (see the module docstring).

    Args:
        pos_scores: ``[P]`` scores of the positives.
        neg_scores: ``[P * M]`` scores of the part's negatives, columns ``i*M..(i+1)*M-1``
            belonging to positive ``i`` (EdgeSplit's layout).
        protocol: ``shared`` (every positive against all ``P * M`` negatives) or
            ``per-positive`` (against its own ``M``).
    """
    pos = np.asarray(pos_scores.detach().cpu() if hasattr(pos_scores, "detach") else pos_scores,
                     dtype=np.float64).reshape(-1)
    neg = np.asarray(neg_scores.detach().cpu() if hasattr(neg_scores, "detach") else neg_scores,
                     dtype=np.float64).reshape(-1)
    m = int(num_neg_per_pos)
    if pos.size == 0 or neg.size != pos.size * m:
        raise ValueError(f"link_mrr: need P > 0 positives and P*M = {pos.size}*{m} negatives, got {neg.size}")
    if protocol == "shared":
        return _chunked_mrr(pos, lambda sl: np.broadcast_to(neg, (sl.stop - sl.start, neg.size)), neg.size)
    if protocol == "per-positive":
        return mrr(pos, neg.reshape(pos.size, m))
    raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")


# ------------------------------------------------------------------ tasks
def _split_name(prefix: str, fractions: Sequence[float]) -> str:
    return prefix + "-".join(f"{100 * f:g}" for f in fractions)


def _expected_sizes(total: int, fractions: Sequence[float]) -> tuple[int, int, int]:
    # The same rounding as random_split: val/test floored, train the rest.
    n_val, n_test = math.floor(total * fractions[1] + 1e-9), math.floor(total * fractions[2] + 1e-9)
    return total - n_val - n_test, n_val, n_test


def _batches(n: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled chunks of ``range(n)``; one unshuffled chunk for ``batch_size <= 0``."""
    if batch_size <= 0 or batch_size >= n:
        return [np.arange(n, dtype=np.int64)] if batch_size <= 0 else [rng.permutation(n).astype(np.int64)]
    perm = rng.permutation(n).astype(np.int64)
    return [perm[s:s + batch_size] for s in range(0, n, batch_size)]


class LinkTask:
    """Link prediction on one graph whose structure is its training edges (see the module docstring).

    Attributes:
        metric: ``"mrr"``.
        in_dim: node feature width ``F``.
        out_dim: 1 (one logit per pair).
        model_task: ``"link"`` (for :class:`ModelConfig`).
    """

    out_dim = 1
    model_task = "link"

    def __init__(self, cache_path: str | os.PathLike, features: Tensor, split: EdgeSplit, *, dataset: str,
                 metric: str = "mrr", protocol: str = "shared", seed: int = 0, device: torch.device | str = "cpu",
                 dense_max_nodes: int = 5000, batch_size: int = 0,
                 fractions: Sequence[float] = (0.85, 0.05, 0.10), needs: Iterable[str] = (),
                 dense_only: str | None = None):
        if metric != "mrr":
            raise ValueError(f"link prediction reports 'mrr', got {metric!r}")
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        n = int(split.num_nodes)
        if features.dim() != 2 or features.size(0) != n:
            raise ValueError(f"features must be [{n}, F], got {list(features.shape)}")
        sizes = (split.train_pos.shape[1], split.val_pos.shape[1], split.test_pos.shape[1])
        if _expected_sizes(sum(sizes), fractions) != sizes:
            raise ValueError(f"split sizes {sizes} were not drawn with fractions {tuple(fractions)}")
        self.metric, self.protocol, self.seed, self.batch_size = metric, protocol, int(seed), int(batch_size)
        self.dataset, self.cache_path, self.split = dataset, str(cache_path), split
        self.fractions = tuple(float(f) for f in fractions)
        self.device = torch.device(device)
        self.num_nodes = n
        self.in_dim = int(features.size(1))
        self.x = features.float().to(self.device)
        self.structure = _Structure(cache_path, split.train_edge_index, n, dense_max_nodes, self.device, needs=needs,
                                    dense_only=dense_only)
        self.train_pos = split.train_pos
        self._train_keys = np.unique(pair_keys(self.train_pos[0], self.train_pos[1], n))
        m = split.num_neg_per_pos
        known = np.unique(np.concatenate([self._train_keys, pair_keys(split.val_pos[0], split.val_pos[1], n),
                                          pair_keys(split.test_pos[0], split.test_pos[1], n)]))
        # Fixed negatives for the reported train MRR: never a known edge, the same at every call.
        train_neg = sample_negatives(self.train_pos.shape[1] * m, n, known, np.random.default_rng((split.seed, 2)))
        parts = {"train": (self.train_pos, np.stack([train_neg // n, train_neg % n])),
                 "val": (split.val_pos, split.val_neg), "test": (split.test_pos, split.test_neg)}
        self._eval = {k: (torch.from_numpy(np.ascontiguousarray(p)).to(self.device),
                          torch.from_numpy(np.ascontiguousarray(q)).to(self.device)) for k, (p, q) in parts.items()}

    def describe(self) -> dict[str, Any]:
        s = self.split
        return {
            "dataset": self.dataset,
            "cache_path": self.cache_path,
            # The split is reproducible from (edges, seed, fractions, M): no edge arrays in the config.
            "split": {"name": _split_name("edge-", self.fractions), "seed": int(s.seed),
                      "num_neg_per_pos": int(s.num_neg_per_pos), "fractions": list(self.fractions)},
            "link": {"protocol": self.protocol, "train_negatives": "uniform non-training pairs, 1 per positive, "
                     "rng (seed, epoch)", "seed": self.seed, "batch_size": self.batch_size,
                     "path": "dense" if self.structure.dense else "sparse"},
        }

    def split_sizes(self) -> dict[str, int]:
        return {part: int(self._eval[part][0].size(1)) for part in PARTS}

    def _negatives(self, count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` uniform pairs ``u != v`` that are not training edges (with replacement)."""
        n = self.num_nodes
        out: list[np.ndarray] = []
        got = 0
        while got < count:
            k = 2 * (count - got) + 16
            u, v = rng.integers(0, n, size=k), rng.integers(0, n, size=k)
            keep = (u != v) & ~np.isin(pair_keys(u, v, n), self._train_keys)
            pair = np.stack([u[keep], v[keep]])[:, :count - got]
            out.append(pair)
            got += pair.shape[1]
        return np.concatenate(out, axis=1).astype(np.int64)

    def train_batches(self, epoch: int) -> Iterator[tuple[Tensor, Tensor]]:
        # Everything random here comes from (seed, epoch): a resumed run sees the same pairs.
        rng = np.random.default_rng((self.seed, int(epoch)))
        p = self.train_pos.shape[1]
        neg = self._negatives(p, rng)
        for idx in _batches(p, self.batch_size, rng):
            yield (torch.from_numpy(self.train_pos[:, idx]).to(self.device),
                   torch.from_numpy(np.ascontiguousarray(neg[:, idx])).to(self.device))

    def loss(self, model: torch.nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, int]:
        pos, neg = batch
        h = self.structure.encode(model, self.x)
        logits = model.score_pairs(h, torch.cat([pos, neg], dim=1)).view(-1)
        labels = torch.cat([torch.ones(pos.size(1)), torch.zeros(neg.size(1))]).to(logits)
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels), int(labels.numel())

    def score(self, model: torch.nn.Module, part: str) -> float:
        pos, neg = self._eval[part]
        h = self.structure.encode(model, self.x)
        s_pos = model.score_pairs(h, pos).view(-1).float().cpu()
        s_neg = model.score_pairs(h, neg).view(-1).float().cpu()
        return link_mrr(s_pos, s_neg, self.protocol, self.split.num_neg_per_pos)


def train_edge_index(data: EdgeData, split: Split) -> np.ndarray:
    """``[2, 2T]`` edges of the training rows in both directions: the only structure EdgeTask may see."""
    ei = data.edge_index[:, split.train]
    return np.concatenate([ei, ei[::-1]], axis=1)


def edge_regression_split(num_edges: int, seed: int, fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> Split:
    """Seeded split of the rows of an edge file (:func:`random_split`), named ``edge-rows-80-10-10``."""
    return random_split(int(num_edges), fractions, seed=seed, name=_split_name("edge-rows-", fractions))


def _fractions_of(split: Split) -> list[float]:
    """The fractions in an ``edge-rows-a-b-c`` name; else the realised ones."""
    m = re.fullmatch(r"edge-rows-([0-9.e+-]+)-([0-9.e+-]+)-([0-9.e+-]+)", split.name)
    if m:
        try:
            return [float(g) / 100 for g in m.groups()]
        except ValueError:
            pass
    total = max(sum(split.sizes()), 1)
    return [s / total for s in split.sizes()]


class EdgeTask:
    """Edge regression: one target vector per row of an edge file (see the module docstring).

    Attributes:
        metric: ``"mae"`` or ``"rmse"`` (in the file's units).
        in_dim: node feature width (the file's, or the one-hot degree's).
        out_dim: ``T`` targets.
        model_task: ``"edge"``.
    """

    model_task = "edge"

    def __init__(self, cache_path: str | os.PathLike, features: Tensor | None, data: EdgeData, split: Split, *,
                 dataset: str, metric: str = "mae", seed: int = 0, device: torch.device | str = "cpu",
                 dense_max_nodes: int = 5000, batch_size: int = 0, needs: Iterable[str] = (),
                 dense_only: str | None = None):
        if metric not in ("mae", "rmse"):
            raise ValueError(f"edge regression reports 'mae' or 'rmse', got {metric!r}")
        e, n = data.num_edges, int(data.num_nodes)
        for part in PARTS:
            idx = getattr(split, part)
            if idx.size and (idx.min() < 0 or idx.max() >= e):
                raise ValueError(f"split part {part!r} holds row ids outside [0, {e})")
        if len(split.train) == 0 or len(split.val) == 0:
            # Selection reads validation only: without a validation row no epoch could be chosen.
            raise ValueError(f"edge regression needs training and validation rows, got sizes {split.sizes()}")
        self.metric, self.seed, self.batch_size = metric, int(seed), int(batch_size)
        self.dataset, self.cache_path, self.data, self.split = dataset, str(cache_path), data, split
        self.device = torch.device(device)
        train_ei = train_edge_index(data, split)
        self.structure = _Structure(cache_path, train_ei, n, dense_max_nodes, self.device, needs=needs,
                                    dense_only=dense_only)
        self.features_source = ("file" if features is not None
                                else f"one-hot degree of the training edges (cap {MAX_DEGREE})")
        if features is None:
            features = one_hot_degree(train_ei, n)
        if features.dim() != 2 or features.size(0) != n:
            raise ValueError(f"features must be [{n}, F], got {list(features.shape)}")
        self.x = features.float().to(self.device)
        self.in_dim = int(features.size(1))
        self.out_dim = int(data.targets.shape[1])
        y = torch.from_numpy(np.asarray(data.targets, dtype=np.float32))
        # Standardise by the training rows only (no held-out statistic enters optimisation).
        train_y = y[torch.from_numpy(split.train)].double()
        self.mean = train_y.mean(0).float()
        std = train_y.std(0, unbiased=False).float() if len(split.train) > 1 else torch.ones(self.out_dim)
        self.std = torch.where(std > 1e-12, std, torch.ones_like(std))  # a constant target: scale 1
        self.y = y.to(self.device)
        self.y_std = ((y - self.mean) / self.std).to(self.device)
        self.mean, self.std = self.mean.to(self.device), self.std.to(self.device)
        self.pairs = torch.from_numpy(np.ascontiguousarray(data.edge_index)).to(self.device)
        self._parts = {part: torch.from_numpy(getattr(split, part)).to(self.device) for part in PARTS}

    def describe(self) -> dict[str, Any]:
        s, d = self.split, self.data
        rows = hashlib.sha256(b"".join(getattr(s, p).tobytes() for p in PARTS)).hexdigest()
        return {
            "dataset": self.dataset,
            "cache_path": self.cache_path,
            "split": {"name": s.name, "seed": s.seed, "fractions": _fractions_of(s), "rows_sha256": rows},
            "edge": {"file": d.path, "sha256": d.sha256, "features_file": d.features_path,
                     "features_sha256": d.features_sha256, "features": self.features_source,
                     "targets": list(d.target_names), "num_nodes": int(d.num_nodes), "num_edges": d.num_edges,
                     "seed": self.seed, "batch_size": self.batch_size,
                     "path": "dense" if self.structure.dense else "sparse"},
        }

    def split_sizes(self) -> dict[str, int]:
        return dict(zip(PARTS, self.split.sizes()))

    def train_batches(self, epoch: int) -> Iterator[Tensor]:
        rng = np.random.default_rng((self.seed, int(epoch)))  # a function of (seed, epoch): resumable
        for idx in _batches(len(self.split.train), self.batch_size, rng):
            yield self._parts["train"][torch.from_numpy(idx).to(self.device)]

    def _predict(self, model: torch.nn.Module, rows: Tensor) -> Tensor:
        """Standardised predictions ``[R, T]`` of ``rows``."""
        h = self.structure.encode(model, self.x)
        return model.score_pairs(h, self.pairs[:, rows])

    def loss(self, model: torch.nn.Module, batch: Tensor) -> tuple[Tensor, int]:
        pred = self._predict(model, batch)
        return torch.nn.functional.mse_loss(pred, self.y_std[batch]), int(batch.numel())

    def score(self, model: torch.nn.Module, part: str) -> float:
        rows = self._parts[part]
        if rows.numel() == 0:
            return float("nan")
        pred = self._predict(model, rows) * self.std + self.mean  # back to the file's units
        return METRICS[self.metric](pred.float().cpu(), self.y[rows].cpu())
