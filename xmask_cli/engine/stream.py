"""Batch streaming for graph-level tasks: size buckets, padded dense batches, loaders.

A batch is a handful of graphs padded to the largest of them, with the
cached powers ``Â^1..Â^K`` scattered into a dense ``[B, K, N, N]`` tensor.
Structure is only ever read from the cache, never recomputed here.

Example::

    # features[g]: [n_g, F] node features of graph g; labels: [G] graph labels; model: an XMaskNet
    stream = GraphLevelStream(cache_path, features, labels, train_idx, batch_size=32, shuffle=True, seed=0)
    for epoch in range(epochs):
        for batch in stream.loader(epoch, num_workers=4):
            batch = batch.to(device, non_blocking=True)
            out = model(batch.inputs())  # a DenseBatch (x, powers, mask, extras) or a PackedBatch (log-powers)
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, get_worker_info

from xmask_cli.cache import StructureCache
from xmask_cli.engine.extras import GraphExtras, pad_extras, to_tensors
from xmask_cli.model.batches import DenseBatch, PackedBatch
from xmask_cli.model.logsmask import log_powers

#: Default bytes of per-graph log-powers a stream keeps (``train.log_cache_mb``; PROTEINS: 64 MB for all
#: 1,113 graphs, K=4).
LOG_CACHE_BYTES = 1 << 29


def size_buckets(
    num_nodes: np.ndarray,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int | None,
    epoch: int = 0,
) -> list[np.ndarray]:
    """Batches of positions into ``num_nodes``, graphs of similar size together.

    Positions are sorted by node count (stable: ties by position) and cut into
    consecutive chunks of ``batch_size``, so each batch pads to a size close to
    all its members. With ``shuffle`` the order of the chunks is permuted and
    ties between equal sizes are broken at random, by a generator seeded with
    ``(seed, epoch)``: the same pair always gives the same epoch.

    Returns:
        A list of int64 arrays; every position ``0..len(num_nodes)-1`` is in
        exactly one of them. Only the last chunk (in sorted order) may be short.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    num_nodes = np.asarray(num_nodes, dtype=np.int64).reshape(-1)
    if not shuffle:
        order = np.argsort(num_nodes, kind="stable")
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng = np.random.default_rng(None if seed is None else [int(seed), int(epoch)])
    # Random tie-breaks vary which equal-sized graphs share a batch across epochs,
    # without mixing sizes (lexsort: last key is primary).
    order = np.lexsort((rng.random(len(num_nodes)), num_nodes))
    chunks = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return [chunks[i] for i in rng.permutation(len(chunks))]


@dataclass
class GraphBatch:
    """A padded batch of whole graphs.

    Attributes:
        x: ``[B, N, F]`` float node features, 0 on padding.
        mask: ``[B, N]`` bool, True for real nodes.
        powers: ``[B, K, N, N]`` float32 ``Â^1..Â^K``, 0 off the support and on padding.
        y: ``[B]`` or ``[B, T]`` graph labels.
        index: ``[B]`` long graph ids (rows of the cache).
        extras: structure the learned biases read (``spd``, ``rrwp``, padded
            eigenpairs; see :func:`~xmask_cli.engine.extras.pad_extras`), or None.
        log_powers: per graph, its ``[K, n_b, n_b]`` :func:`~xmask_cli.model.logsmask.log_powers`
            (a stream with ``log_mask`` caches them per graph); ``powers`` is then None.
        log_spec: ``(eps, outside_support)`` the log-powers were taken with.
    """

    x: Tensor
    mask: Tensor
    powers: Tensor | None
    y: Tensor
    index: Tensor
    extras: dict[str, Tensor] | None = None
    log_powers: tuple[Tensor, ...] | None = None
    log_spec: tuple[float, str] | None = None

    @property
    def num_graphs(self) -> int:
        return int(self.index.numel())

    def _apply(self, fn: Callable[[Tensor], Tensor]) -> GraphBatch:
        extras = None if self.extras is None else {k: fn(v) for k, v in self.extras.items()}
        logp = None if self.log_powers is None else tuple(fn(t) for t in self.log_powers)
        return GraphBatch(x=fn(self.x), mask=fn(self.mask), powers=None if self.powers is None else fn(self.powers),
                          y=fn(self.y), index=fn(self.index), extras=extras, log_powers=logp, log_spec=self.log_spec)

    def inputs(self) -> DenseBatch | PackedBatch:
        """What the model reads: a :class:`PackedBatch` when the stream cached per-graph log-powers, else a
        :class:`DenseBatch` (the model's ``graph_layout`` then picks dense or packed attention)."""
        if self.log_powers is not None:
            return PackedBatch(x=self.x, mask=self.mask, log_powers=self.log_powers, log_spec=self.log_spec,
                               extras=self.extras)
        return DenseBatch(x=self.x, powers=self.powers, mask=self.mask, extras=self.extras)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> GraphBatch:
        """A copy on ``device``; ``non_blocking`` overlaps the copy when the batch is pinned."""
        return self._apply(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> GraphBatch:
        """Page-locked copy; the DataLoader calls this when ``pin_memory=True``."""
        return self._apply(lambda t: t.pin_memory())


def collate(
    cache: StructureCache,
    graph_ids: Sequence[int] | np.ndarray,
    x_list: Sequence[Tensor],
    y_list: Sequence[Tensor],
    needs: Iterable[str] = (),
    log_powers: Sequence[Tensor] | None = None,
    log_spec: tuple[float, str] | None = None,
) -> GraphBatch:
    """Pad the graphs ``graph_ids`` into one :class:`GraphBatch`.

    ``x_list[b]`` (``[n_b, F]``) and ``y_list[b]`` belong to ``graph_ids[b]``.
    Each graph's cached pairs are scattered into the dense powers tensor in
    one indexed assignment for the whole batch; N is the largest graph here.
    ``needs`` names the extra sections (``spd``, ``rrwp``, ``spectrum``,
    ``magnetic``) the model's learned biases read; they go to ``extras``.
    ``log_powers`` (per graph, with their ``log_spec``) replace the dense
    powers tensor: the batch then carries them and no ``powers``.
    """
    ids = np.asarray(graph_ids, dtype=np.int64).reshape(-1)
    if not (len(ids) == len(x_list) == len(y_list)) or len(ids) == 0:
        raise ValueError(f"collate needs as many features and labels as graphs (>= 1), got "
                         f"{len(ids)} ids, {len(x_list)} features, {len(y_list)} labels")
    sizes = np.array([cache.num_nodes(int(g)) for g in ids], dtype=np.int64)
    for g, n, x in zip(ids, sizes, x_list):
        if x.size(0) != n:
            raise ValueError(f"graph {g} has {n} nodes in the cache but {x.size(0)} feature rows")
    bsz, n_max = len(ids), max(int(sizes.max()), 1)
    powers = None
    if log_powers is None:
        pairs = [cache.powers(int(g)) for g in ids]
        k = pairs[0][2].shape[1]
        # Build the scatter indices once for the batch: (graph, row, col) per stored pair.
        counts = np.array([len(r) for r, _, _ in pairs], dtype=np.int64)
        b_idx = np.repeat(np.arange(bsz, dtype=np.int64), counts)
        rows = np.concatenate([r for r, _, _ in pairs]).astype(np.int64, copy=False)
        cols = np.concatenate([c for _, c, _ in pairs]).astype(np.int64, copy=False)
        vals = np.concatenate([v for _, _, v in pairs]).astype(np.float32, copy=False)
        powers = np.zeros((bsz, k, n_max, n_max), dtype=np.float32)
        powers[b_idx, :, rows, cols] = vals  # advanced indices around a slice: the value is [P, K]
    elif len(log_powers) != bsz or log_spec is None:
        raise ValueError("log_powers need one tensor per graph and their log_spec")

    feat = x_list[0]
    x = feat.new_zeros((bsz, n_max, *feat.shape[1:]))
    mask = torch.zeros(bsz, n_max, dtype=torch.bool)
    for b, (n, xb) in enumerate(zip(sizes, x_list)):
        x[b, :n] = xb
        mask[b, :n] = True
    extras = None
    needs = frozenset(needs)
    if needs:
        extras = to_tensors(pad_extras([GraphExtras(cache, int(g), needs).dense() for g in ids], n_max))
    return GraphBatch(
        x=x,
        mask=mask,
        powers=None if powers is None else torch.from_numpy(powers),
        y=torch.stack([torch.as_tensor(y) for y in y_list]),
        index=torch.from_numpy(ids.copy()),
        extras=extras,
        log_powers=None if log_powers is None else tuple(log_powers),
        log_spec=None if log_powers is None else log_spec,
    )


class EpochBatches(Dataset[GraphBatch]):
    """Map-style dataset whose item ``i`` is the ``i``-th :class:`GraphBatch` of one epoch.

    The batches are fixed up front, so a DataLoader (``batch_size=None``) with
    any number of workers yields them in the same order as a plain loop.
    """

    def __init__(self, stream: GraphLevelStream, batches: list[np.ndarray]):
        self.stream = stream
        self.batches = batches

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> GraphBatch:
        return self.stream.collate(self.batches[i])


def _fresh_seed() -> int:
    """A seed from the OS's entropy, below ``2**63``."""
    entropy = np.random.SeedSequence().entropy  # an int when no entropy is given
    return int(cast(int, entropy) % (1 << 63))


def _worker_init(worker_id: int) -> None:
    """Give each worker its own cache handle (HDF5 handles survive neither pickling nor fork)."""
    info = get_worker_info()
    assert info is not None
    cast(EpochBatches, info.dataset).stream._reopen_in_worker()  # the loader's dataset is always one


class GraphLevelStream:
    """Bucketed, padded batches of one split of a graph-level dataset.

    Args:
        cache_path: the structure cache of the dataset (``xmask prepare``).
        features: ``features[g]`` is the ``[n_g, F]`` node features of graph ``g``.
        labels: ``[G]`` or ``[G, T]``, indexed by graph id.
        indices: graph ids of this split.
        batch_size: graphs per batch.
        shuffle: permute the batch order (and equal-size ties) every epoch.
        seed: makes every epoch reproducible; None draws one per stream.
        load_in_memory: read the whole cache once (when it fits) instead of
            reading each batch from the file.
        needs: extra structure sections the batches carry (see :func:`collate`).
        log_mask: ``(eps, outside_support)``: batches carry each graph's
            log-powers (:func:`~xmask_cli.model.logsmask.log_powers`), taken once per
            graph and kept (up to ``log_cache_bytes``), instead of the dense
            powers tensor; what the packed graph layout reads. None: dense powers.
        log_cache_bytes: how many bytes of log-powers the stream keeps; a graph
            beyond it is computed again for each batch that holds it.
    """

    def __init__(
        self,
        cache_path: str | os.PathLike[str],
        features: Sequence[Tensor],
        labels: Tensor,
        indices: Sequence[int] | np.ndarray | Tensor,
        batch_size: int,
        shuffle: bool = False,
        seed: int | None = None,
        *,
        load_in_memory: bool = False,
        needs: Iterable[str] = (),
        log_mask: tuple[float, str] | None = None,
        log_cache_bytes: int = LOG_CACHE_BYTES,
    ):
        if log_cache_bytes < 0:
            raise ValueError(f"log_cache_bytes must be >= 0, got {log_cache_bytes}")
        self.log_cache_bytes = int(log_cache_bytes)
        self.cache = StructureCache(cache_path)
        self.log_spec = None if log_mask is None else (float(log_mask[0]), str(log_mask[1]))
        self._log_cache: dict[int, Tensor] = {}
        self._log_bytes = 0
        self.needs = frozenset(needs)
        self.features = list(features)
        self.labels = labels
        self.indices = np.asarray(torch.as_tensor(indices).cpu(), dtype=np.int64).reshape(-1)
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        # Draw a seed once if none is given, so epoch(e) is at least stable within this stream.
        self.seed = _fresh_seed() if seed is None else int(seed)
        self.load_in_memory = bool(load_in_memory)
        self._epoch = 0
        if self.load_in_memory:
            self.cache.load_in_memory()
        num_graphs = self.cache.num_graphs
        if len(self.indices) and (self.indices.min() < 0 or self.indices.max() >= num_graphs):
            raise ValueError(f"indices out of range for a cache of {num_graphs} graphs")
        if len(self.features) != num_graphs or len(self.labels) != num_graphs:
            raise ValueError(f"cache has {num_graphs} graphs, got {len(self.features)} features "
                             f"and {len(self.labels)} labels")
        all_nodes = np.array([self.cache.num_nodes(g) for g in range(num_graphs)], dtype=np.int64)
        self.num_nodes = all_nodes[self.indices]
        # Workers open their own handle; the parent's must not be open across a fork.
        self.cache.close()

    def __len__(self) -> int:
        return -(-len(self.indices) // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Epoch that ``iter(stream)`` streams next (as ``DistributedSampler.set_epoch``)."""
        self._epoch = int(epoch)

    def batches(self, epoch: int) -> list[np.ndarray]:
        """Graph ids of each batch of ``epoch``, in streaming order."""
        chunks = size_buckets(self.num_nodes, self.batch_size, shuffle=self.shuffle, seed=self.seed, epoch=epoch)
        return [self.indices[c] for c in chunks]

    def collate(self, graph_ids: np.ndarray, dense_powers: bool = False) -> GraphBatch:
        """The padded batch of ``graph_ids``; ``dense_powers``: with ``powers`` even under ``log_mask``.

        (``explain`` records the terms of the dense path, which reads the powers tensor.)
        """
        ids = np.asarray(graph_ids, dtype=np.int64)
        logp = None if self.log_spec is None or dense_powers else [self.graph_log_powers(int(g)) for g in ids]
        return collate(self.cache, ids, [self.features[g] for g in ids], [self.labels[g] for g in ids], self.needs,
                       log_powers=logp, log_spec=self.log_spec)

    def graph_log_powers(self, g: int) -> Tensor:
        """Graph ``g``'s ``[K, n, n]`` log-powers under :attr:`log_spec`, taken once and kept.

        The log-mask of a graph never changes, so each graph's is computed on
        its first batch and reused by every later one (up to
        ``log_cache_bytes`` per stream; graphs beyond it are computed per batch).
        """
        if self.log_spec is None:
            raise ValueError("this stream was built without log_mask")
        hit = self._log_cache.get(g)
        if hit is not None:
            return hit
        row, col, vals = self.cache.powers(g)
        n = self.cache.num_nodes(g)
        dense = np.zeros((vals.shape[1], n, n), dtype=np.float32)
        dense[:, row.astype(np.int64), col.astype(np.int64)] = vals.T
        eps, outside = self.log_spec
        out = log_powers(torch.from_numpy(dense), eps, outside, off_diagonal=~torch.eye(n, dtype=torch.bool),
                         inplace=True)  # `dense` is this call's scratch: no second [K, n, n] copy
        if self._log_bytes + out.numel() * out.element_size() <= self.log_cache_bytes:
            self._log_cache[g] = out
            self._log_bytes += out.numel() * out.element_size()
        return out

    def warm_log_cache(self, graph_ids: np.ndarray | None = None) -> None:
        """Take the log-powers of ``graph_ids`` (default: the split's) into the cache, up to its budget.

        A no-op without ``log_mask`` or with a zero budget; stops at the first graph
        that does not fit (graphs are taken in order, so the budget goes to the first
        ones), judged from its node count before any of its powers are read.
        """
        if self.log_spec is None or self.log_cache_bytes == 0:
            return
        k = int(self.cache.params["powers"]["k"])
        ids = self.indices if graph_ids is None else np.asarray(graph_ids, dtype=np.int64).reshape(-1)
        for g in map(int, ids):
            if g in self._log_cache:
                continue
            if self._log_bytes + k * self.cache.num_nodes(g) ** 2 * 4 > self.log_cache_bytes:  # float32 [K, n, n]
                break
            self.graph_log_powers(g)

    def epoch(self, e: int) -> Iterator[GraphBatch]:
        """Batches of epoch ``e`` in this process (no workers)."""
        for ids in self.batches(e):
            yield self.collate(ids)

    def __iter__(self) -> Iterator[GraphBatch]:
        return self.epoch(self._epoch)

    def dataset(self, e: int) -> EpochBatches:
        """Epoch ``e`` as a map-style dataset of batches."""
        return EpochBatches(self, self.batches(e))

    def loader(self, e: int, num_workers: int = 0, pin_memory: bool | None = None, *,
               batches: list[np.ndarray] | None = None) -> DataLoader[GraphBatch]:
        """A DataLoader over the batches of epoch ``e``, in the same order as :meth:`epoch`.

        ``pin_memory`` defaults to whether CUDA is available; ``batches`` (graph ids
        per batch) replaces the epoch's list, e.g. one rank's share of it.
        """
        if pin_memory is None:
            pin_memory = torch.cuda.is_available()
        if num_workers > 0:
            # Workers start anew every epoch and would otherwise take every graph's log again each
            # epoch: fill the cache here once, and forked workers inherit it (copy-on-write).
            self.warm_log_cache(np.concatenate(batches) if batches else self.indices)
            self.cache.close()  # a handle opened since must not be inherited by forked workers
        return DataLoader(
            self.dataset(e) if batches is None else EpochBatches(self, batches),
            batch_size=None,  # items are whole batches already
            shuffle=False,  # the order is the epoch's bucketed order
            num_workers=num_workers,
            pin_memory=pin_memory,
            worker_init_fn=_worker_init if num_workers > 0 else None,
        )

    def _reopen_in_worker(self) -> None:
        """Inside a worker: drop any inherited handle; reload arrays lost to pickling."""
        # An inherited HDF5 id belongs to the parent process: forget it (not close) and open lazily.
        self.cache.forget_handle()
        if self.load_in_memory and not self.cache.in_memory:  # spawned workers get the cache without its arrays
            self.cache.load_in_memory()
